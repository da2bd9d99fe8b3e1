"""Text sets from what a caller gives: a data file, a :class:`~lmaudit.data.loaders.TextSet` or a list of strings
(:func:`texts_of`), each refused with the argument it came from named; and two sets as the one set a membership run
probes (:func:`labelled_set`)."""

from __future__ import annotations

from pathlib import Path

from lmaudit.data.loaders import Record, TextSet, load_texts
from lmaudit.errors import SettingError


def given_texts(data, name: str):
    """``data`` as a path or a text set (a list of strings: records ``NAME:0``, ``NAME:1``, ...), else a
    :class:`~lmaudit.errors.SettingError` naming ``name`` (a Python argument)."""
    if data is None or isinstance(data, (TextSet, str, Path)):
        return data
    hint = "give a path (str or pathlib.Path), a TextSet or a list of strings"
    if not isinstance(data, (list, tuple)):
        raise SettingError(name, f"{{name}} must be a data file, a TextSet or a list of texts, got "
                                 f"{type(data).__name__}", hint=hint)
    wrong = next((i for i, t in enumerate(data) if not isinstance(t, str)), None)
    if wrong is not None:
        raise SettingError(name, f"{{name}}[{wrong}] is a {type(data[wrong]).__name__}, not a text", hint=hint)
    return TextSet.from_texts(list(data), prefix=f"{name}:", source=f"{name} (a list of {len(data)} texts)")


def texts_of(data, text_field: str = "text", split: str | None = None, name: str = "texts") -> TextSet:
    """A text set from a data file, a :class:`TextSet` or a list of strings (:func:`given_texts`)."""
    data = given_texts(data, name)
    return data if isinstance(data, TextSet) else load_texts(data, text_field=text_field, split=split)


def labelled_set(members: TextSet, nonmembers: TextSet) -> TextSet:
    """Members then non-members as the one set a membership run probes (ids prefixed ``m:`` / ``n:``)."""
    return TextSet([Record(f"m:{r.id}", r.target, r.context) for r in members.records]
                   + [Record(f"n:{r.id}", r.target, r.context) for r in nonmembers.records],
                   source=f"{members.source} + {nonmembers.source}")
