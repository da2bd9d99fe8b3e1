"""What ``mia`` says about a run besides its scores: texts over the token limit, sets or scores that make the
figures unreliable, and the terminal table."""

from __future__ import annotations

import sys

import numpy as np
from rich.table import Table

from lmaudit.data.loaders import TextSet
from lmaudit.errors import warn
from lmaudit.metrics import tie_note
from lmaudit.models.handle import ModelHandle
from lmaudit.probes.tokenize import tokenize_records
from lmaudit.report.cells import (
    BLIND_NOTE,
    PRIOR_NOTE,
    READING_NOTE,
    metric_rows,
)
from lmaudit.report.summary import mia_summary
from lmaudit.report.validity import reference_differs, sets_differ

COUNT_CHUNK = 1024  # records tokenised at a time when counting: memory stays flat however large the set


def _over(tokenizer, textset: TextSet, limit: int) -> int:
    """How many records of ``textset`` have more than ``limit`` tokens, tokenised :data:`COUNT_CHUNK` at a time
    (one call over a whole set of 20,000 texts held every encoding at once: its peak grew with the set)."""
    return sum(int(sum(len(ids) > limit for ids in tokenize_records(
        tokenizer, TextSet(textset.records[a:a + COUNT_CHUNK], source=textset.source), max_length=sys.maxsize,
        first_scorable=0).ids)) for a in range(0, len(textset), COUNT_CHUNK))


def long_text_counts(target: ModelHandle, sets: dict[str, TextSet], config) -> dict:
    """How many texts of each set exceed the target's token limit, and what the probes do with them (one warning).

    The limit is ``--max-tokens`` or the model's context length (the adapter's, one
    rule for every probe). ``window`` scores every token of an AR text in overlapping
    windows; a DLM's masked probe truncates whatever the mode.
    """
    limit = config.max_length or target.adapter.context_length
    counts = {name: _over(target.tokenizer, ts, limit) for name, ts in sets.items()}
    offered = target.adapter.long_text_modes  # what this model's probes can do with a long text
    mode = config.long_texts if config.long_texts in offered else "truncate"
    if any(counts.values()):
        what = ("scored in overlapping windows of that length" if mode == "window"
                else "truncated to their first tokens (--long-texts window scores them whole)")
        if config.long_texts not in offered:
            what = "truncated to their first tokens (windows apply to AR models only)"
        warn(f"{counts['members']} member(s) and {counts['nonmembers']} non-member(s) exceed "
                      f"{limit} tokens and are {what}")
    return {"limit": limit, "mode": mode, **counts}


MIN_PER_CLASS = 20  # below this many members or non-members, intervals and TPRs say little


def degenerate_notes(name: str, score: np.ndarray, n_members: int, n_nonmembers: int) -> list[str]:
    """What makes an attack's figures unreliable on this set; each note is also raised as a warning.

    Fewer than :data:`MIN_PER_CLASS` samples of a class (the bootstrap interval of a tiny set
    is narrow for the wrong reason); scores that are all equal (AUC 0.5 then says
    nothing about the model: the attack could not tell any two texts apart); and a block of
    identical scores, members and non-members together, holding more than
    :data:`~lmaudit.metrics.TIE_SHARE` of the samples (:func:`~lmaudit.metrics.tie_note`).
    """
    notes = []
    if min(n_members, n_nonmembers) < MIN_PER_CLASS:
        notes.append(f"only {n_members} member(s) and {n_nonmembers} non-member(s) (fewer than {MIN_PER_CLASS} per "
                     "class): the AUC interval and the TPRs are unreliable")
    if np.ptp(score) == 0:
        notes.append("every sample has the same score: the attack could not tell the texts apart, so its AUC of 0.5 "
                     "says nothing about the model")
    elif (tied := tie_note(score)) is not None:
        notes.append(tied)
    for note in notes:
        warn(f"{name}: {note}")
    return notes


def approximate_attacks(attacks: dict[str, dict]) -> dict[str, str]:
    """{attack: its note} of the attacks computed approximately (a served model's top-k log-probabilities)."""
    return {name: note for name, m in attacks.items() for note in m.get("notes", [])
            if str(note).startswith("approximate")}


def results_table(result) -> Table:
    """A rich table of the run's metrics, best AUC first; attacks the data cannot tell from the best say "≈ best"."""
    kind = result.target.get("kind", "ar").upper()
    table = Table(title=f"Membership inference ({kind}): {result.n_members} members vs "
                        f"{result.n_nonmembers} non-members")
    blind = (result.set_check or {}).get("baselines") or {}
    prior = ((result.set_check or {}).get("reference") or {}).get("attacks") or {}
    header, rows = metric_rows(result.attacks, result.set_check)
    approximate = approximate_attacks(result.attacks)
    for col in header:
        table.add_column(col, justify="left" if col == "attack" else "right")
    for row in rows:
        table.add_row(*([f"{row[0]} (approx.)", *row[1:]] if row[0] in approximate else row))
    unresolved = {key: why for m in result.attacks.values() for key, why in m.get("unresolved", {}).items()}
    caption = [READING_NOTE] + ([BLIND_NOTE] if blind else []) + ([PRIOR_NOTE] if prior else [])
    if unresolved:  # said once under the table, not in every cell
        caption.insert(0, "; ".join(f"{key.upper()}: {why}" for key, why in unresolved.items()) +
                       f", {result.n_nonmembers:,} here.")
    if approximate:
        caption.insert(0, f"(approx.): {approximate[next(iter(approximate))]}.")
    table.caption = " ".join(caption)
    return table


def verdict_text(result) -> str:
    """The report's verdict in one line for the terminal: the exposure level, the strongest attack's sentence, and
    the caveats about the sets (texts they share, near-copies, formats that differ)."""
    summary = mia_summary([("", {"attacks": result.attacks, "n_members": result.n_members,
                                 "n_nonmembers": result.n_nonmembers, "set_check": result.set_check,
                                 "overlap": result.overlap})])
    res = {"set_check": result.set_check}  # the sets' own differences come first, then the attack
    openings = int(sets_differ(res)) + int(reference_differs(res))
    # then every caveat about the sets: shared texts (after normalisation), near-copies, formats that differ
    caveats = [p for p in summary.points[1 + openings:] if p.startswith("Caveat")]
    caveats += [f"Caveat: {note}." for note in (result.overlap or {}).get("notes", [])]
    headline = summary.headline + (" (sets of different formats: see the caveat)"
                                   if (result.overlap or {}).get("notes") else "")
    return f"{headline}. " + " ".join(summary.points[: 1 + openings] + caveats)
