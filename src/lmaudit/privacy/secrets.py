"""Secret canaries for an exposure audit (the secret sharer, Carlini et al., 2019): a format, its fillings, the folder.

A **format** is a template with slots, e.g. ``"my pin is {digits:6}"``: ``{digits:K}`` is K decimal digits,
``{letters:L}`` L lower-case letters a–z (``{{`` and ``}}`` are literal braces). Its **randomness space** R is every
filling of the slots, |R| = 10^K · 26^L over all slots. A canary's **secret** is its slots' characters read in order
(``"my pin is 042517"`` has the secret ``"042517"``).

A canary folder (``lmaudit canaries make``) holds

- ``canaries.json``: the format, |R|, the seed and, per canary, its id, secret, text and insertion count: the
  secrets themselves, so keep it from whoever is not meant to know them;
- ``train.jsonl``: each canary's text repeated its insertion count times (``{"text": ...}`` lines, shuffled), to
  append to a fine-tuning set. A canary with 0 insertions is never trained on: a control.

The reference set of a canary (the fillings it is ranked against) is not stored: it is the format's fillings that
are no canary's secret, drawn when the audit runs (:meth:`SecretFormat.draw`).

Two kinds of format are refused, as they leave exposure nothing to measure:

- **too small a space**: a canary the model never saw ranks uniformly among its fillings, so its exposure reaches
  e bits with probability 2^−e, and only an exposure above log₂(1/0.05) = log₂ 20 ≈ 4.32 bits tells a canary from
  chance at 95%. Exposure is measured up to log₂|R_c|, so a format needs at least as many bits above that threshold as
  under it: |R| ≥ 20² = 400 fillings (8.64 bits), and at least 399 fillings that are no canary's secret. With 26
  fillings (``{letters:1}``) the largest exposure, 4.70 bits, is a mere 0.38 bit above chance's 95% threshold: a
  canary ranked first is detected, never measured.
- **fillings that are words, not random secrets**: a run of fewer than 5 random letters standing on its own (no
  digit slot in the same run of letters and digits) fills in as words or word pieces the model knows without
  training (``the``, ``cat``, ``time``), which take the top ranks a trained secret must reach.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from lmaudit.errors import LmauditError, SettingError, check_int
from lmaudit.folders import output_folder
from lmaudit.utils import stable_seed, write_json_atomic

ALPHABETS = {"digits": "0123456789", "letters": "abcdefghijklmnopqrstuvwxyz"}
MAX_SLOT = 64  # characters of one slot
MAX_INSERTIONS = 100_000
CHANCE_ALPHA = 0.05  # an exposure above log2(1/alpha) tells one canary from chance at 95%
MIN_SPACE = round(1 / CHANCE_ALPHA) ** 2  # 400 fillings: as many bits above that threshold as under it
MIN_LETTERS = 5  # a run of fewer random letters on its own fills in as words
CANARIES, TRAIN = "canaries.json", "train.jsonl"
_INDEXED = 2**62  # a space at most this large is drawn by index, without replacement
_PIECE = re.compile(r"\{\{|\}\}|\{([^{}]*)\}|[{}]")
MADE_BY = 'write one with: lmaudit canaries make --out DIR --format "my pin is {digits:6}" --n 20 --insertions 1,4,16'


def _format_error(message: str, hint: str | None = None) -> SettingError:
    return SettingError("template", "{name}: " + message.replace("{", "{{").replace("}", "}}"), flag="--format",
                        hint=None if hint is None else hint)


@dataclass(frozen=True)
class SecretFormat:
    """A parsed format: ``pieces`` the literal texts around the slots (one more than the slots), ``slots`` the
    (alphabet, length) of each slot, in order."""

    template: str
    pieces: tuple[str, ...]
    slots: tuple[tuple[str, int], ...]

    @classmethod
    def parse(cls, template: str) -> SecretFormat:
        """The format of ``template``; a template without a slot, an unknown slot or a bad length is refused."""
        if not isinstance(template, str) or not template.strip():
            raise _format_error(f"a template with slots is needed, got {template!r}",
                                hint='e.g. "my pin is {digits:6}"')
        pieces, slots, literal, pos = [], [], [], 0
        for m in _PIECE.finditer(template):
            literal.append(template[pos:m.start()])
            pos = m.end()
            token = m.group(0)
            if token in ("{{", "}}"):
                literal.append(token[0])
                continue
            if m.group(1) is None:
                raise _format_error(f"unmatched '{token}' at character {m.start()} of {template!r}",
                                    hint="write a literal brace as {{ or }}")
            name, _, length = m.group(1).partition(":")
            if name.strip() not in ALPHABETS or not length.strip().isdigit():
                raise _format_error(f"unknown slot {token!r} in {template!r}",
                                    hint="slots are {digits:K} and {letters:L} (K, L ≥ 1)")
            k = int(length)
            if not 1 <= k <= MAX_SLOT:
                raise _format_error(f"slot {token!r} must have 1 to {MAX_SLOT} characters, got {k}")
            pieces.append("".join(literal))
            literal = []
            slots.append((name.strip(), k))
        literal.append(template[pos:])
        pieces.append("".join(literal))
        if not slots:
            raise _format_error(f"{template!r} has no slot, so there is no secret to measure",
                                hint='add {digits:K} or {letters:L}, e.g. "my pin is {digits:6}"')
        fmt = cls(template, tuple(pieces), tuple(slots))
        fmt._check_measurable()
        return fmt

    def _check_measurable(self) -> None:
        """Refuse a space too small to measure exposure in, and letters that fill in as words (module docstring)."""
        if self.size < MIN_SPACE:
            bound = math.log2(1 / CHANCE_ALPHA)
            raise _format_error(
                f"{self.template!r} has {self.size:,} fillings: its largest exposure, log2|R| = {self.size_log2:.2f} "
                f"bits, leaves too little above the {bound:.2f} bits (log2 20) an exposure needs to be told from "
                f"chance at 95%; a format needs at least {MIN_SPACE} fillings ({math.log2(MIN_SPACE):.2f} bits)",
                hint="use longer slots, e.g. {digits:6} (10^6 fillings)")
        marks = []  # per character of a filled text: 'L' a slot letter, 'D' a slot digit, 'a' a literal letter or
        for piece, slot in zip(self.pieces, [*self.slots, None]):  # digit, ' ' anything else
            marks += ["a" if ch.isascii() and ch.isalnum() else " " for ch in piece]
            if slot is not None:
                marks += ["L" if slot[0] == "letters" else "D"] * slot[1]
        for run in "".join(marks).split():
            if "L" in run and "D" not in run and run.count("L") < MIN_LETTERS:
                raise _format_error(
                    f"{self.template!r} fills a run of only {run.count('L')} random letter(s): its fillings are "
                    "words or pieces of words a model knows without training, not random secrets",
                    hint=f"use {MIN_LETTERS} or more letters in a row (e.g. {{letters:8}}), or digits "
                         "(e.g. {digits:6})")

    @property
    def radices(self) -> list[int]:
        """The alphabet size of each secret character, in order."""
        return [len(ALPHABETS[name]) for name, k in self.slots for _ in range(k)]

    @property
    def size(self) -> int:
        """|R|: how many fillings the format has (an exact integer, however large)."""
        return math.prod(self.radices)

    @property
    def size_log2(self) -> float:
        return float(sum(math.log2(r) for r in self.radices))

    def fill(self, secret: str) -> str:
        """The canary text of ``secret`` (its slots' characters in order)."""
        parts, at = [self.pieces[0]], 0
        for (_, k), piece in zip(self.slots, self.pieces[1:]):
            parts += [secret[at:at + k], piece]
            at += k
        return "".join(parts)

    def is_secret(self, secret: str) -> bool:
        """Whether ``secret`` is one filling of the slots."""
        chars = [ALPHABETS[name] for name, k in self.slots for _ in range(k)]
        return isinstance(secret, str) and len(secret) == len(chars) and all(c in a for c, a in zip(secret, chars))

    def _decode(self, index: np.ndarray) -> list[str]:
        """The secrets of the fillings numbered ``index`` (mixed radix, the last character fastest)."""
        radices = self.radices
        table = [np.array(list(ALPHABETS[name])) for name, k in self.slots for _ in range(k)]
        chars = np.empty((len(index), len(radices)), dtype="<U1")
        rest = np.asarray(index, dtype=np.int64).copy()
        for j in range(len(radices) - 1, -1, -1):
            chars[:, j] = table[j][rest % radices[j]]
            rest //= radices[j]
        return ["".join(row) for row in chars]

    def draw(self, n: int, rng: np.random.Generator, *, exclude=()) -> list[str]:
        """``n`` distinct secrets drawn uniformly, without replacement, from the fillings not in ``exclude``.

        A space of at most 2^62 fillings is drawn by index (``n`` equal to every filling left enumerates them all);
        a larger one character by character, with any repeat redrawn (at such sizes a repeat is all but impossible).
        """
        excluded = set(exclude)
        if n > self.size - len(excluded):
            raise LmauditError(f"{self.template!r} has {self.size - len(excluded):,} fillings left, fewer than {n:,}")
        if self.size <= _INDEXED:
            index = rng.choice(self.size, size=min(self.size, n + len(excluded)), replace=False)
            return [s for s in self._decode(index) if s not in excluded][:n]
        radices = np.array(self.radices)
        table = [np.array(list(ALPHABETS[name])) for name, k in self.slots for _ in range(k)]
        found: dict[str, None] = {}
        while len(found) < n:
            codes = rng.integers(0, radices, size=(n - len(found), len(radices)))  # (m, characters)
            for row in codes:
                secret = "".join(table[j][c] for j, c in enumerate(row))
                if secret not in excluded:
                    found[secret] = None
        return list(found)[:n]


def parse_insertions(insertions) -> list[int]:
    """``"1,4,16"`` or ``[1, 4, 16]`` as a list of insertion counts (each 0–100,000, at least one above 0)."""
    flag = "--insertions"
    values = insertions.split(",") if isinstance(insertions, str) else insertions
    if not isinstance(values, (list, tuple)) or not values:
        raise SettingError("insertions", f"{{name}} must be a list of counts, got {insertions!r}", flag=flag,
                           hint="e.g. 1,4,16 (0 plants a control canary that is never trained on)")
    counts = []
    for v in values:
        text = v.strip() if isinstance(v, str) else v
        value = int(text) if isinstance(text, str) and text.isdigit() else text
        counts.append(check_int("insertions", value, low=0, high=MAX_INSERTIONS, flag=flag,
                                hint="each count is how many times a canary is put in train.jsonl"))
    if not any(counts):
        raise SettingError("insertions", "{name}: every count is 0, so no canary would be trained on", flag=flag,
                           hint="give at least one count above 0, e.g. 0,1,4,16")
    return counts


def write_exposure_canaries(out: str | Path, template: str, *, n: int, insertions, seed: int = 0) -> dict:
    """Write the canary folder ``out`` (replaced whole): ``n`` canaries of ``template``, canary i inserted
    ``insertions[i % len(insertions)]`` times (the counts take turns, so each has about as many canaries).
    Returns what ``canaries.json`` holds."""
    fmt = SecretFormat.parse(template)
    check_int("n", n, low=1, high=1_000_000, flag="--n")
    counts = parse_insertions(insertions)
    check_int("seed", seed, low=0, high=2**32 - 1, flag="--seed")
    needed = max(n, MIN_SPACE - 1)  # never-inserted fillings: as many as canaries, and |R_c| >= MIN_SPACE
    if fmt.size - n < needed:
        shown = template.replace("{", "{{").replace("}", "}}")
        raise SettingError("n", f"{{name}}: {n:,} canaries of '{shown}' leave {fmt.size - n:,} of its {fmt.size:,} "
                                f"fillings to be ranked among; they need {needed:,} (as many as the canaries, and "
                                f"at least {MIN_SPACE - 1} for a largest exposure of {math.log2(MIN_SPACE):.2f} bits)",
                           flag="--n", hint=f"use at most {max(0, min(fmt.size // 2, fmt.size - MIN_SPACE + 1)):,} "
                                            "canaries, or longer slots")
    rng = np.random.default_rng(stable_seed("exposure-canaries", template, seed))
    secrets = fmt.draw(n, rng)
    width = len(str(n - 1))
    rows = [{"id": f"canary-{i:0{width}d}", "secret": s, "text": fmt.fill(s), "insertions": counts[i % len(counts)]}
            for i, s in enumerate(secrets)]
    train = [r["text"] for r in rows for _ in range(r["insertions"])]
    train = [train[i] for i in rng.permutation(len(train))]
    lines = "".join(json.dumps({"text": t}, ensure_ascii=False) + "\n" for t in train)
    info = {"private": "the canaries' secrets: keep this file from whoever should not know them",
            "format": template, "space_size": fmt.size, "space_log2": fmt.size_log2, "seed": seed, "n": n,
            "insertions": counts, "train_lines": len(train),
            "train_sha256": hashlib.sha256(lines.encode("utf-8")).hexdigest(), "canaries": rows}
    with output_folder(out, what="canaries") as tmp:
        (tmp / TRAIN).write_text(lines, encoding="utf-8")
        write_json_atomic(tmp / CANARIES, info)
    return info


@dataclass(frozen=True)
class ExposureCanaries:
    """A canary folder read back and checked: the format, and per canary its id, secret, text and insertions."""

    folder: Path
    format: SecretFormat
    ids: list[str]
    secrets: list[str]
    insertions: list[int]
    seed: int

    @property
    def texts(self) -> list[str]:
        return [self.format.fill(s) for s in self.secrets]

    @property
    def pool_size(self) -> int:
        """How many fillings are no canary's secret: the never-inserted reference set."""
        return self.format.size - len(self.secrets)


def read_exposure_canaries(folder: str | Path) -> ExposureCanaries:
    """The canaries of ``folder`` (from :func:`write_exposure_canaries`), every entry checked against the format;
    a problem is one error naming the file and the canary."""
    folder = Path(folder)
    path = folder / CANARIES
    if not path.is_file():
        other = (folder / "canaries.jsonl").is_file()
        raise LmauditError(f"{path}: missing" + (" (this is a one-run canary folder from 'lmaudit corpus "
                                                  "canaries': audit it with lmaudit epsilon --canaries)" if other
                                                  else ""), hint=MADE_BY)
    try:
        info = json.loads(path.read_text(encoding="utf-8"))
        template, rows, seed = info["format"], info["canaries"], int(info.get("seed", 0))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError, ValueError):
        raise LmauditError(f"{path}: not a canary list (format, canaries)", hint=MADE_BY) from None
    try:
        fmt = SecretFormat.parse(template)
    except SettingError as exc:
        raise LmauditError(f"{path}: {exc.message}", hint=exc.hint) from None
    if not isinstance(rows, list) or not rows:
        raise LmauditError(f"{path}: no canaries listed", hint=MADE_BY)
    ids, secrets, counts = [], [], []
    for i, row in enumerate(rows):
        where = f"{path}: canary {i}"
        if not isinstance(row, dict) or not all(k in row for k in ("id", "secret", "insertions")):
            raise LmauditError(f"{where}: needs 'id', 'secret' and 'insertions'", hint=MADE_BY)
        if not fmt.is_secret(row["secret"]):
            raise LmauditError(f"{where} ('{row['id']}'): its secret does not fill the format {template!r}")
        k = row["insertions"]
        if isinstance(k, bool) or not isinstance(k, int) or k < 0:
            raise LmauditError(f"{where} ('{row['id']}'): insertions must be an integer ≥ 0, got {k!r}")
        ids.append(str(row["id"]))
        secrets.append(row["secret"])
        counts.append(k)
    for name, values in (("id", ids), ("secret", secrets)):
        if len(set(values)) < len(values):
            raise LmauditError(f"{path}: two canaries share one {name}", hint=MADE_BY)
    if fmt.size - len(secrets) < 1:
        raise LmauditError(f"{path}: the format {template!r} has no filling left that is no canary's secret")
    return ExposureCanaries(folder, fmt, ids, secrets, counts, seed)
