"""What the jobs of :mod:`lmaudit.api` take: models from what a caller gives, and the backend (text sets:
:mod:`lmaudit.data.given`)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

from lmaudit.errors import SettingError
from lmaudit.models.handle import ModelHandle
from lmaudit.models.lora import LoraSpec
from lmaudit.probes.backends import BACKENDS, current_backend, use_backend


@contextmanager
def on_backend(backend=None) -> Iterator:
    """Shard work inside the block runs on ``backend``: None keeps the current one (the local one unless a caller
    chose another), a name (``"local"``, ``"ray"``) makes one for the block and closes it after, and a backend object
    (:func:`~lmaudit.probes.backends.make_backend`, e.g. Ray at an address) is used as it is: its owner closes it."""
    if backend is None:
        yield current_backend()
        return
    with use_backend(backend, close=isinstance(backend, str)) as chosen:
        yield chosen


@contextmanager
def running(backend, *models: ModelHandle | None) -> Iterator:
    """A job's body on ``backend`` (:func:`on_backend`) inside each model's session (its adapter's ``session()``): a
    served one is checked to stay one model through the run, and what it answered is kept only when its check passes
    and the run ends without an error (:meth:`~lmaudit.models.served_model.ServedAdapter.session`)."""
    with on_backend(backend) as chosen, ExitStack() as sessions:
        for model in models:
            if model is not None:
                sessions.enter_context(model.adapter.session())
        yield chosen


def check_backend(backend) -> None:
    """A backend named by a string must be one lmaudit makes: said before any model loads."""
    if isinstance(backend, str) and backend not in BACKENDS:
        raise SettingError("backend", f"unknown {{name}} '{backend}'", hint=f"use one of {', '.join(BACKENDS)}")


def lora_of(lora: LoraSpec | int | None) -> LoraSpec | None:
    return LoraSpec(lora) if isinstance(lora, int) and not isinstance(lora, bool) else lora


def source_of(model) -> str | Path:
    """A model to train from: a folder, a GGUF file or a name (a loaded model gives its folder)."""
    return Path(model.path) if isinstance(model, ModelHandle) else model


def base_of(load_options: dict) -> dict:
    """An adapter base given in the load options, an input like the model."""
    return {"adapter_base": load_options["adapter_base"]} if load_options.get("adapter_base") else {}
