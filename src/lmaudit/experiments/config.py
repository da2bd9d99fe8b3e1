"""Experiment files (TOML): the keys every experiment type shares, and the validation of a file's keys.

Each experiment type declares its own keys as a dataclass on top of :class:`BaseConfig`
(:mod:`lmaudit.experiments.registry` finds the types); :func:`check_keys` checks a file
against its type's schema: an unknown key is an error that names the key and the file
(with a close key of the schema, or the types that own it), and every value is checked
against the field's annotation (its TOML type); its range is the field's declared check
(:func:`~lmaudit.settings.setting`), run when the type's config is constructed.
"""

from __future__ import annotations

import difflib
import re
import types
import typing
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from lmaudit.errors import LmauditError, SettingError, check_int
from lmaudit.settings import (
    SEED_MAX,
    check_settings,
    each,
    integer,
    non_negative,
    one_of,
    positive,
    refusing,
    setting,
    text,
)

KINDS = ("ar", "dlm")  # the models an experiment trains
MODES = ("dft", "ift")  # fine-tuning on corpus passages, or on instruction pairs


def seed_list(value, name: str, flag: str | None) -> None:
    """The seeds an experiment repeats over: at least one, each in [0, SEED_MAX], none twice (a repeated seed
    repeats a run, and its spread would read as a smaller standard deviation)."""
    shown = repr(value).replace("{", "{{").replace("}", "}}")
    if not value:
        raise SettingError(name, f"{{name}} must hold at least one seed, got {shown}", flag=flag,
                           hint="e.g. seeds = [0, 1, 2]")
    for i, seed in enumerate(value):
        check_int(f"{name}[{i}]", seed, low=0, high=SEED_MAX, flag=f"{flag or name}[{i}]")
    twice = next(s for i, s in enumerate(value) if s in value[:i]) if len(set(value)) < len(value) else None
    if twice is not None:
        raise SettingError(name, f"{{name}} must be distinct, got {shown} (seed {twice} twice)", flag=flag,
                           hint="each seed is one more run: list each once")


refusing(seed_list, [], [-1], [0, 0], [1.5])


@dataclass
class BaseConfig:
    """The keys of every experiment: what it is, and the corpus, models and data its workspace builds. Every key is
    declared with its constraint (:func:`~lmaudit.settings.setting`), checked on construction: a file's bad value is
    refused before anything is built, naming the file and key (:func:`in_file`)."""

    name: str = setting(check=text())
    type: str = setting(check=text())
    description: str = setting("", check=text())
    kind: str = setting("dlm", check=one_of(KINDS))
    preset: str = setting("tiny", check=text())
    pretrain_tokens: int = setting(2_000_000, check=integer(1))  # the AR stage (shared with the demo's base model)
    adapt_tokens: int = setting(500_000, check=integer(1))  # DLM: diffusion training of the AR base (Dream-style)
    mode: str = setting("dft", check=one_of(MODES))  # dft: corpus passages; ift: instruction pairs
    n_members: int = setting(200, check=integer(1))
    n_nonmembers: int = setting(200, check=integer(1))
    passage_chars: int = setting(250, check=integer(1))
    epochs: int = setting(6, check=integer(1))
    lr: float = setting(1e-3, check=positive())
    # rank of a LoRA fine-tuning; 0: every weight is fine-tuned
    lora: int = setting(0, check=integer(0, hint="a LoRA rank ≥ 1, or 0 for full fine-tuning"))
    block: int = setting(64, check=integer(1))
    batch_size: int = setting(16, check=integer(1))
    seeds: list[int] = setting(default_factory=lambda: [0, 1, 2], check=seed_list)
    packages: list[str] = setting(default_factory=lambda: ["numpy", "scipy", "torch", "transformers"],
                                  check=each(text()))
    vocab_size: int = setting(4096, check=integer(1))
    # a pretrained AR model (a folder, a .gguf file or a name: "smollm2-135m") instead of pretraining a tiny one;
    # set lr, block and batch_size for it (the defaults above are the tiny presets')
    base: str = setting("", check=text())
    probe_batch_size: int = setting(32, check=integer(1))  # texts per probe batch (a 49k vocabulary: about 4)
    # the DLM adaptation of a pretrained ``base`` (kind = "dlm"): its learning rate, block and batch (0: the preset's)
    adapt_lr: float = setting(0.0, check=non_negative())
    adapt_block: int = setting(0, check=integer(0))
    adapt_batch_size: int = setting(0, check=integer(0))

    def __post_init__(self) -> None:
        """The keys declared with their constraints are checked here (:func:`in_file` names the file and key)."""
        check_settings(self)


