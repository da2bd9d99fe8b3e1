"""A real llama.cpp server (llama-cpp-python's) on 127.0.0.1 serving the SmolLM2 GGUF, for the slow served tests, the
recordings and the served-model benchmark. ``make served-model`` installs it."""

from __future__ import annotations

import contextlib
import importlib.util
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator

import requests

from lmaudit.models.gguf import gguf_file

MODEL = "smollm2-135m"


def available() -> str | None:
    """Why the real server cannot run here (None when it can)."""
    if importlib.util.find_spec("llama_cpp") is None:
        return "llama-cpp-python's server is not installed (make served-model)"
    try:
        gguf_file(MODEL)
    except Exception as exc:  # the named model's package is missing
        return f"the SmolLM2 GGUF is not installed ({exc})"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def llama_server(*, threads: int = 2, startup_s: float = 120.0) -> Iterator[str]:
    """The server's URL (``http://127.0.0.1:PORT/v1``) while the block runs; the server is stopped after it."""
    port = _free_port()
    cmd = [sys.executable, "-m", "llama_cpp.server", "--model", str(gguf_file(MODEL)), "--logits_all", "true",
           "--host", "127.0.0.1", "--port", str(port), "--n_threads", str(threads), "--n_ctx", "2048",
           "--model_alias", MODEL]
    log = tempfile.TemporaryFile(mode="w+")  # llama.cpp logs a lot: a pipe nobody reads would fill and stall it
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=log, text=True)
    url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + startup_s
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                log.seek(0)
                raise RuntimeError(f"the server exited: {log.read()[-2000:]}")
            try:
                if requests.get(f"{url}/models", timeout=2).ok:
                    break
            except requests.RequestException:
                time.sleep(0.5)
        else:
            raise RuntimeError(f"the server did not answer within {startup_s:.0f} s")
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()
