"""User-facing errors.

Every problem a user can fix (a missing file, a malformed line, a model without a
tokenizer) is raised as :class:`LmauditError`. The CLI prints it as one line with
the cause and a hint, and exits non-zero; tracebacks appear only with ``--debug``.
"""

from __future__ import annotations

import os
import re
import sys
import warnings

from lmaudit.credentials import mask_secrets

_PACKAGE = os.path.dirname(os.path.abspath(__file__)) + os.sep


def warn(message: str, category: type[Warning] = UserWarning) -> None:
    """A warning that points at the caller's own line (the first frame outside lmaudit), never at lmaudit's
    internals; its text with keys masked."""
    frame, level = sys._getframe(1), 2
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(_PACKAGE):
        frame, level = frame.f_back, level + 1
    warnings.warn(mask_secrets(str(message)), category, stacklevel=level)


class LmauditError(Exception):
    """An error caused by the user's input or environment, with a hint to fix it.

    A message about a setting names it the way the caller spells it: ``options`` lists the settings the message
    and hint name as ``{setting}``, which reads ``setting=`` from Python and ``--setting`` on the command line
    (:meth:`on_command_line`). A value of ``options`` gives other spellings: a flag (``"--dp-epsilon"``), or a
    pair (Python's, the command line's), e.g. ``("chat_template=False", "--no-chat-template")``.
    """

    def __init__(self, message: str, *, hint: str | None = None, options=()) -> None:
        self.options = options if isinstance(options, dict) else {o: _flag(o) for o in options}
        # a key never reaches a screen or a log: the environment's secrets and URLs' credentials masked
        self.template, self.hint_template = mask_secrets(message), None if hint is None else mask_secrets(hint)
        self.message, self.hint = self._spelled(python=True)
        super().__init__(self.message)

    def _names(self, python: bool) -> dict[str, str]:
        return {o: (s[0] if python else s[1]) if isinstance(s, tuple) else (o + "=" if python else s)
                for o, s in self.options.items()}

    def _spelled(self, *, python: bool) -> tuple[str, str | None]:
        """(message, hint) with every ``{setting}`` spelled for Python or for the command line."""
        if not self.options:
            return self.template, self.hint_template
        names = self._names(python)
        return _fill(self.template, names), None if self.hint_template is None else _fill(self.hint_template, names)

    def on_command_line(self) -> str:
        """The one line the command line prints: settings spelled as its options."""
        message, hint = self._spelled(python=False)
        return f"{message} (hint: {hint})" if hint else message

    def __str__(self) -> str:
        if self.hint:
            return f"{self.message} (hint: {self.hint})"
        return self.message


_PLACEHOLDER = re.compile(r"(?<!\{)\{(\w+)\}(?!\})")


def _fill(template: str, names: dict[str, str]) -> str:
    """``template`` with each ``{name}`` of ``names`` replaced (other braces as str.format reads them)."""
    filled = _PLACEHOLDER.sub(lambda m: names.get(m.group(1), m.group(0)), template)
    return filled.replace("{{", "{").replace("}}", "}")


class DataError(LmauditError):
    """Malformed or invalid input data; the message names the file, line or field."""


class ModelLoadError(LmauditError):
    """A model folder that cannot be loaded safely and offline."""


def check_int(name: str, value, *, low: int, high: int | None = None, hint=None, flag: str | None = None) -> int:
    """``value`` of the setting or option ``name`` must be an integer in [low, high]; else a one-line
    :class:`SettingError` naming it (``flag``: its command-line spelling, default ``name`` itself; ``hint`` a text or
    a function of the value)."""
    ok = isinstance(value, int) and not isinstance(value, bool) and value >= low and (high is None or value <= high)
    if not ok:
        bound = f"between {low} and {high:,}" if high is not None else f"≥ {low}"
        shown = repr(value).replace("{", "{{").replace("}", "}}")
        raise SettingError(name, f"{{name}} must be an integer {bound}, got {shown}", flag=flag or name,
                           hint=hint(value) if callable(hint) else hint)
    return value


class SettingError(LmauditError):
    """A setting outside its allowed values. ``field`` is its name in Python, ``flag`` its command-line option: the
    message names the field, and the command line prints :meth:`on_command_line`, which names the flag instead.

    ``template`` spells the field ``{name}``; a message about several settings names the others (``also``, as
    :class:`LmauditError`'s ``options``) as ``{other}``, which reads ``other=`` in Python and ``--other`` on the
    command line (in the hint too).
    """

    def __init__(self, field: str, template: str, *, flag: str | None = None, hint: str | None = None,
                 also: tuple[str, ...] | dict = ()) -> None:
        self.field, self.flag = field, flag or _flag(field)
        super().__init__(template, hint=hint, options=also)

    def _spelled(self, *, python: bool) -> tuple[str, str | None]:
        names = {**self._names(python), "name": self.field if python else self.flag}
        hint = (self.hint_template if self.hint_template is None or not self.options
                else _fill(self.hint_template, names))
        return _fill(self.template, names), hint


def _flag(field: str) -> str:
    return "--" + field.replace("_", "-")


_NO_VALUE = object()


def spell(field: str, value=_NO_VALUE, *, flag: str | None = None) -> tuple[str, str]:
    """(Python's, the command line's) spelling of setting ``field``, with ``value`` when given: ``spell("dtype",
    "float16")`` is ``('dtype="float16"', "--dtype float16")``; ``spell("allow_pickle", True)`` is
    ``("allow_pickle=True", "--allow-pickle")`` (an :class:`LmauditError` ``options`` value)."""
    flag = flag or _flag(field)
    if value is _NO_VALUE:
        return f"{field}=", flag
    if value is True:
        return f"{field}=True", flag
    shown = f'"{value}"' if isinstance(value, str) else repr(value)
    return f"{field}={shown}", f"{flag} {value}"