def in_file(exc: SettingError, path: str | Path) -> SettingError:
    """``exc`` about a key of the experiment file ``path``: the file, then the key as the file spells it (never as
    the command-line flag of the setting it feeds)."""
    keys = {o: (o, o) for o in exc.options}  # every other setting it names: its key, too
    where = str(path).replace("{", "{{").replace("}", "}}")
    return SettingError(exc.field, f"{where}: {exc.template}", flag=exc.field, hint=exc.hint_template, also=keys)


def _matches(value: Any, want: Any) -> bool:
    """Whether a TOML value fits the annotation ``want`` (an int is a valid float; a bool is not an int)."""
    if want is Any:
        return True
    origin = typing.get_origin(want)
    if origin in (typing.Union, types.UnionType):
        return any(_matches(value, arm) for arm in typing.get_args(want))
    if want is type(None):
        return value is None
    if origin is list:
        (item,) = typing.get_args(want) or (Any,)
        return isinstance(value, list) and all(_matches(v, item) for v in value)
    if origin is dict:
        key, item = typing.get_args(want) or (Any, Any)
        return isinstance(value, dict) and all(_matches(k, key) and _matches(v, item) for k, v in value.items())
    if want is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if want is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, want)


def _spelled(annotation: Any) -> str:
    """An annotation as a reader writes it: ``list[int]``, ``dict``, ``str | None``."""
    if isinstance(annotation, type) and not typing.get_args(annotation):
        return annotation.__name__
    return str(annotation).replace("typing.", "").replace("NoneType", "None")


def _value_type(value: Any) -> str:
    """The type of a TOML value, with the element types of a list (``list[str]``)."""
    if isinstance(value, list) and value:
        return "list[" + " | ".join(sorted({type(v).__name__ for v in value})) + "]"
    return type(value).__name__


def check_keys(raw: dict, schema: type[BaseConfig], path: str | Path, *, owners: dict[str, list[str]]) -> None:
    """Raise :class:`LmauditError` unless every key of ``raw`` is a field of ``schema`` with a value of its type
    (the value's range is the field's declared check, run when ``schema`` is constructed).

    Parameters
    ----------
    raw : dict
        The parsed experiment file.
    schema : type
        The dataclass of the file's experiment type (a subclass of :class:`BaseConfig`).
    path : str or Path
        The file, named in every message.
    owners : dict
        ``{key: [experiment types whose schema has it]}``, to say where a key of another type belongs.
    """
    known = {f.name for f in fields(schema)}
    for key in raw:
        if key in known:
            continue
        close = difflib.get_close_matches(key, known, n=1)
        if key in owners:
            hint = f"'{key}' is a key of type {', '.join(owners[key])}"
        elif close:
            hint = f"did you mean '{close[0]}'?"
        else:
            hint = f"known keys: {', '.join(sorted(known))}"
        raise LmauditError(f"{path}: unknown key '{key}' for an experiment of type '{raw.get('type')}'", hint=hint)
    hints = typing.get_type_hints(schema)
    for key, value in raw.items():
        if not _matches(value, hints[key]):
            raise LmauditError(f"{path}: key '{key}' must be {_spelled(hints[key])}, got {_value_type(value)}")


_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]*")  # a dot inside ("pythia-1.4b"), never first


def check_name(name: str, where: str) -> str:
    """An experiment's name is the folder it writes under ``--out``: one plain folder name, never a path.

    Only letters, digits, ``-``, ``_`` and (not first) ``.`` are allowed: no separators,
    spaces or leading dots, so a name from a file cannot make a run write outside its output
    root or a hidden folder, and it is one word in a shell.
    """
    if not _NAME.fullmatch(name or ""):
        raise LmauditError(f"{where}: experiment name {name!r} is not a plain folder name",
                           hint="use letters, digits, '-', '_' and '.' (not first): the results go to OUT/NAME/")
    return name
