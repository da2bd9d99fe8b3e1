"""A model behind an OpenAI-compatible endpoint (llama.cpp's Python server, vLLM): the client an audit asks.

An endpoint is named by its URL (``http://127.0.0.1:8080/v1``) and, where it serves several, the model's name.
Credentials come only from the environment (``LMAUDIT_API_KEY``, sent as a bearer token); the URL an audit records
carries no user, password or query. TLS certificates are verified unless the caller says otherwise.

Prompt log-probabilities come from ``/v1/completions`` with ``echo`` and ``logprobs``, the prompt sent as the text
led by the text of the model's BOS token (servers take text prompts; they parse special tokens in them): a server
pairs each prompt token with the distribution that predicted it only when the prompt starts with BOS
(llama-cpp-python drops that BOS from the echoed tokens and gives the first remaining token no log-probability, as
OpenAI's API does). ``max_tokens`` is 1, never 0 (0 asks llama-cpp-python for
as many tokens as the context holds); the one generated token is dropped. Before any text is scored,
:func:`check_alignment` proves on a probe text that the echoed tokens are the ids sent, that each log-probability
is the one the same server gives when asked for that token's prefix alone, and that the first entry is the null
one; a server that fails any of these is refused with the check it failed, never scored.

Requests are retried with backoff on timeouts, connection errors, 429 and 5xx; an answer that is not JSON (an HTML
error page, a proxy's login form) is an error naming the URL. Each answer is cached on disk under the request's
digest (the URL without credentials, the model, the body), written whole, so a killed run resumes without asking
again and gives what an uninterrupted run gives.
"""

from __future__ import annotations

import json
import math
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import numpy as np
import requests

from lmaudit.errors import LmauditError
from lmaudit.utils import cache_dir, stable_hash, write_json_atomic

API_KEY_ENV = "LMAUDIT_API_KEY"
RETRY_STATUS = (429, 500, 502, 503, 504)
ALIGNMENT_TOLERANCE = 1e-3  # nats: two answers of one server for one distribution agree to float32 rounding
PROBE_TEXT = "The quick brown fox jumps over the lazy dog, and then it runs back home."


def is_endpoint(source) -> bool:
    """Whether a model source names a served model (an http or https URL) rather than a folder, file or name."""
    return isinstance(source, str) and source.lower().startswith(("http://", "https://"))


