"""A RAG system behind an OpenAI-compatible chat endpoint (``POST {url}/chat/completions``): its retrieval, store and
prompt are hidden; what an audit sees is the text of its answers.

The transport is the served models' (:class:`~lmaudit.models.endpoint.Endpoint`): retries with backoff on a timeout,
a dropped connection, 429 and 5xx; a total deadline per request; credentials from ``LMAUDIT_API_KEY`` only, masked
in every message; the URL recorded without them. Each question is one user turn asked at temperature 0 with a fixed
seed and ``max_tokens``. An answer without a text message is an error naming the URL, never an empty answer.

That the system stays one system through a run is checked as for a served model that gives text only: a fixed probe
question is asked at the start and again at the end (never from the cache), and a different answer refuses the run.
Answers are kept on disk (a resumed run asks no question twice) only when the run passed; a refused run keeps none.
"""

from __future__ import annotations

from lmaudit.errors import LmauditError
from lmaudit.models.endpoint import Endpoint
from lmaudit.settings import integer
from lmaudit.utils import stable_hash

PROBE_QUESTION = "In one sentence, what is a library catalogue for?"


class ServedRag:
    """The RAG system at ``url`` (``http://host:port/v1``), answering as ``model`` (None: the only one it lists);
    ``max_tokens`` per answer; ``verify``, ``timeout`` and ``retries`` as :class:`~lmaudit.models.endpoint.Endpoint`."""

    def __init__(self, url: str, *, model: str | None = None, max_tokens: int = 64, seed: int = 0,
                 verify: bool = True, timeout: float = 120.0, retries: int = 4, backoff: float = 0.5) -> None:
        integer(1)(max_tokens, "max_new_tokens", None)  # the settings' own check, for a system built here
        self.endpoint = Endpoint(url, model=model, verify=verify, timeout=timeout, retries=retries, backoff=backoff)
        self.max_tokens, self.seed = max_tokens, seed
        self.queries = 0
        self.start: str | None = None  # the probe question's answer at the start
        self.identity_check: dict | None = None

    @property
    def url(self) -> str:
        return self.endpoint.url

    def _ask(self, question: str, *, cached: bool = True) -> str:
        body = {"model": self.endpoint.model, "messages": [{"role": "user", "content": question}],
                "temperature": 0.0, "max_tokens": self.max_tokens, "seed": self.seed}
        answer = self.endpoint.ask("chat/completions", body, cached=cached, check=self._check)
        return answer["choices"][0]["message"]["content"]

    def _check(self, answer: dict) -> None:
        """Refuse an answer that holds no text message (before it is used or kept)."""
        choices = answer.get("choices")
        first = choices[0] if isinstance(choices, list) and choices else None
        message = first.get("message") if isinstance(first, dict) else None
        if not isinstance(message, dict) or not isinstance(message.get("content"), str):
            raise LmauditError(f"{self.url}/chat/completions: the answer holds no text message",
                               hint="is this an OpenAI-compatible chat endpoint? (its URL ends in /v1)")

    def begin(self) -> None:
        """Before the first question: the served model's name (the only one listed, or the one named, which must be
        listed) and the probe question's answer, both asked now."""
        self.endpoint.model = self.endpoint.served_model()
        self.start = self._ask(PROBE_QUESTION, cached=False)
        self.endpoint.identity = stable_hash("rag", self.url, self.endpoint.model, self.start)

    def answer(self, question: str) -> str:
        if self.start is None:
            self.begin()
        self.queries += 1
        return self._ask(question)

    def finish(self) -> None:
        """After the last question: the probe question again; a different answer refuses the run (its answers are
        deleted), the same one keeps them."""
        again = self._ask(PROBE_QUESTION, cached=False)
        if again != self.start:
            self.endpoint.discard()
            raise LmauditError(f"{self.url}: the system changed during the run (its answer to the probe question "
                               "differs from the one at the start)",
                               hint="its answers would mix systems: run again once the service is stable (nothing "
                                    "this run asked was kept)")
        self.identity_check = {"probe_question": PROBE_QUESTION, "same_answer_at_end": True}
        self.endpoint.commit()

    def abandon(self) -> None:
        """The run stopped before its end (an error, an interrupt): its answers stay pending, as a served model's do,
        and the next run reads them and keeps them only if its own start and end checks pass (a system found to
        have changed has its answers deleted in :meth:`finish`)."""

    def describe(self) -> dict:
        return {"system": "served", "url": self.url, "model": self.endpoint.model, "top_k": None, "template": None,
                "generation": {"temperature": 0.0, "max_tokens": self.max_tokens, "seed": self.seed},
                "store_size": None, "generator": {"fingerprint": f"served:{self.endpoint.identity}"},
                "hidden": "the service's retrieval depth, prompt and store are not visible through its answers",
                "queries": self.queries, "identity_check": self.identity_check}
