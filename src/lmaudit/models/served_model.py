"""A served model as a model source: the handle of an OpenAI-compatible endpoint, whose adapter answers the AR probe
from prompt log-probabilities instead of a forward pass.

``load_served(url, tokenizer=SOURCE)`` names the endpoint and a local copy of the served model's tokenizer (a model
folder, GGUF file or model name: the tokenizer is all that is read). Before a handle is returned the endpoint is
proven aligned (:func:`~lmaudit.models.served.check_alignment`); its capabilities and the alignment's findings are
what the handle's ``facts()`` record, the URL without credentials.

What a served model gives is access level ``top_k`` (:data:`~lmaudit.attacks.registry.ACCESS`): each scored token's
log-probability and the ``top_k`` largest log-probabilities at its position. The AR statistics follow:

- ``logp`` exact (the server's own arithmetic, e.g. llama.cpp's quantised kernels);
- ``top1_logp`` exact: the largest of the top-k;
- ``mu`` and ``sigma`` (the mean and spread of log p over the vocabulary, which Min-K%++ and Gap-K% read)
  **approximate**: the top-k tokens with their own probabilities, the mass they leave spread evenly over the rest
  of the vocabulary (the most even distribution the answer allows). Attacks that read them are marked approximate.

The first token of a text has no log-probability (a server returns the first prompt entry empty), so a served
probe scores a text's tokens from the second on, each given the BOS token and the tokens before it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from transformers import AutoTokenizer

from lmaudit.errors import LmauditError, ModelLoadError
from lmaudit.models.adapters import ARAdapter
from lmaudit.models.gguf import gguf_file, gguf_tokenizer, local_model
from lmaudit.models.handle import ModelHandle
from lmaudit.models.served import (
    PROBE_TEXT,
    Endpoint,
    PromptLogprobs,
    check_alignment,
    prompt_logprobs,
)
from lmaudit.models.served_identity import IdentityGuard
from lmaudit.models.sources import resolve_source
from lmaudit.utils import stable_hash

DEFAULT_TOP_K = 20  # vLLM's default cap (--max-logprobs); llama-cpp-python takes more
DEFAULT_CONCURRENCY = 4  # requests in flight at once: a batching server (vLLM) answers them together
APPROXIMATE = ("mu", "sigma")  # the statistics a served probe approximates from its top-k
_NOTHING_KEPT = "nothing this run asked the server was kept: once it is fixed, the same command asks again"


def topk_moments(top: list[float], vocab: int) -> tuple[float, float]:
    """(mean, spread) of log p over a vocabulary of ``vocab`` tokens from the log-probabilities ``top`` of some of
    them: those with their own probabilities, the mass they leave spread evenly over the other tokens."""
    lp = np.asarray(top, dtype=np.float64)
    p = np.exp(lp)
    rest, others = max(0.0, 1.0 - float(p.sum())), max(vocab - len(lp), 0)
    m1, m2 = float((p * lp).sum()), float((p * lp * lp).sum())
    if rest > 0 and others > 0:
        each = np.log(rest / others)
        m1, m2 = m1 + rest * each, m2 + rest * each * each
    return m1, float(np.sqrt(max(m2 - m1 * m1, 1e-16)))


@dataclass
class ServedAdapter:
    """How a probe asks a served model: one completions request per text (cached on disk by the endpoint)."""

    endpoint: Endpoint
    tokenizer: object
    bos_id: int
    top_k: int
    context_length: int
    vocab: int
    capabilities: dict = field(default_factory=dict)
    concurrency: int = DEFAULT_CONCURRENCY  # requests in flight at once
    guard: IdentityGuard | None = None  # that the served model stays one model through a run
    # a served model can change under its name: its probes are never kept under it (the endpoint keeps each checked
    # answer, and only once the run's identity checks passed)
    keeps_probes = False
    access = "top_k"
    long_text_modes = ("truncate",)
    scoring = "served"  # a span's probability from the prompt log-probabilities the endpoint returns
    ignored_settings = ARAdapter.ignored_settings
    span_input = staticmethod(ARAdapter.span_input)

    @property
    def bos_text(self) -> str:
        return self.tokenizer.convert_ids_to_tokens(self.bos_id)

    def token_stats(self, target: str, context: str = "") -> np.ndarray:
        """(n, 4) rows (logp, top1_logp, mu, sigma) of the tokens of ``target`` after ``context`` (the first token
        of the whole text unscored: it has no log-probability)."""
        text = context + target
        enc = self.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        ids, spans = enc["input_ids"], enc["offset_mapping"]
        answer = prompt_logprobs(self.endpoint, text, bos_text=self.bos_text, top_k=self.top_k,
                                 pieces=[self.tokenizer.decode([i]) for i in ids])
        if self.guard is not None:
            self.guard.scored(text, answer)
        return _rows(answer, answer.offsets([a for a, _ in spans]), len(context), self.vocab, where=text[:40])

    def span_logp(self, ids: np.ndarray, masked: np.ndarray, *, where: str = "") -> float:
        """log p of the contiguous span ``ids[masked]`` given the tokens before it, read left to right at temperature
        1: the texts of the prefix and the span sent as one prompt, the span's tokens' log-probabilities summed. The
        server must split the span into the same tokens; a text that has no token before the span has no
        log-probability for its first token and is refused."""
        full = self.tokenizer.decode(ids[: masked[-1] + 1], skip_special_tokens=True)
        prefix = self.tokenizer.decode(ids[: masked[0]], skip_special_tokens=True)
        if not prefix or not full.startswith(prefix):
            raise LmauditError(f"{where}a served model needs at least one text token before the span",
                               hint="the server gives the first token of a text no log-probability")
        rows = self.token_stats(full[len(prefix):], prefix)
        if len(rows) != len(masked):
            raise LmauditError(f"{where}the server splits the span into {len(rows)} tokens, the local tokenizer into "
                               f"{len(masked)}", hint="give the tokenizer of the model the server serves, or a mask "
                                                      "whose edges fall between words")
        return float(rows[:, 0].astype(np.float64).sum())

    def fill(self, ids: np.ndarray, masked: np.ndarray, *, samples: int, steps: int | None = None,
             temperature: float = 1.0, remasking: str = "low_confidence", block_length: int | None = None,
             seed: int = 0) -> np.ndarray:
        """``samples`` continuations the server samples after the text before ``masked[0]`` (BOS first), each of
        ``len(masked)`` tokens as the local tokenizer reads the text returned, cut to that length and padded with
        the end-of-text id → (samples, len(masked)). Sample i asks with seed ``seed + i`` (the answers are cached,
        so a resumed run reads the same samples); ``steps``, ``remasking`` and ``block_length`` are a DLM's."""
        prompt = self.bos_text + self.tokenizer.decode(ids[: masked[0]], skip_special_tokens=True)
        pad = self.tokenizer.eos_token_id if self.tokenizer.eos_token_id is not None else self.bos_id
        out = np.full((samples, len(masked)), pad, dtype=np.int64)
        for i in range(samples):
            choice = self.endpoint.completion(prompt, echo=False, logprobs=None, max_tokens=len(masked),
                                              temperature=temperature, seed=seed + i, check=self._generated)
            text = choice["text"]
            got = self.tokenizer(text, add_special_tokens=False)["input_ids"][: len(masked)]
            out[i, : len(got)] = got
        return out

    @contextmanager
    def session(self) -> Iterator[None]:
        """A job's run on this served model (:func:`~lmaudit.runs.inputs.running`): its identity checked through the
        run and at its end (:class:`~lmaudit.models.served_identity.IdentityGuard`, recorded as the model's facts'
        ``identity_check``), and the answers the run asked kept only when the check passes. A refused run keeps
        nothing it asked, and says so; an interrupted one leaves its answers pending for the next run, which checks
        them again."""
        self.guard.begin()
        try:
            yield
            self.capabilities["identity_check"] = self.guard.finish()
        except LmauditError as exc:
            self.endpoint.discard()
            if _NOTHING_KEPT in (exc.hint_template or ""):  # said already by another served model of the run
                raise
            raise LmauditError(exc.template, options=exc.options,
                               hint="; ".join(filter(None, [exc.hint_template, _NOTHING_KEPT]))) from None
        self.endpoint.commit()

    def _generated(self, choice: dict) -> None:
        if not isinstance(choice.get("text"), str):
            raise LmauditError(f"{self.endpoint.url}/completions: no generated text in the answer")


