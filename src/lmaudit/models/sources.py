"""Where a model comes from, read without loading it (JSON and paths only: light enough for every command).

A model source is a model folder, a PEFT adapter folder (``adapter_config.json``) whose
base is ``--adapter-base`` or the local folder its config names (and may itself be an
adapter), a GGUF file or a model name (the folder it is imported into, which the
caller's ``local`` maps it to). :func:`resolve_source` walks it once into a
:class:`ModelSource`: the full-model folder and the adapters applied on it, innermost
first, which loading then reads in that order; :func:`model_folders` lists every folder
one load reads, so that an output folder is never one of them.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from lmaudit.errors import ModelLoadError, spell

ADAPTER_CONFIG = "adapter_config.json"
DTYPE_NAMES = ("auto", "float32", "bfloat16", "float16")  # what a model's precision may be asked as (--dtype)
_NO_DOWNLOAD = "lmaudit never downloads models: pass the local folder of the base model as {adapter_base}"
BASE_OPTION = ("adapter_base",)  # the setting the adapters' errors name
_MAX_CHAIN = 16  # adapters on adapters deeper than this are a loop


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())


def is_adapter_dir(path: str | Path) -> bool:
    """Whether ``path`` is a PEFT adapter folder (it has ``adapter_config.json``)."""
    return (Path(path) / ADAPTER_CONFIG).is_file()


def read_adapter_config(path: str | Path) -> dict:
    """The folder's ``adapter_config.json``; a one-line error naming the file when it is unreadable."""
    f = Path(path) / ADAPTER_CONFIG
    try:
        cfg = json.loads(f.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ModelLoadError(f"{f}: unreadable adapter config ({_one_line(exc)})",
                             hint="re-save the adapter (save_pretrained)") from None
    if not isinstance(cfg, dict) or not isinstance(cfg.get("peft_type"), str):
        raise ModelLoadError(f"{f}: not a PEFT adapter config (no 'peft_type')", hint="re-save the adapter (save_pretrained)")
    return cfg


def resolve_base(path: str | Path, base: str | Path | None = None) -> Path:
    """The base model folder of the adapter at ``path``: ``base`` if given, else the config's existing local folder."""
    p = Path(path)
    if base is not None:
        if not Path(base).exists():
            raise ModelLoadError(f"{{asked}} (the base of adapter '{path}') does not exist",
                                 hint="pass the local folder of the model the adapter was trained on",
                                 options={"asked": spell("adapter_base", str(base))})
        chosen = Path(base)
    else:
        named = read_adapter_config(p).get("base_model_name_or_path")
        if not named:
            raise ModelLoadError(f"adapter '{path}' does not name its base model", hint=_NO_DOWNLOAD, options=BASE_OPTION)
        if not Path(named).is_dir():
            raise ModelLoadError(f"the base model of adapter '{path}', '{named}', is not a local folder", hint=_NO_DOWNLOAD,
                                 options=BASE_OPTION)
        chosen = Path(named)
    if chosen.resolve() == p.resolve():
        raise ModelLoadError(f"adapter '{path}' names itself as its base model", hint=_NO_DOWNLOAD, options=BASE_OPTION)
    return chosen


@dataclass(frozen=True)
class ModelSource:
    """One model as a load reads it: the full-model ``folder`` and the ``adapters`` applied on it, innermost first."""

    folder: Path
    adapters: tuple[Path, ...] = ()

    @property
    def path(self) -> Path:
        """The folder the user named (after a GGUF file or a name is mapped to its folder)."""
        return self.adapters[-1] if self.adapters else self.folder

    def folders(self) -> list[Path]:
        """Every folder the load reads, the named one first."""
        return [*reversed(self.adapters), self.folder]


def _walk(path: str | Path, base: str | Path | None, local: Callable[[str | Path], Path], seen: list[Path]) -> None:
    """Append ``path`` and each base it loads in turn to ``seen``; a loop, a chain deeper than :data:`_MAX_CHAIN` or
    a base that cannot be resolved is an error (after what was resolved so far is in ``seen``)."""
    current, given = local(path), base
    seen.append(current)
    while is_adapter_dir(current):
        nxt = resolve_base(current, None if given is None else local(given))
        given = None
        if len(seen) > _MAX_CHAIN or any(nxt.resolve() == s.resolve() for s in seen):
            chain = " → ".join(str(s) for s in [*seen, nxt])
            raise ModelLoadError(f"adapter '{path}': its bases form a loop ({chain})",
                                 hint="pass {adapter_base} with a full model folder", options=BASE_OPTION)
        current = nxt
        seen.append(current)


def resolve_source(path: str | Path, base: str | Path | None = None, *,
                   local: Callable[[str | Path], Path] = Path) -> ModelSource:
    """``path`` (with ``--adapter-base`` ``base``) resolved to the folders one load reads; see the module docstring.

    ``local`` maps a GGUF file or a model name to its folder (loading passes the import of
    :mod:`lmaudit.models.gguf`; the default takes every path as it is).
    """
    seen: list[Path] = []
    _walk(path, base, local, seen)
    return ModelSource(seen[-1], tuple(reversed(seen[:-1])))


def model_folders(path: str | Path, base: str | Path | None = None) -> list[Path]:
    """``path`` and, for an adapter, the base folders it loads (its chain of bases), without loading anything.

    What a command reads when it loads ``path``: an output folder must be none of them. A base
    that cannot be resolved is left out here (loading the adapter reports it).
    """
    seen: list[Path] = []
    try:
        _walk(path, base, Path, seen)
    except ModelLoadError:
        pass
    return seen
