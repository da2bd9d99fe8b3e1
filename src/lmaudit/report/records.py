"""The most exposed records of a membership-inference run: members ranked by the strongest attack.

Each member's empirical p-value is the fraction of non-members scoring at least as high
(:func:`lmaudit.report.summary.member_exposure`). The text of a record is shown only when
the run folder holds it (the demo writes ``members.jsonl``); nothing else is read, so a
report never depends on data files elsewhere. Previews mask e-mail addresses, phone
numbers and the values of a record's own ``name`` / ``email`` / ``phone`` fields unless
``show_pii``; so do record ids that look like e-mail addresses or phone numbers.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd

from lmaudit.data.loaders import load_texts
from lmaudit.errors import LmauditError
from lmaudit.extraction.reconstruct import PATTERNS, mask_value
from lmaudit.report.document import Section
from lmaudit.report.summary import member_exposure

TOP = 20  # members listed
PREVIEW_CHARS = 110
_RECORD_PII = ("name", "email", "phone")  # the PII columns of lmaudit's synthetic records (lmaudit.data.pii)


def redact(text: str, fields: dict | None = None, *, show_pii: bool = False) -> str:
    """``text`` with e-mail addresses, phone numbers and the record's own PII values replaced by
    ``[email, 26 chars]``-style markers (:func:`~lmaudit.extraction.reconstruct.mask_value`)."""
    if show_pii:
        return text
    for name in _RECORD_PII:
        value = (fields or {}).get(name)
        if isinstance(value, str) and value.strip():
            text = text.replace(value, mask_value(value, name))
    for name, pattern in PATTERNS.items():
        text = pattern.sub(lambda m, name=name: mask_value(m.group(0), name), text)
    return text


def preview(text: str, fields: dict | None = None, *, show_pii: bool = False, limit: int = PREVIEW_CHARS) -> str:
    """One line of at most ``limit`` characters, redacted before it is cut (a cut never reveals part of a value)."""
    flat = re.sub(r"\s+", " ", redact(text, fields, show_pii=show_pii)).strip()
    return flat if len(flat) <= limit else flat[: limit - 1].rstrip() + "…"


def folder_texts(run: Path) -> dict[str, tuple[str, dict]]:
    """{id: (text, fields)} of ``members.jsonl`` in the run folder; empty when it is absent or unreadable."""
    path = run / "members.jsonl"
    if not path.is_file():
        return {}
    try:
        return {r.id: (r.text, r.fields) for r in load_texts(path).records}
    except LmauditError:
        return {}


def exposed_records(scores: pd.DataFrame, attack: str) -> pd.DataFrame:
    """Members sorted by ``attack``'s score (most exposed first) with ``p_value`` and ``rank``."""
    labels = scores["label"].to_numpy()
    p_value, rank = member_exposure(scores[attack].to_numpy(), labels)
    frame = pd.DataFrame({"id": scores["id"].astype(str), "score": scores[attack].to_numpy(dtype=float),
                          "p_value": p_value, "rank": rank})[labels == 1]
    return frame.sort_values(["rank", "id"], kind="stable")


def records_section(scores: pd.DataFrame, attack: str, n_nonmembers: int, texts: dict[str, tuple[str, dict]], *,
                    prefix: str = "", show_pii: bool = False, top: int = TOP) -> tuple[Section, int]:
    """The table of the ``top`` most exposed members; and how many members score above every non-member."""
    frame = exposed_records(scores, attack)
    above_all = int((frame["p_value"] == 0).sum())
    rows = []
    for r in frame.head(top).itertuples():
        count = int(round(r.p_value * n_nonmembers))
        cells = [f"{r.rank:.0f}", redact(r.id, show_pii=show_pii), f"{r.score:.4g}",
                 f"{r.p_value:.3f} ({count}/{n_nonmembers:,})"]
        if texts:
            text, fields = texts.get(r.id, ("", {}))
            cells.append(preview(text, fields, show_pii=show_pii) if text else "-")
        rows.append(cells)
    header = ["rank", "id", f"{attack} score", "p (non-members scoring ≥)"] + (["text (preview)"] if texts else [])
    text = (f"Members ranked by the score of {attack}, the strongest attack. p is the fraction of the "
            f"{n_nonmembers:,} non-members that score at least as high as the member: a per-record empirical "
            f"p-value, resolved to 1/{n_nonmembers:,}; p = 0 means no non-member scores as high "
            f"({above_all:,} members here). scores.parquet holds every record's p_value and rank. ")
    if texts:
        text += ("Previews come from members.jsonl in the run folder; " + (
            "PII is shown (--show-pii)." if show_pii else
            "e-mail addresses and phone numbers (in ids too, and a record's own name/email/phone fields) are masked; "
            "lmaudit report --show-pii shows them. Other personal data in free text is not detected."))
    else:
        text += ("The run folder holds no members.jsonl, so records are shown by id only" + (
            "." if show_pii else "; ids that look like e-mail addresses or phone numbers are masked (--show-pii "
                                 "shows them)."))
    return Section(f"{prefix}Most exposed records", text, table=(header, rows), table_class="records"), above_all


def stored_columns(scores: dict[str, np.ndarray], labels: np.ndarray, attack: str) -> dict[str, object]:
    """The per-record columns that ``scores.parquet`` stores beside the scores: ``p_value`` and ``rank``
    under ``attack`` (nullable integer rank, empty for non-members)."""
    p_value, rank = member_exposure(scores[attack], labels)
    return {"p_value": p_value, "rank": pd.array([None if np.isnan(x) else int(x) for x in rank], dtype="Int64")}
