"""The transport to an OpenAI-compatible server: requests, retries, bounds, and the answers kept on disk.

An endpoint is named by its URL (``http://127.0.0.1:8080/v1``) and, where it serves several, the model's name.
Credentials come only from the environment (``LMAUDIT_API_KEY``, sent as a bearer token): a URL that carries a user,
a password or a query is refused (its values are never repeated), and what an audit records is the URL without them.
TLS certificates are verified unless the caller says otherwise.

Each request is retried with backoff on a timeout, a dropped connection, a body cut off mid-way, 429 and 5xx; the
body is read against a total deadline (a server that trickles a byte at a time cannot hold an audit) and a size
bound; a redirect to another host is refused (the results would name a server that did not answer). An answer
that is not JSON is an error naming the URL; an error status prints the server's first line, keys masked.

Answers are kept on disk under the request's digest (the URL, the served model's identity, the body), written
whole, in two stages. An answer is checked before it is kept (``check``: the caller's validation, e.g. that every
log-probability is finite and at most 0), so nothing refused is ever kept. A new answer goes to the *pending*
stage; the run that asked moves its pending answers into the cache when its checks of the served model passed
(:meth:`Endpoint.commit`) and deletes them when the run was refused (:meth:`Endpoint.discard`). A killed run's
pending answers are read by the next run of the same model, which checks them again and keeps them only if it
passes; a refused run leaves nothing a later run would reuse.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urljoin, urlsplit, urlunsplit

import requests
import urllib3

from lmaudit.credentials import API_KEY_ENV, url_secrets
from lmaudit.errors import LmauditError
from lmaudit.utils import cache_dir, stable_hash, write_json_atomic

RETRY_STATUS = (429, 500, 502, 503, 504)
REDIRECT_STATUS = (301, 302, 303, 307, 308)
MAX_REDIRECTS = 3
MAX_ANSWER_BYTES = 64 * 2**20  # a prompt's log-probabilities with top-k are kilobytes; more is not an answer
READ_CHUNK = 65536
RETRIED = (requests.exceptions.ConnectionError, requests.exceptions.Timeout,  # and a body cut off or garbled:
           requests.exceptions.ChunkedEncodingError, requests.exceptions.ContentDecodingError,
           urllib3.exceptions.ProtocolError, urllib3.exceptions.ReadTimeoutError, urllib3.exceptions.DecodeError)


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


class _Slow(Exception):
    """A body not read whole before the request's total deadline."""


