"""Mask specifications for extraction: which tokens of a record the model must reproduce.

Positions count the record's text tokens from 0 (the ``<bos>`` the tokenizer adds is
never masked). Accepted specs:

- ``suffix:K`` — the last K tokens; ``prefix:K`` — the first K tokens;
- ``random:F`` — a fraction F in (0, 1) of the tokens, drawn per record from a
  stable seed (at least one token);
- ``span:A-B[,C-D...]`` — tokens A..B−1 (half-open, may be several disjoint spans);
- ``pii[:FIELD[+FIELD...]]`` — every token overlapping an occurrence of the record's
  FIELD value(s) in its text (default fields ``email`` and ``phone``).

A bad spec, an empty or out-of-range mask, overlapping spans, or a PII value
missing from its text is a :class:`~lmaudit.errors.DataError` naming the record.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lmaudit.errors import DataError, LmauditError, SettingError
from lmaudit.settings import check_settings, each, integer, one_of, refusing, setting, text
from lmaudit.settings import fraction as in_unit
from lmaudit.utils import stable_seed

KINDS = ("suffix", "prefix", "random", "span", "pii")
DEFAULT_PII_FIELDS = ("email", "phone")


@dataclass(frozen=True)
class MaskSpec:
    """A parsed mask spec; :meth:`resolve` turns it into token positions for one record."""

    kind: str = setting(check=one_of(KINDS, noun="mask kind"))
    count: int = setting(0, check=integer(0))  # suffix, prefix: the tokens masked
    fraction: float = setting(0.0, check=in_unit())  # random: the share of tokens masked
    spans: tuple[tuple[int, int], ...] = setting((), check=each(each(integer(0))))  # span: half-open token ranges
    fields: tuple[str, ...] = setting((), check=each(text()))  # pii: the fields whose values are masked
    text: str = setting("", check=text())  # the spec as written

    def __post_init__(self) -> None:
        check_settings(self)

    @classmethod
    def parse(cls, spec: str) -> "MaskSpec":
        kind, _, arg = spec.strip().partition(":")
        if kind not in KINDS:
            raise LmauditError(f"mask '{spec}': unknown kind '{kind}'", hint=f"use one of {', '.join(KINDS)}")
        try:
            if kind in ("suffix", "prefix"):
                count = int(arg)
                if count < 1:
                    raise ValueError
                return cls(kind, count=count, text=spec)
            if kind == "random":
                fraction = float(arg)
                if not 0.0 < fraction <= 1.0:
                    raise ValueError
                return cls(kind, fraction=fraction, text=spec)
            if kind == "span":
                return cls(kind, spans=_parse_spans(spec, arg), text=spec)
        except ValueError:
            examples = {"suffix": "suffix:32", "prefix": "prefix:16", "random": "random:0.5", "span": "span:4-12,20-24"}
            raise LmauditError(f"mask '{spec}': bad argument '{arg}'", hint=f"e.g. {examples[kind]}") from None
        fields = tuple(f for f in arg.split("+") if f) if arg else DEFAULT_PII_FIELDS
        return cls("pii", fields=fields, text=spec)

    @property
    def needs_offsets(self) -> bool:
        return self.kind == "pii"

    def resolve(self, n_tokens: int, *, record_id: str, where: str = "", text: str = "", fields: dict | None = None,
                offsets: list[tuple[int, int]] | None = None, seed: int = 0) -> np.ndarray:
        """Sorted int64 positions (0-based among the record's ``n_tokens`` text tokens).

        ``offsets`` are the (start, end) character offsets of those tokens in ``text``;
        only ``pii`` masks need them (and ``fields``, the record's other columns).
        """
        label = f"{where}record '{record_id}'"
        if n_tokens < 1:
            raise DataError(f"{label}: the text has no tokens to mask")
        if self.kind in ("suffix", "prefix"):
            if self.count > n_tokens:
                raise DataError(f"{label}: mask {self.text} needs {self.count} tokens but the text has {n_tokens}",
                                hint="use a shorter mask or drop short records")
            pos = np.arange(n_tokens - self.count, n_tokens) if self.kind == "suffix" else np.arange(self.count)
        elif self.kind == "random":
            k = max(1, int(round(self.fraction * n_tokens)))
            rng = np.random.default_rng(stable_seed("extract-mask", record_id, self.text, seed))
            pos = np.sort(rng.choice(n_tokens, size=k, replace=False))
        elif self.kind == "span":
            end = max(b for _, b in self.spans)
            if end > n_tokens:
                raise DataError(f"{label}: mask {self.text} ends at token {end} but the text has {n_tokens} tokens")
            pos = np.concatenate([np.arange(a, b) for a, b in self.spans])
        else:
            pos = self._pii_positions(label, text, fields or {}, offsets or [])
        if len(pos) == 0:
            raise DataError(f"{label}: mask {self.text} selects no token")
        if len(pos) == n_tokens:
            raise DataError(f"{label}: mask {self.text} covers every token, leaving nothing to condition on")
        return np.asarray(pos, dtype=np.int64)

    def _pii_positions(self, label: str, text: str, fields: dict, offsets: list[tuple[int, int]]) -> np.ndarray:
        chars = np.zeros(len(text) + 1, dtype=bool)
        for name in self.fields:
            value = fields.get(name)
            if not isinstance(value, str) or not value:
                raise DataError(f"{label}: no '{name}' field for mask {self.text}",
                                hint=f"give each record a '{name}' column holding the value as it appears in the text")
            start = text.find(value)
            if start < 0:
                raise DataError(f"{label}: its '{name}' value does not occur in its text")
            while start >= 0:
                chars[start : start + len(value)] = True
                start = text.find(value, start + 1)
        starts = np.array([a for a, _ in offsets], dtype=np.int64)
        ends = np.array([b for _, b in offsets], dtype=np.int64)
        cum = np.concatenate([[0], np.cumsum(chars)])
        return np.flatnonzero(cum[ends] - cum[starts] > 0)


def _parse_spans(spec: str, arg: str) -> tuple[tuple[int, int], ...]:
    spans = []
    for part in arg.split(","):
        a, sep, b = part.partition("-")
        if not sep:
            raise ValueError
        a, b = int(a), int(b)
        if a < 0 or b <= a:
            raise LmauditError(f"mask '{spec}': span {part} is empty or negative", hint="spans are A-B with 0 <= A < B")
        spans.append((a, b))
    spans.sort()
    for (a1, b1), (a2, b2) in zip(spans, spans[1:]):
        if a2 < b1:
            raise LmauditError(f"mask '{spec}': spans {a1}-{b1} and {a2}-{b2} overlap")
    return tuple(spans)


def is_suffix(positions: np.ndarray, n_tokens: int) -> bool:
    """True when ``positions`` are exactly the last ``len(positions)`` of ``n_tokens`` tokens."""
    return len(positions) > 0 and positions[0] == n_tokens - len(positions) and is_contiguous(positions)


def is_contiguous(positions: np.ndarray) -> bool:
    return len(positions) > 0 and bool(np.all(np.diff(positions) == 1))


_STEPS = {"steps": ('steps=["1", "2", "4", "8", "max"]', "--steps 1,2,4,8,max")}


def parse_steps(values) -> list[str]:
    out = []
    for v in (values.split(",") if isinstance(values, str) else values):
        v = str(v).strip()
        if v != "max" and not (v.isdigit() and int(v) >= 1):
            raise LmauditError(f"step count '{v}' is not a positive integer or 'max'", hint="e.g. {steps}",
                               options=_STEPS)
        out.append(v)
    if not out:
        raise LmauditError("no step counts given", hint="e.g. {steps}", options=_STEPS)
    return list(dict.fromkeys(out))


def step_counts(value, name: str, flag: str | None) -> None:
    """The check of ``steps``: step counts as :func:`parse_steps` reads them (a list, or a comma-separated text)."""
    try:
        parse_steps(value if isinstance(value, (str, list, tuple)) else [value])
    except LmauditError as exc:
        raise SettingError(name, f"{{name}}: {exc.template}", flag=flag, hint=exc.hint_template) from None


refusing(step_counts, [], ["0"], ["two"], "1,x")


def mask_text(value, name: str, flag: str | None) -> None:
    """The check of an extraction's ``mask``: a mask as :meth:`MaskSpec.parse` reads it (refused before any model
    loads, not when the run starts)."""
    text()(value, name, flag)
    try:
        MaskSpec.parse(value)
    except LmauditError as exc:
        raise SettingError(name, f"{{name}}: {exc.template}", flag=flag, hint=exc.hint_template) from None


refusing(mask_text, 3, None, "middle:4", "suffix:0", "suffix:x")
