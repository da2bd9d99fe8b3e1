"""Settings declared with their constraints: ``setting(default, check=...)`` fields of a config dataclass, checked
on construction by :func:`check_settings` with the checks below, each raising a
:class:`~lmaudit.errors.SettingError` that names the field (Python), flag (command line) or key (experiment file)."""

from __future__ import annotations

import dataclasses
import math
import os
from pathlib import Path
from typing import Any

from lmaudit.errors import SettingError, check_int

# ---------------------------------------------------------------- settings declared with their constraints

def setting(default: Any = dataclasses.MISSING, *, check=None, flag: str | None = None,
            default_factory: Any = dataclasses.MISSING):
    """A dataclass field with its constraint beside it: ``check(value, name, flag)`` raises a
    :class:`~lmaudit.errors.SettingError`; ``flag`` is its command-line option when not ``--name-with-dashes``.
    :func:`check_settings` runs every check (a config's ``__post_init__`` calls it)."""
    return dataclasses.field(default=default, default_factory=default_factory, metadata={"check": check, "flag": flag})


def check_settings(obj) -> None:
    """Check every field of the dataclass ``obj`` declared with :func:`setting`, in order; the first bad one raises."""
    for f in dataclasses.fields(obj):
        check = f.metadata.get("check")
        if check is not None:
            check(getattr(obj, f.name), f.name, f.metadata.get("flag"))


def refusing(check, *invalid, valid: tuple = ()):
    """``check`` with ``check.invalid``: values it must refuse, made from its own constraint (a test gives each to
    every declared field and expects the field named in the error, as scikit-learn's invalid-parameter checks do);
    and ``check.valid``: the edge values it must let through (the bounds themselves), which the test gives alike."""
    check.invalid, check.valid = tuple(invalid), tuple(valid)
    return check


def _shown(value: Any) -> str:
    return repr(value).replace("{", "{{").replace("}", "}}")


def integer(low: int, high: int | None = None, *, optional: bool = False, hint=None):
    """An integer in [low, high] (None allowed when ``optional``); ``hint`` a text or a function of the value
    (:func:`~lmaudit.errors.check_int`)."""
    def check(value, name: str, flag: str | None) -> None:
        if not (optional and value is None):
            check_int(name, value, low=low, high=high, hint=hint, flag=flag or "--" + name.replace("_", "-"))
    return refusing(check, low - 1, *(() if high is None else (high + 1,)), low + 0.5, "1",
                     *(() if optional else (None,)),
                     valid=(low, *(() if high is None else (high,)), *((None,) if optional else ())))


def one_of(values, *, noun: str | None = None, listed: bool = False, exact: bool = False):
    """One of ``values``; the message calls the setting ``noun`` (default: its name) and, ``listed``, says "one of
    a, b" rather than "a or b"; ``exact``: of the same type too (``True`` is not ``1``, nor ``2.0`` ``2``)."""
    def check(value, name: str, flag: str | None) -> None:
        if any(value == v and (not exact or type(value) is type(v)) for v in values):
            return
        if noun:
            raise SettingError(name, f"unknown {noun} {_shown(value)}", flag=flag,
                               hint=f"use one of {', '.join(map(str, values))}")
        names = [str(v) for v in values]
        allowed = (f"one of {', '.join(names)}" if listed else
                   " or ".join(names) if len(names) <= 2 else f"{', '.join(names[:-1])} or {names[-1]}")
        raise SettingError(name, f"{{name}} must be {allowed}, got {_shown(value)}", flag=flag)
    return refusing(check, "no such value", object(), valid=tuple(values))


def positive(*, below: float | None = None, optional: bool = False, hint: str | None = None):
    """A finite number > 0 (and < ``below`` when given; None allowed when ``optional``)."""
    def check(value, name: str, flag: str | None) -> None:
        if optional and value is None:
            return
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        if number and math.isfinite(value) and value > 0 and (below is None or value < below):
            return
        shown = _shown(float(value) if number else value)
        what = f"in (0, {below:g})" if below is not None else "a positive number"
        raise SettingError(name, f"{{name}} must be {what}, got {shown}", flag=flag, hint=hint)
    return refusing(check, 0, -1.0, math.nan, math.inf, True, "1", *(() if below is None else (below,)),
                     *(() if optional else (None,)),
                     valid=(1e-6, *(() if below is None else (below * (1 - 1e-9),)), *((None,) if optional else ())))


def fraction(*, also: tuple = (), above_zero: bool = False, optional: bool = False):
    """A number in [0, 1] (in (0, 1] when ``above_zero``), or one of ``also`` (e.g. "auto"), or None when
    ``optional``."""
    def check(value, name: str, flag: str | None) -> None:
        if (value in also and isinstance(value, str)) or (optional and value is None):
            return
        if isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value <= 1 \
                and not (above_zero and value == 0):
            return
        extra = f" (or {', '.join(repr(a) for a in also)})" if also else ""
        where = "(0, 1]" if above_zero else "[0, 1]"
        raise SettingError(name, f"{{name}} must be in {where}{extra}, got {_shown(value)}", flag=flag)
    return refusing(check, -0.1, 1.5, math.nan, True, "half", *((0,) if above_zero else ()),
                     *(() if optional else (None,)),
                     valid=(1e-6 if above_zero else 0, 1, *also, *((None,) if optional else ())))


def boolean(*, optional: bool = False):
    """True or False (or None when ``optional``: decided later, e.g. from the model)."""
    def check(value, name: str, flag: str | None) -> None:
        if not (isinstance(value, bool) or (optional and value is None)):
            raise SettingError(name, f"{{name}} must be true or false, got {_shown(value)}", flag=flag)
    return refusing(check, 1, "yes", *(() if optional else (None,)),
                    valid=(True, False, *((None,) if optional else ())))


