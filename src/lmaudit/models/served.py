"""A model behind an OpenAI-compatible endpoint (llama.cpp's Python server, vLLM): the protocol an audit speaks.

The transport (retries, bounds, credentials, the answers kept on disk) is :mod:`lmaudit.models.endpoint`.

Prompt log-probabilities come from ``/v1/completions`` with ``echo`` and ``logprobs``, the prompt sent as the text
led by the text of the model's BOS token (servers take text prompts; they parse special tokens in them): a server
pairs each prompt token with the distribution that predicted it only when the prompt starts with BOS
(llama-cpp-python drops that BOS from the echoed tokens and gives the first remaining token no log-probability, as
OpenAI's API does). ``max_tokens`` is 1, never 0 (0 asks llama-cpp-python for
as many tokens as the context holds); the one generated token is dropped. Before any text is scored,
:func:`check_alignment` proves on a probe text that the echoed tokens are the ids sent, that each log-probability
is the one the same server gives when asked for that token's prefix alone, and that the first entry is the null
one; a server that fails any of these is refused with the check it failed, never scored.

Every answer is checked before it is used or kept (:func:`read_prompt_logprobs`): the echo spells the prompt, the
three lists are aligned, and every log-probability read, the top-k ones included, is finite and at most 0, the
top-k's mass at most 1 and the token's own value no larger than the largest of them. That the served model stayed
the same through a run is :mod:`lmaudit.models.served_identity`'s.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from lmaudit.errors import LmauditError
from lmaudit.models.endpoint import API_KEY_ENV as API_KEY_ENV
from lmaudit.models.endpoint import Endpoint as Endpoint
from lmaudit.models.endpoint import is_endpoint as is_endpoint
from lmaudit.models.endpoint import public_url as public_url
from lmaudit.utils import stable_hash

ALIGNMENT_TOLERANCE = 1e-3  # nats: two answers of one server for one distribution agree to float32 rounding
LOGPROB_SLACK = 1e-6  # a log-probability above 0 by more than float rounding is no log-probability
PROBE_TEXT = "The quick brown fox jumps over the lazy dog, and then it runs back home."


@dataclass(frozen=True)
class PromptLogprobs:
    """What a server says of a prompt ``BOS + text``, text tokens ``t₁ … tₙ``: for each of ``t₂ … tₙ`` its text, its
    log-probability given what precedes it, and the top log-probabilities the server returned at its position
    (text → log-probability; the token itself is among them). ``t₁`` has no log-probability (the null first
    entry)."""

    tokens: list[str]  # the texts of t₁ … tₙ
    logprobs: list[float]  # of t₂ … tₙ
    top: list[dict[str, float]]  # at t₂ … tₙ
    spelled: bool = True  # the token texts spell the text (else they are the local tokenizer's, some rendered apart)

    def offsets(self, local: list[int] | None = None) -> list[int]:
        """The first character of each token in the text: from the token texts where they spell it, else the local
        tokenizer's offsets ``local`` (the same tokens)."""
        if self.spelled or local is None:
            return [int(x) for x in np.cumsum([0] + [len(t) for t in self.tokens])[:-1]]
        return list(local)


PIECE_AGREEMENT = 0.9  # share of token texts that must equal the local tokenizer's when the echo misspells some


def prompt_logprobs(endpoint: Endpoint, text: str, *, bos_text: str, top_k: int, n_tokens: int | None = None,
                    pieces: list[str] | None = None, cached: bool = True) -> PromptLogprobs:
    """The prompt log-probabilities of ``text`` led by the BOS token (its text ``bos_text``), from one request
    whose answer passes :func:`read_prompt_logprobs` before it is used or kept."""
    read = []
    endpoint.completion(bos_text + text, echo=True, logprobs=top_k, max_tokens=1, cached=cached,
                        check=lambda choice: read.append(read_prompt_logprobs(choice, text, pieces=pieces,
                                                                              n_tokens=n_tokens, where=endpoint.url)))
    return read[-1]


def _logprob(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) \
        and value <= LOGPROB_SLACK


