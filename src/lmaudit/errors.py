"""User-facing errors.

Every problem a user can fix (a missing file, a malformed line, a model without a
tokenizer) is raised as :class:`LmauditError`. The CLI prints it as one line with
the cause and a hint, and exits non-zero; tracebacks appear only with ``--debug``.
"""

from __future__ import annotations


class LmauditError(Exception):
    """An error caused by the user's input or environment, with a hint to fix it."""

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        if self.hint:
            return f"{self.message} (hint: {self.hint})"
        return self.message


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
    message names the field, and the command line prints :meth:`on_command_line`, which names the flag instead."""

    def __init__(self, field: str, template: str, *, flag: str | None = None, hint: str | None = None) -> None:
        self.field, self.flag, self.template = field, flag or "--" + field.replace("_", "-"), template
        super().__init__(template.format(name=field), hint=hint)

    def on_command_line(self) -> str:
        text = self.template.format(name=self.flag)
        return f"{text} (hint: {self.hint})" if self.hint else text