def _rows(answer: PromptLogprobs, offsets: list[int], start: int, vocab: int, *, where: str) -> np.ndarray:
    """The statistics of the tokens starting at or after character ``start`` (the target after its context), each
    token's first character given by ``offsets``."""
    rows = []
    for i, (lp, top) in enumerate(zip(answer.logprobs, answer.top), start=1):  # token i: the (i+1)-th of the text
        if offsets[i] < start:
            continue
        values = list(top.values()) or [lp]
        mu, sigma = topk_moments(values, vocab)
        rows.append((lp, max(max(values), lp), mu, sigma))
    if not rows:
        raise LmauditError(f"the text '{where}…' has no scored token on the served model",
                           hint="texts need at least two tokens")
    return np.asarray(rows, dtype=np.float32)


def _tokenizer_of(source) -> tuple[object, int]:
    """The tokenizer of a local model source and its context length (the config's, else the tokenizer's). A GGUF
    source (a ``.gguf`` file, a named model) gives its tokenizer from its metadata alone: nothing is dequantized."""
    try:
        gguf = gguf_file(source)
    except ModelLoadError:
        gguf = None
    if gguf is not None:
        tok, limit = gguf_tokenizer(gguf)
        return tok, limit if isinstance(limit, int) and 0 < limit < 10**7 else 2048
    folder = resolve_source(source, local=local_model).folder
    try:
        tok = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    except (OSError, ValueError) as exc:
        raise ModelLoadError(f"'{source}': cannot load a tokenizer ({' '.join(str(exc).split())[:200]})",
                             hint="name the served model's folder, GGUF file or name with --tokenizer") from None
    try:
        config = json.loads((Path(folder) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        config = {}
    limit = config.get("max_position_embeddings") or getattr(tok, "model_max_length", None)
    return tok, int(limit) if isinstance(limit, int) and 0 < limit < 10**7 else 2048


def _prompt_logprobs_offered(endpoint: Endpoint, bos_text: str) -> bool:
    """Whether the endpoint returns log-probabilities for an echoed prompt (asked every time, never cached)."""
    choice = endpoint.completion(bos_text + PROBE_TEXT, echo=True, logprobs=1, max_tokens=1, cached=False)
    lp = choice.get("logprobs")
    return isinstance(lp, dict) and isinstance(lp.get("token_logprobs"), list) and len(lp["token_logprobs"]) > 1


def greedy_probe(endpoint: Endpoint, bos_text: str) -> str:
    """What identifies a served model that gives text only: its greedy continuation of the probe text."""
    choice = endpoint.completion(bos_text + PROBE_TEXT, echo=False, logprobs=None, max_tokens=16, temperature=0.0,
                                 cached=False)
    return str(choice.get("text"))


def load_served(url: str, *, tokenizer=None, served_model: str | None = None, top_k: int = DEFAULT_TOP_K,
                kind: str | None = None, verify: bool = True, concurrency: int = DEFAULT_CONCURRENCY) -> ModelHandle:
    """The handle of the model an OpenAI-compatible endpoint serves: proven aligned before it is returned when it
    gives prompt log-probabilities (access ``top_k``), else a model that gives sampled text only (``generation``)."""
    if kind not in (None, "ar"):
        raise ModelLoadError(f"{url}: a served model is audited as an AR model (prompt log-probabilities), "
                             f"not as '{kind}'", hint="drop --kind, or audit the DLM's weights on disk")
    if tokenizer is None:
        raise ModelLoadError(f"{url}: a served model needs a local copy of its tokenizer",
                             hint="pass {tokenizer} with the served model's folder, GGUF file or name",
                             options=("tokenizer",))
    tok, limit = _tokenizer_of(tokenizer)
    bos = tok.bos_token_id
    if bos is None:
        raise ModelLoadError(f"'{tokenizer}': the tokenizer has no BOS token",
                             hint="prompt log-probabilities are aligned only after a BOS token")
    endpoint = Endpoint(url, model=served_model, verify=verify)
    name = endpoint.served_model()
    endpoint.model = name
    bos_text = tok.convert_ids_to_tokens(bos)
    probe_k = min(top_k, 5)
    if _prompt_logprobs_offered(endpoint, bos_text):
        alignment = check_alignment(endpoint, tok, bos, top_k=probe_k)
        found, access, approximate = alignment.as_dict(), ServedAdapter.access, list(APPROXIMATE)
        guard = IdentityGuard(endpoint, tok, bos_text, probe_k, access, start=alignment.probe)
    else:  # sampled text only: the generation-level attacks run (SaMIA), every other is skipped with the reason
        start = greedy_probe(endpoint, bos_text)
        endpoint.identity = stable_hash(endpoint.url, endpoint.model, start)
        found, access, approximate = None, "generation", []
        guard = IdentityGuard(endpoint, tok, bos_text, probe_k, access, start=start, generation=greedy_probe)
    capabilities = {"url": endpoint.url, "model": name, "prompt_logprobs": "echo" if found else False,
                    "top_k": top_k if found else None, "tokenize": endpoint.tokenize("a") is not None,
                    "access": access, "approximate": approximate, "alignment": found}
    adapter = ServedAdapter(endpoint, tok, bos, top_k, limit, len(tok), capabilities, concurrency, guard)
    adapter.access = access
    return ModelHandle(None, tok, endpoint.url, f"served:{endpoint.identity}", "ar", adapter, dtype="served",
                       device="remote", source={"served": capabilities})