def read_prompt_logprobs(choice: dict, text: str, *, pieces: list[str] | None = None, n_tokens: int | None = None,
                         where: str = "the server") -> PromptLogprobs:
    """The prompt log-probabilities a completions choice gives of ``text``, or a refusal naming what is wrong.

    The server's own tokens are scored: its echo must spell ``text`` (its tokenizer may split a text otherwise than
    the local one, e.g. llama.cpp keeps a double newline as one token: the served model reads its own split). A
    server may also render some tokens' texts otherwise (llama.cpp returns a run of spaces after a newline as an
    empty text): with ``pieces``, the local tokenizer's text of each of its tokens, an echo of exactly as many tokens
    whose texts equal the local ones at :data:`PIECE_AGREEMENT` of the positions is accepted (the same tokens, some
    rendered otherwise). ``n_tokens`` (the alignment self-test) demands the local count exactly. The one generated
    token after the prompt is told apart by the finish reason ("length": one, "stop": none). Every value read is
    checked: the first entry null, then each token's log-probability and each of its top-k finite and at most 0,
    the top-k's probabilities summing to at most 1, the token's own value no larger than their largest."""
    lp = choice.get("logprobs")
    if not isinstance(lp, dict):
        raise LmauditError(f"{where}: no log-probabilities in the answer",
                           hint="start llama-cpp-python's server with --logits_all true (vLLM: pass "
                                "--max-logprobs at least the top-k asked)")
    tokens, values, top = lp.get("tokens"), lp.get("token_logprobs"), lp.get("top_logprobs")
    if not (isinstance(tokens, list) and isinstance(values, list) and isinstance(top, list)) or not tokens:
        raise LmauditError(f"{where}: the log-probabilities lack tokens, token_logprobs or top_logprobs")
    tokens = [str(t) for t in tokens]
    # the BOS is not echoed; after the prompt one generated token ("length"), or none when the model ended it there
    extras = {"length": (1,), "stop": (0,)}.get(choice.get("finish_reason"), (1, 0))
    n = next((len(tokens) - e for e in extras if "".join(tokens[: len(tokens) - e]) == text), None)
    if n is None and pieces is not None and len(tokens) - len(pieces) in extras:
        agree = sum(a == b for a, b in zip(tokens, pieces))
        n = len(pieces) if agree >= PIECE_AGREEMENT * len(pieces) else None
    if n is None or (n_tokens is not None and n != n_tokens) or not len(values) == len(top) == len(tokens):
        raise LmauditError(f"{where}: the echoed tokens do not spell the prompt's text" +
                           ("" if n_tokens is None else f" in the {n_tokens} tokens of the local tokenizer"),
                           hint="the server did not echo the prompt as sent, kept its BOS token, or tokenizes "
                                "otherwise (is it an OpenAI-compatible completions endpoint with echo, the BOS text "
                                "right, the tokenizer the served model's?)")
    if values[0] is not None:
        raise LmauditError(f"{where}: the first prompt token has a log-probability",
                           hint="the server does not strip the BOS token it was sent: its log-probabilities are "
                                "paired with other tokens than the ones it names")
    for i in range(1, n):
        if not _logprob(values[i]):
            raise LmauditError(f"{where}: prompt token {i}'s log-probability is missing, not finite or above 0 "
                               f"({values[i]!r})", hint="the server's answers are not log-probabilities")
        alts = top[i]
        if not isinstance(alts, dict) or not alts or not all(_logprob(v) for v in alts.values()):
            raise LmauditError(f"{where}: prompt token {i}'s top log-probabilities are missing, not finite or above 0",
                               hint="the server's answers are not log-probabilities")
        largest = max(alts.values())
        if sum(math.exp(v) for v in alts.values()) > 1 + ALIGNMENT_TOLERANCE or \
                values[i] > largest + ALIGNMENT_TOLERANCE:
            raise LmauditError(f"{where}: prompt token {i}'s top log-probabilities are no distribution's (their mass "
                               "exceeds 1, or the token's own value exceeds the largest)",
                               hint="the server's answers are not log-probabilities")
    return PromptLogprobs(tokens=tokens[:n], logprobs=[float(v) for v in values[1:n]],
                          top=[{str(k): float(v) for k, v in top[i].items()} for i in range(1, n)],
                          spelled="".join(tokens[:n]) == text)