@dataclass
class Endpoint:
    """An OpenAI-compatible server at ``url`` serving ``model`` (None: the only one it lists).

    ``verify``: check TLS certificates; ``timeout``: seconds a request may take in all, its body read included;
    ``retries``: attempts after the first on a timeout, a dropped or cut-off connection, 429 or 5xx, waiting
    ``backoff`` × 2ⁿ seconds; ``max_bytes``: the largest answer read; ``cache``: keep checked answers on disk.
    """

    url: str
    model: str | None = None
    verify: bool = True
    timeout: float = 120.0
    retries: int = 4
    backoff: float = 0.5
    max_bytes: int = MAX_ANSWER_BYTES
    cache: bool = True
    requests_made: int = field(default=0, init=False)  # answers that came from the server, not the cache
    identity: str | None = field(default=None, init=False)  # the served model's answer to the probe: keys the cache
    _local: threading.local = field(default_factory=threading.local, init=False, repr=False)  # a session per thread
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)
    _pending: set = field(default_factory=set, init=False, repr=False)  # this run's pending answers

    def __post_init__(self) -> None:
        if not is_endpoint(self.url):
            raise LmauditError(f"'{self.url}' is not an http(s) URL", hint="name the server, e.g. "
                               "http://127.0.0.1:8080/v1")
        carried = url_secrets(self.url)
        if carried:
            raise LmauditError(f"the URL of {public_url(self.url)} carries credentials or a query "
                               f"({', '.join(carried)}): it would be sent and recorded as typed",
                               hint=f"give the key in the environment variable {API_KEY_ENV} and the URL without "
                                    "them")
        self.url = public_url(self.url)

    # -- the answers kept on disk

    def _cache_file(self, path: str, body: dict | None, stage: str = "") -> Path:
        digest = stable_hash("served", self.url, self.identity or "", path,
                             json.dumps(body, sort_keys=True) if body else "")
        return cache_dir() / "served" / stage / digest[:2] / f"{digest}.json"

    def _read_kept(self, where: Path, check: Callable | None) -> dict | None:
        """A kept answer that still reads and passes ``check``; a damaged or failing one is deleted (asked again)."""
        if not where.is_file():
            return None
        try:
            answer = json.loads(where.read_text(encoding="utf-8"))
            if not isinstance(answer, dict):
                raise ValueError("not an object")
            if check is not None:
                check(answer)
            return answer
        except (OSError, UnicodeDecodeError, ValueError, LmauditError):
            where.unlink(missing_ok=True)
            return None

    def ask(self, path: str, body: dict | None = None, *, cached: bool = True,
            check: Callable[[dict], object] | None = None) -> dict:
        """The JSON answer of ``POST url/path`` with ``body`` (``GET`` without one): kept answers first (the cache,
        then this model's pending ones), else the server. ``check(answer)`` raises on an answer that must not be
        used; it runs before an answer is kept, so a refused answer is never stored."""
        if not (self.cache and cached):
            answer = self._request(path, body)
            if check is not None:
                check(answer)
            return answer
        done, pending = self._cache_file(path, body), self._cache_file(path, body, "pending")
        answer = self._read_kept(done, check)
        if answer is not None:
            return answer
        answer = self._read_kept(pending, check)
        if answer is None:
            answer = self._request(path, body)
            if check is not None:
                check(answer)
            write_json_atomic(pending, answer)
        with self._lock:
            self._pending.add((pending, done))
        return answer

    def commit(self) -> int:
        """Move this run's pending answers into the cache (its checks of the served model passed); how many."""
        with self._lock:
            moved, self._pending = list(self._pending), set()
        for pending, done in moved:
            if pending.is_file():
                done.parent.mkdir(parents=True, exist_ok=True)
                os.replace(pending, done)
        return len(moved)

    def discard(self) -> int:
        """Delete this run's pending answers (the run was refused: nothing it asked may be reused); how many."""
        with self._lock:
            dropped, self._pending = list(self._pending), set()
        for pending, _ in dropped:
            pending.unlink(missing_ok=True)
        return len(dropped)

    # -- transport

    def _headers(self) -> dict:
        key = os.environ.get(API_KEY_ENV)
        return {"Authorization": f"Bearer {key}"} if key else {}

    def _session(self) -> requests.Session:
        session = getattr(self._local, "session", None)
        if session is None:  # requests' sessions are not shared between threads
            session = self._local.session = requests.Session()
        return session

    def _request(self, path: str, body: dict | None) -> dict:
        # a path is under the API's root (``completions``), or with a leading slash under the server's (``/tokenize``)
        root = urlsplit(self.url)
        url = urlunsplit((root.scheme, root.netloc, path, "", "")) if path.startswith("/") else f"{self.url}/{path}"
        last = ""
        for attempt in range(self.retries + 1):
            if attempt:
                time.sleep(self.backoff * 2 ** (attempt - 1))
            try:
                status, content, kind = self._exchange(url, body)
            except requests.exceptions.SSLError as exc:
                raise LmauditError(f"{url}: TLS certificate not verified ({exc.__class__.__name__})",
                                   hint="fix the server's certificate (or, for a server you trust, verify=False)"
                                   ) from None
            except RETRIED as exc:
                last = exc.__class__.__name__
                continue
            except _Slow:
                last = f"the answer took more than {self.timeout:g} s"
                continue
            if status in RETRY_STATUS:
                last = f"HTTP {status}"
                continue
            return self._json(url, status, content, kind)
        raise LmauditError(f"{url}: no answer after {self.retries + 1} attempts (last: {last})",
                           hint="is the server running and reachable? checked answers are kept: run again")

    def _exchange(self, url: str, body: dict | None) -> tuple[int, bytes, str]:
        """(status, body, content type) of one request, redirects within the host followed, its body read whole
        within the total deadline and the size bound."""
        deadline = time.monotonic() + self.timeout
        for _ in range(MAX_REDIRECTS + 1):
            kwargs = {"headers": self._headers(), "timeout": self.timeout, "verify": self.verify,
                      "allow_redirects": False, "stream": True}
            with (self._session().get(url, **kwargs) if body is None
                  else self._session().post(url, json=body, **kwargs)) as response:
                if response.status_code in REDIRECT_STATUS and response.headers.get("location"):
                    target = urljoin(url, response.headers["location"])
                    if urlsplit(target)[:2] != urlsplit(url)[:2]:
                        raise LmauditError(f"{url}: the server redirects to another host ({public_url(target)})",
                                           hint="name the server that answers: the results would record this "
                                                "one")
                    url = target
                    continue
                return response.status_code, self._body(url, response, deadline), \
                    response.headers.get("content-type", "no content type")
        raise LmauditError(f"{url}: more than {MAX_REDIRECTS} redirects", hint="name the server that answers")

    def _body(self, url: str, response: requests.Response, deadline: float) -> bytes:
        declared = response.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > self.max_bytes:
            raise LmauditError(f"{url}: an answer of {int(declared):,} bytes, more than the {self.max_bytes:,} read",
                               hint="is this an OpenAI-compatible API? (max_bytes raises the bound)")
        parts, size = [], 0
        while chunk := response.raw.read1(READ_CHUNK):  # what has arrived, however little: the deadline is seen
            size += len(chunk)
            if size > self.max_bytes:
                raise LmauditError(f"{url}: an answer of more than {self.max_bytes:,} bytes",
                                   hint="is this an OpenAI-compatible API? (max_bytes raises the bound)")
            if time.monotonic() > deadline:
                raise _Slow
            parts.append(chunk)
        return b"".join(parts)

    def _json(self, url: str, status: int, content: bytes, kind: str) -> dict:
        with self._lock:
            self.requests_made += 1
        text = content.decode("utf-8", errors="replace").strip()
        if status >= 400:  # the server's first line: LmauditError masks any key it echoes
            detail = text.splitlines()[0][:200] if text else ""
            raise LmauditError(f"{url}: HTTP {status} {detail}".rstrip(),
                               hint=f"check the endpoint's URL, the model's name and the key in {API_KEY_ENV}")
        try:
            answer = json.loads(text)
        except ValueError:
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
                   temperature: float = 0.0, seed: int = 0, cached: bool = True,
                   check: Callable[[dict], object] | None = None) -> dict:
        """The first choice of ``/completions`` for the text ``prompt``; ``check(choice)`` as in :meth:`ask`."""
        body = {"model": self.model, "prompt": prompt, "echo": echo, "max_tokens": max_tokens,
                "temperature": temperature, "seed": seed}
        if logprobs is not None:
            body["logprobs"] = logprobs

        def first_choice(answer: dict) -> dict:
            choices = answer.get("choices")
            if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
                raise LmauditError(f"{self.url}/completions: no choices in the answer")
            if check is not None:
                check(choices[0])
            return choices[0]

        return first_choice(self.ask("completions", body, cached=cached, check=first_choice))
