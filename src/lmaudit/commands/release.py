"""``lmaudit gate`` (a release gate over results folders) and ``lmaudit card`` (a model card's privacy section)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from lmaudit import api
from lmaudit.commands import common as c
from lmaudit.errors import LmauditError
from lmaudit.progress import stdout_console
from lmaudit.settings import read_number

app = typer.Typer(add_completion=False)


def _say(text: str) -> None:
    stdout_console.print(text, markup=False, highlight=False, emoji=False, soft_wrap=True)


def tpr_limits(items: list[str]) -> dict[str, float]:
    """``--max-tpr-at FPR=VALUE`` options as {FPR: VALUE} (the FPR and the value are checked by the gate)."""
    out = {}
    for item in items:
        fpr, sep, value = item.partition("=")
        if not sep or not fpr.strip() or not value.strip():
            raise LmauditError(f"--max-tpr-at '{item}' is not of the form FPR=VALUE", hint="e.g. --max-tpr-at 1%=0.05")
        out[fpr.strip()] = read_number(value.strip())
    return out


@app.command(rich_help_panel=c.PANEL_RESULTS)
def gate(
    run_dirs: list[Path] = typer.Argument(..., help="Results folders written by lmaudit mia (or runs that carry "
                                                    "canary exposure); each is gated on its own."),
    max_auc: Optional[float] = typer.Option(None, help="Largest AUC allowed, for every attack of every run: the "
                                                       "upper end of its 95% interval must not exceed it."),
    max_tpr_at: list[str] = typer.Option([], help="FPR=VALUE: largest TPR allowed at that FPR (10%, 1% or 0.1%), "
                                                  "compared with the upper end of its 95% interval (repeatable)."),
    max_exposure: Optional[float] = typer.Option(None, help="Largest canary exposure (bits) allowed, upper end of "
                                                            "its 95% interval; only for runs that carry exposure."),
    thresholds: Optional[Path] = typer.Option(None, help="TOML file of thresholds, keyed as the options are "
                                                         "(max_auc = 0.6; max_tpr_at a table of FPR = TPR; ...); the "
                                                         "options override it."),
    allow_set_differences: bool = typer.Option(
        False, "--allow-set-differences", help="Pass a run whose set check finds that members and non-members differ "
                                               "without the model (its AUCs then say little about the model)."),
    allow_unresolved: bool = typer.Option(
        False, "--allow-unresolved", help="Skip (with a note) a TPR the run could not measure (fewer non-members than "
                                          "1/FPR) instead of failing; a run with nothing left to check still fails."),
    json_out: Optional[Path] = typer.Option(None, "--json", help="Also write a summary of every check (JSON) here."),
    trust_edited: bool = typer.Option(
        False, "--trust-edited", help="Read a folder without its manifest (lmaudit_manifest.json), whose files nothing "
                                      "shows to come from one run; its figures are still checked against its scores."),
) -> None:
    """Release gate: exit 0 when every run's leakage is under the thresholds, 1 otherwise (one line per failed check).

    Thresholds are compared with the UPPER END of each figure's 95% interval, not its point estimate: the cautious
    reading (the leakage could be as high as that). A run whose members and non-members differ without the model
    fails unless --allow-set-differences; a TPR the run could not measure fails unless --allow-unresolved.
    Every figure compared is first computed again from the run's scores: an edited folder is refused (exit 2).
    """
    found = api.gate(run_dirs, max_auc=max_auc, max_tpr_at=tpr_limits(max_tpr_at), max_exposure=max_exposure,
                     thresholds=thresholds, allow_set_differences=True if allow_set_differences else None,
                     allow_unresolved=True if allow_unresolved else None, trust_edited=trust_edited)
    for line in found.lines():
        _say(line)
    _say(found.summary())
    if json_out is not None:
        _say(f"summary: {found.write_json(json_out)}")
    raise typer.Exit(0 if found.passed else 1)


@app.command(rich_help_panel=c.PANEL_RESULTS)
def card(
    run_dirs: list[Path] = typer.Argument(..., help="Results folders written by lmaudit mia."),
    out: Optional[Path] = typer.Option(None, help="Markdown file to write (default: print it). In an existing file "
                                                  "(a README) only the section between the card's marker lines is "
                                                  "replaced, or the section is appended; the rest is kept."),
    trust_edited: bool = typer.Option(
        False, "--trust-edited", help="Read a folder without its manifest (lmaudit_manifest.json); its figures are "
                                      "still checked against its scores."),
) -> None:
    """A model card's "Privacy evaluation" section (Markdown, Hugging Face metadata as YAML front matter)."""
    made = api.card(run_dirs, trust_edited=trust_edited)
    if out is None:
        _say(made.text.rstrip("\n"))
        return
    written = made.write(out)
    _say(f"card: {written} ({made.placed})")