@dataclass(frozen=True)
class Alignment:
    """The alignment self-test's findings: what was checked and the largest disagreement found."""

    bos_id: int
    n_tokens: int
    checked_positions: list[int]
    largest_gap: float  # nats, between the echoed log-probability and the one asked for alone
    probe: list[float] | None = None  # the probe text's log-probabilities: the served model's identity at the start

    def as_dict(self) -> dict:
        return {"bos_id": self.bos_id, "n_tokens": self.n_tokens, "checked_positions": self.checked_positions,
                "largest_gap_nats": self.largest_gap, "tolerance_nats": ALIGNMENT_TOLERANCE}


def check_alignment(endpoint: Endpoint, tokenizer, bos_id: int, *, top_k: int = 5, text: str = PROBE_TEXT,
                    positions: int = 3) -> Alignment:
    """Prove that ``endpoint`` pairs each prompt token with the distribution that predicted it, or refuse it.

    ``tokenizer`` is the served model's (a local copy); when the server tokenizes, its ids for ``text`` must be the
    local ones (a mismatch would score other tokens than the texts'). Then, on BOS + ``text``: the echoed token
    texts must spell ``text``; the first entry must be null; and at ``positions`` positions spread over the text,
    the distribution the echo pairs with token i must be the one a request for BOS + its first i tokens generates
    from: the greedy token's log-probability there is among the echo's top-k at i, to
    :data:`ALIGNMENT_TOLERANCE` (compared by value: texts of tokens depend on their context). A server that shifts
    its log-probabilities by one (a prompt without BOS on llama-cpp-python) fails the last check.
    """
    ids = list(tokenizer(text, add_special_tokens=False)["input_ids"])
    served_ids = endpoint.tokenize(text)
    if served_ids is not None:
        served_ids = [t for t in served_ids if t != bos_id]
        if served_ids != ids:
            first = next((i for i, (a, b) in enumerate(zip(served_ids, ids)) if a != b), min(len(ids),
                                                                                            len(served_ids)))
            raise LmauditError(f"{endpoint.url}: the server's tokenizer differs from the local one (token {first} of "
                               "the probe text)", hint="give the tokenizer of the model the server serves")
    bos_text = tokenizer.convert_ids_to_tokens(bos_id)
    echoed = prompt_logprobs(endpoint, text, bos_text=bos_text, top_k=top_k, n_tokens=len(ids), cached=False)
    endpoint.identity = identity(endpoint, echoed)  # answers are cached under what this model says
    # at each checked position, the greedy next token asked for the prefix alone: its log-probability (the server
    # keys it by id, not by text) must be one of the top-k the echo gave at that position, the same distribution
    picks = sorted({1 + round(k * (len(ids) - 2) / max(positions - 1, 1)) for k in range(positions)})
    gap = 0.0
    for i in picks:
        alone = endpoint.completion(bos_text + "".join(echoed.tokens[:i]), echo=False, logprobs=max(top_k, 1),
                                    max_tokens=1, check=lambda choice: generated_logprob(choice, endpoint.url))
        value = generated_logprob(alone, endpoint.url)
        nearest = min(abs(float(v) - float(value)) for v in echoed.top[i - 1].values())
        gap = max(gap, nearest)
        if nearest > ALIGNMENT_TOLERANCE:
            raise LmauditError(f"{endpoint.url}: token {i}: asked for the prefix alone, the most likely next token "
                               f"has log-probability {float(value):.4f}; echo's top {top_k} at that position holds "
                               f"nothing within {nearest:.4f} of it", hint="its echoed log-probabilities belong to "
                               "other positions: is the model served with --logits_all true, and prefix caching off?")
    return Alignment(bos_id=bos_id, n_tokens=len(ids), checked_positions=picks, largest_gap=gap, probe=echoed.logprobs)


def generated_logprob(choice: dict, where: str) -> float:
    """The log-probability of the one token a completions choice generated, or a refusal."""
    value = ((choice.get("logprobs") or {}).get("token_logprobs") or [None])[0]
    if not _logprob(value):
        raise LmauditError(f"{where}: no log-probability (finite, at most 0) for a generated token ({value!r})",
                           hint="the server must return logprobs for generated tokens too")
    return float(value)


def identity(endpoint: Endpoint, probe: PromptLogprobs) -> str:
    """A digest of the served model: its name and its log-probabilities of the probe text to 1e-4 nats (another
    model, or other weights under the same name, answers otherwise)."""
    return stable_hash(endpoint.url, endpoint.model, probe.tokens, [round(v, 4) for v in probe.logprobs])