def public_url(url: str) -> str:
    """``url`` as results may record it: no user, password, query or fragment, no trailing slash."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    netloc = f"[{host}]" if ":" in host else host
    if parts.port:
        netloc += f":{parts.port}"
    return urlunsplit((parts.scheme, netloc, parts.path.rstrip("/"), "", ""))


@dataclass
class Endpoint:
    """An OpenAI-compatible server at ``url`` serving ``model`` (None: the only one it lists).

    ``verify``: check TLS certificates; ``timeout``: seconds per request; ``retries``: attempts after the first
    on a timeout, a dropped connection, 429 or 5xx, waiting ``backoff`` × 2ⁿ seconds; ``cache``: keep every answer
    on disk under the request's digest (a resumed run does not ask again).
    """

    url: str
    model: str | None = None
    verify: bool = True
    timeout: float = 120.0
    retries: int = 4
    backoff: float = 0.5
    cache: bool = True
    requests_made: int = field(default=0, init=False)  # answers that came from the server, not the cache
    identity: str | None = field(default=None, init=False)  # the served model's answer to the probe: keys the cache
    _local: threading.local = field(default_factory=threading.local, init=False, repr=False)  # a session per thread
    _count: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    def __post_init__(self) -> None:
        if not is_endpoint(self.url):
            raise LmauditError(f"'{self.url}' is not an http(s) URL", hint="name the server, e.g. "
                               "http://127.0.0.1:8080/v1")
        parts = urlsplit(self.url)
        if parts.username or parts.password:
            raise LmauditError(f"the URL of {public_url(self.url)} carries credentials",
                               hint=f"give the key in the environment variable {API_KEY_ENV}, never in the URL")
        self.url = public_url(self.url)

    # -- transport

    def _headers(self) -> dict:
        key = os.environ.get(API_KEY_ENV)
        return {"Authorization": f"Bearer {key}"} if key else {}

    def _cache_file(self, path: str, body: dict | None) -> Path:
        digest = stable_hash("served", self.url, self.identity or "", path,
                             json.dumps(body, sort_keys=True) if body else "")
        return cache_dir() / "served" / digest[:2] / f"{digest}.json"

    def ask(self, path: str, body: dict | None = None, *, cached: bool = True) -> dict:
        """The JSON answer of ``POST url/path`` with ``body`` (``GET`` without one), from the cache when it holds it.
        Retries as the endpoint says; an answer that is not JSON, or an error status, is an error naming the URL."""
        where = self._cache_file(path, body) if (self.cache and cached) else None
        if where is not None and where.is_file():
            try:
                return json.loads(where.read_text(encoding="utf-8"))
            except (OSError, UnicodeDecodeError, json.JSONDecodeError):
                pass  # a damaged entry is asked again and written whole
        answer = self._request(path, body)
        if where is not None:
            write_json_atomic(where, answer)
        return answer

    def _request(self, path: str, body: dict | None) -> dict:
        session = getattr(self._local, "session", None)
        if session is None:  # requests' sessions are not shared between threads
            session = self._local.session = requests.Session()
        # a path is under the API's root (``completions``), or with a leading slash under the server's (``/tokenize``)
        root = urlsplit(self.url)
        url = urlunsplit((root.scheme, root.netloc, path, "", "")) if path.startswith("/") else f"{self.url}/{path}"
        last = ""
        for attempt in range(self.retries + 1):
            if attempt:
                time.sleep(self.backoff * 2 ** (attempt - 1))
            try:
                if body is None:
                    response = session.get(url, headers=self._headers(), timeout=self.timeout,
                                                 verify=self.verify)
                else:
                    response = session.post(url, json=body, headers=self._headers(), timeout=self.timeout,
                                                  verify=self.verify)
            except requests.exceptions.SSLError as exc:
                raise LmauditError(f"{url}: TLS certificate not verified ({exc.__class__.__name__})",
                                   hint="fix the server's certificate (or, for a server you trust, verify=False)"
                                   ) from None
            except (requests.exceptions.ConnectionError, requests.exceptions.Timeout) as exc:
                last = f"{exc.__class__.__name__}"
                continue
            if response.status_code in RETRY_STATUS:
                last = f"HTTP {response.status_code}"
                continue
            return self._json(url, response)
        raise LmauditError(f"{url}: no answer after {self.retries + 1} attempts (last: {last})",
                           hint="is the server running and reachable? finished requests are cached: run again")

    def _json(self, url: str, response: requests.Response) -> dict:
        with self._count:
            self.requests_made += 1
        if response.status_code >= 400:
            detail = response.text.strip().splitlines()[0][:200] if response.text.strip() else ""
            raise LmauditError(f"{url}: HTTP {response.status_code} {detail}".rstrip(),
                               hint="check the endpoint's URL, the model's name and the key in "
                                    f"{API_KEY_ENV}")
        try:
            answer = response.json()
        except ValueError:
            kind = response.headers.get("content-type", "no content type")
            raise LmauditError(f"{url}: the answer is not JSON ({kind})",
                               hint="the URL names something else than an OpenAI-compatible API (it ends in /v1)"
                               ) from None
        if not isinstance(answer, dict):
            raise LmauditError(f"{url}: the answer is not a JSON object")
        return answer

    # -- what the server offers

    def models(self) -> list[str]:
        """The model names ``/models`` lists (asked every time: a served model may change)."""
        answer = self.ask("models", cached=False)
        data = answer.get("data")
        if not isinstance(data, list):
            raise LmauditError(f"{self.url}/models: no model list in the answer")
        return [str(m.get("id")) for m in data if isinstance(m, dict)]

    def served_model(self) -> str:
        """The model this endpoint audits: the one named, which must be listed, else the only one listed."""
        listed = self.models()
        if self.model is not None:
            if self.model not in listed:
                raise LmauditError(f"{self.url} does not serve '{self.model}'",
                                   hint=f"it serves {', '.join(listed) or 'nothing'}")
            return self.model
        if len(listed) != 1:
            raise LmauditError(f"{self.url} serves {len(listed)} models: name one",
                               hint=f"one of {', '.join(listed)}" if listed else "is the server loaded?")
        return listed[0]

    def tokenize(self, text: str) -> list[int] | None:
        """The server's token ids of ``text`` (llama-cpp-python's ``/extras/tokenize``, vLLM's ``/tokenize``), asked
        every time (never from the cache: it checks the server as it is now); None when it offers neither."""
        for path, body in (("/extras/tokenize", {"input": text}), ("/tokenize", {"prompt": text})):
            try:
                answer = self.ask(path, {**body, "model": self.model}, cached=False)  # a check: asked every time
            except LmauditError:
                continue
            tokens = answer.get("tokens")
            if isinstance(tokens, list) and all(isinstance(t, int) for t in tokens):
                return tokens
        return None

    def completion(self, prompt: str, *, echo: bool, logprobs: int | None, max_tokens: int = 1,
                   temperature: float = 0.0, seed: int = 0, cached: bool = True) -> dict:
        """The first choice of ``/completions`` for the text ``prompt``."""
        body = {"model": self.model, "prompt": prompt, "echo": echo, "max_tokens": max_tokens,
                "temperature": temperature, "seed": seed}
        if logprobs is not None:
            body["logprobs"] = logprobs
        answer = self.ask("completions", body, cached=cached)
        choices = answer.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            raise LmauditError(f"{self.url}/completions: no choices in the answer")
        return choices[0]


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
    """The prompt log-probabilities of ``text`` led by the BOS token (its text ``bos_text``), from one request.

    The server's own tokens are scored: its echo must spell ``text`` (its tokenizer may split a text otherwise than
    the local one, e.g. llama.cpp keeps a double newline as one token: the served model reads its own split). A
    server may also render some tokens' texts otherwise (llama.cpp returns a run of spaces after a newline as an
    empty text): with ``pieces``, the local tokenizer's text of each of its tokens, an echo of exactly as many tokens
    whose texts equal the local ones at :data:`PIECE_AGREEMENT` of the positions is accepted (the same tokens, some
    rendered otherwise). ``n_tokens`` (the alignment self-test) demands the local count exactly. The one generated
    token after the prompt is told apart by the finish reason ("length": one, "stop": none)."""
    choice = endpoint.completion(bos_text + text, echo=True, logprobs=top_k, max_tokens=1, cached=cached)
    lp = choice.get("logprobs")
    if not isinstance(lp, dict):
        raise LmauditError(f"{endpoint.url}: no log-probabilities in the answer",
                           hint="start llama-cpp-python's server with --logits_all true (vLLM: pass "
                                "--max-logprobs at least the top-k asked)")
    tokens, values, top = lp.get("tokens"), lp.get("token_logprobs"), lp.get("top_logprobs")
    if not (isinstance(tokens, list) and isinstance(values, list) and isinstance(top, list)) or not tokens:
        raise LmauditError(f"{endpoint.url}: the log-probabilities lack tokens, token_logprobs or top_logprobs")
    tokens = [str(t) for t in tokens]
    # the BOS is not echoed; after the prompt one generated token ("length"), or none when the model ended it there
    extras = {"length": (1,), "stop": (0,)}.get(choice.get("finish_reason"), (1, 0))
    n = next((len(tokens) - e for e in extras if "".join(tokens[: len(tokens) - e]) == text), None)
    if n is None and pieces is not None and len(tokens) - len(pieces) in extras:
        agree = sum(a == b for a, b in zip(tokens, pieces))
        n = len(pieces) if agree >= PIECE_AGREEMENT * len(pieces) else None
    if n is None or (n_tokens is not None and n != n_tokens) or not len(values) == len(top) == len(tokens):
        raise LmauditError(f"{endpoint.url}: the echoed tokens do not spell the prompt's text" +
                           ("" if n_tokens is None else f" in the {n_tokens} tokens of the local tokenizer"),
                           hint="the server did not echo the prompt as sent, kept its BOS token, or tokenizes "
                                "otherwise (is it an OpenAI-compatible completions endpoint with echo, the BOS text "
                                "right, the tokenizer the served model's?)")
    if values[0] is not None:
        raise LmauditError(f"{endpoint.url}: the first prompt token has a log-probability",
                           hint="the server does not strip the BOS token it was sent: its log-probabilities are "
                                "paired with other tokens than the ones it names")
    rest = values[1:n]
    if any(not isinstance(v, (int, float)) or not math.isfinite(v) or v > 1e-6 for v in rest):
        raise LmauditError(f"{endpoint.url}: a prompt log-probability is missing, infinite or above 0")
    spelled = "".join(tokens[:n]) == text
    return PromptLogprobs(tokens=tokens[:n], logprobs=[float(v) for v in rest],
                          top=[{str(k): float(v) for k, v in (t or {}).items()} for t in top[1:n]], spelled=spelled)


@dataclass(frozen=True)
class Alignment:
    """The alignment self-test's findings: what was checked and the largest disagreement found."""

    bos_id: int
    n_tokens: int
    checked_positions: list[int]
    largest_gap: float  # nats, between the echoed log-probability and the one asked for alone

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
                                    max_tokens=1)
        value = ((alone.get("logprobs") or {}).get("token_logprobs") or [None])[0]
        if not isinstance(value, (int, float)) or not math.isfinite(value):
            raise LmauditError(f"{endpoint.url}: no log-probability for a generated token",
                               hint="the server must return logprobs for generated tokens too")
        nearest = min(abs(float(v) - float(value)) for v in echoed.top[i - 1].values())
        gap = max(gap, nearest)
        if nearest > ALIGNMENT_TOLERANCE:
            raise LmauditError(f"{endpoint.url}: token {i}: asked for the prefix alone, the most likely next token "
                               f"has log-probability {float(value):.4f}; echo's top {top_k} at that position holds "
                               f"nothing within {nearest:.4f} of it", hint="its echoed log-probabilities belong to "
                               "other positions: is the model served with --logits_all true, and prefix caching off?")
    return Alignment(bos_id=bos_id, n_tokens=len(ids), checked_positions=picks, largest_gap=gap)


def identity(endpoint: Endpoint, probe: PromptLogprobs) -> str:
    """A digest of the served model: its name and its log-probabilities of the probe text to 1e-4 nats (another
    model, or other weights under the same name, answers otherwise)."""
    return stable_hash(endpoint.url, endpoint.model, probe.tokens, [round(v, 4) for v in probe.logprobs])


def check_unchanged(endpoint: Endpoint, tokenizer, bos_id: int, *, top_k: int = 5, text: str = PROBE_TEXT) -> None:
    """Refuse a run whose served model changed since :func:`check_alignment` identified it (asked again, uncached,
    at the end of the run): its answers would mix two models."""
    now = identity(endpoint, prompt_logprobs(endpoint, text, bos_text=tokenizer.convert_ids_to_tokens(bos_id),
                                             top_k=top_k, cached=False))
    if endpoint.identity is not None and now != endpoint.identity:
        raise LmauditError(f"{endpoint.url}: the served model changed during the run (its answer to the probe text "
                           "differs from the one at the start)", hint="run again once the server serves one model")