# seeds reach numpy, torch and offsets added to them (seed + 10_000, seed * 1_000_003 + i): 32 bits leave room for
# all of them, where 2**64 overflows torch's generator
SEED_MAX = 2**32 - 1


def seed_value():
    """A seed: an integer in [0, :data:`SEED_MAX`]."""
    return integer(0, SEED_MAX, hint="seeds are 32-bit: any integer from 0 to 4294967295 gives its own draws")


def number(*, integral: bool = False):
    """A number of any sign and size (an integer when ``integral``): the type alone, for a setting whose range its
    own code checks."""
    def check(value, name: str, flag: str | None) -> None:
        if isinstance(value, bool) or not isinstance(value, int if integral else (int, float)):
            what = "an integer" if integral else "a number"
            raise SettingError(name, f"{{name}} must be {what}, got {_shown(value)}", flag=flag)
    return refusing(check, True, "1", None, *((0.5,) if integral else ()), valid=(0, -3, *(() if integral else (2.5,))))


def non_negative(*, hint: str | None = None):
    """A finite number ≥ 0 (0 often means "none": no clipping, no retain term)."""
    def check(value, name: str, flag: str | None) -> None:
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        if not (number and math.isfinite(value) and value >= 0):
            raise SettingError(name, f"{{name}} must be a number ≥ 0, got {_shown(value)}", flag=flag, hint=hint)
    return refusing(check, -1, math.nan, math.inf, True, "0", None, valid=(0, 0.5))


def text(*, optional: bool = False):
    """A string (None allowed when ``optional``): the type alone, for a name or path whose meaning is checked where
    it is used (a model folder, a data file)."""
    def check(value, name: str, flag: str | None) -> None:
        if not (isinstance(value, str) or (optional and value is None)):
            raise SettingError(name, f"{{name}} must be a string, got {_shown(value)}", flag=flag)
    return refusing(check, 3, b"bytes", *(() if optional else (None,)))


def location(*, optional: bool = False):
    """A path, as a string or a path object (None allowed when ``optional``): the type alone, for a file, folder or
    model name whose meaning is checked where it is read."""
    def check(value, name: str, flag: str | None) -> None:
        if not (isinstance(value, (str, os.PathLike)) or (optional and value is None)):
            raise SettingError(name, f"{{name}} must be a path, got {_shown(value)}", flag=flag)
    return refusing(check, 3, b"bytes", *(() if optional else (None,)), valid=("x", Path("x")))


def tables_of(config: type, keys: tuple[str, ...] | None = None):
    """A table of named tables, each a table of settings of ``config`` as :func:`keys_of` checks one (its key named
    ``name.label``): an experiment's cells, each setting what it changes."""
    inner = keys_of(config, keys)

    def check(value, name: str, flag: str | None) -> None:
        table()(value, name, flag)
        for label, settings in value.items():
            inner(settings, f"{name}.{label}", f"{flag or name}.{label}")
    return refusing(check, 3, {"a": 3}, {"a": {"no such key": 1}}, valid=({}, {"a": {}}))


def each(item, *, optional: bool = False, nonempty: bool = False):
    """A list whose every element passes ``item`` (named ``name[i]``); None allowed when ``optional``; at least
    one element when ``nonempty``."""
    def check(value, name: str, flag: str | None) -> None:
        if optional and value is None:
            return
        if not isinstance(value, (list, tuple)) or (nonempty and not value):
            what = "a non-empty list" if nonempty else "a list"
            raise SettingError(name, f"{{name}} must be {what}, got {_shown(value)}", flag=flag)
        for i, v in enumerate(value):
            item(v, f"{name}[{i}]", f"{flag or '--' + name.replace('_', '-')}[{i}]")
    return refusing(check, "not a list", *(() if optional else (None,)), *(([],) if nonempty else ()),
                     *([bad] for bad in getattr(item, "invalid", ())[:2]),
                     valid=(*(() if nonempty else ([],)), *([good] for good in getattr(item, "valid", ())[:2]),
                            *((None,) if optional else ())))


def table(*, optional: bool = False):
    """A table (a dict; None allowed when ``optional``) whose keys its reader checks."""
    def check(value, name: str, flag: str | None) -> None:
        if not (isinstance(value, dict) or (optional and value is None)):
            raise SettingError(name, f"{{name}} must be a table, got {_shown(value)}", flag=flag)
    return refusing(check, 3, "a=1", *(() if optional else (None,)))


def keys_of(config: type, keys: tuple[str, ...] | None = None):
    """A table of settings of the dataclass ``config`` (only ``keys`` of them when given): each key must be one of
    its fields and each value pass that field's declared check, named ``name.key``."""
    def check(value, name: str, flag: str | None) -> None:
        table()(value, name, flag)
        declared = {f.name: f for f in dataclasses.fields(config) if keys is None or f.name in keys}
        for key, v in value.items():
            if key not in declared:
                raise SettingError(name, f"{{name}} has no key {_shown(key)}", flag=flag,
                                   hint=f"its keys: {', '.join(declared)}")
            inner = declared[key].metadata.get("check")
            if inner is not None:
                inner(v, f"{name}.{key}", f"{flag or name}.{key}")
    return refusing(check, 3, {"no such key": 1})


def read_number(value: str, *, integral: bool = False):
    """A command-line option's text as the setting it feeds: an int (``integral``) or a float when it reads as one,
    else the text itself (the setting's declared check then refuses it, naming the option)."""
    try:
        return int(value) if integral else float(value)
    except ValueError:
        return value
