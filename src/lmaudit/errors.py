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
    message names the field, and the command line prints :meth:`on_command_line`, which names the flag instead.

    ``template`` spells the field ``{name}``; a message about several settings names the others (``also``) as
    ``{other}``, which reads ``other=`` in Python and ``--other`` on the command line (in the hint too).
    """

    def __init__(self, field: str, template: str, *, flag: str | None = None, hint: str | None = None,
                 also: tuple[str, ...] | dict[str, str] = ()) -> None:
        # also: the other settings' names, or {name: its command-line option} when not --name-with-dashes
        self.also = also if isinstance(also, dict) else {f: _flag(f) for f in also}
        self.field, self.flag, self.template = field, flag or _flag(field), template
        self.hint_template = hint
        names = {f: f + "=" for f in also}
        super().__init__(template.format(name=field, **names), hint=self._hint(field, names))

    def _hint(self, name: str, others: dict[str, str]) -> str | None:
        """The hint, its names spelled as ``others`` when the message names several settings."""
        if self.hint_template is None or not self.also:
            return self.hint_template
        return self.hint_template.format(name=name, **others)

    def on_command_line(self) -> str:
        flags = self.also
        text, hint = self.template.format(name=self.flag, **flags), self._hint(self.flag, flags)
        return f"{text} (hint: {hint})" if hint else text


def _flag(field: str) -> str:
    return "--" + field.replace("_", "-")
