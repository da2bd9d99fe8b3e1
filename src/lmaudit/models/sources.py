"""Where a model comes from, read without loading it (JSON and paths only: light enough for every command).

A model source is a model folder or a PEFT adapter folder (``adapter_config.json``), whose
base is ``--adapter-base`` or the local folder its config names. :func:`model_folders` lists
every folder one load reads, so that an output folder is never one of them.
"""

from __future__ import annotations

import json
from pathlib import Path

from lmaudit.errors import ModelLoadError

ADAPTER_CONFIG = "adapter_config.json"
_NO_DOWNLOAD = "lmaudit never downloads models: pass --adapter-base DIR, the local folder of the base model"
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
            raise ModelLoadError(f"--adapter-base '{base}' (the base of adapter '{path}') does not exist",
                                 hint="pass the local folder of the model the adapter was trained on")
        chosen = Path(base)
    else:
        named = read_adapter_config(p).get("base_model_name_or_path")
        if not named:
            raise ModelLoadError(f"adapter '{path}' does not name its base model", hint=_NO_DOWNLOAD)
        if not Path(named).is_dir():
            raise ModelLoadError(f"the base model of adapter '{path}', '{named}', is not a local folder", hint=_NO_DOWNLOAD)
        chosen = Path(named)
    if chosen.resolve() == p.resolve():
        raise ModelLoadError(f"adapter '{path}' names itself as its base model", hint=_NO_DOWNLOAD)
    return chosen


def model_folders(path: str | Path, base: str | Path | None = None) -> list[Path]:
    """``path`` and, for an adapter, the base folders it loads (its chain of bases), without loading anything.

    What a command reads when it loads ``path``: an output folder must be none of them. A base
    that cannot be resolved is left out here (loading the adapter reports it).
    """
    chain, current, given = [Path(path)], Path(path), base
    while is_adapter_dir(current) and len(chain) <= _MAX_CHAIN:
        try:
            current = resolve_base(current, given)
        except ModelLoadError:
            break
        given = None
        if any(current.resolve() == seen.resolve() for seen in chain):
            break
        chain.append(current)
    return chain
