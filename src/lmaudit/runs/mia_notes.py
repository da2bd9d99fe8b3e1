"""What ``mia`` says about a run besides its scores: sets or scores that make the figures unreliable, and the
terminal table (the texts over the token limit are counted from the probes' records,
:func:`~lmaudit.probes.tokenize.long_text_counts`)."""

from __future__ import annotations

import numpy as np
from rich.table import Table

from lmaudit.errors import warn
from lmaudit.metrics import tie_note
from lmaudit.report.cells import (
    BLIND_NOTE,
    PRIOR_NOTE,
    READING_NOTE,
    metric_rows,
)
from lmaudit.report.summary import mia_summary
from lmaudit.report.validity import reference_differs, sets_differ

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
