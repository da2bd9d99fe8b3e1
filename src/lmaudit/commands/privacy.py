"""``lmaudit epsilon``: ε lower bounds of a membership-inference run (or of canaries scored in it)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from lmaudit import api
from lmaudit.api.data import check_level
from lmaudit.commands import common as c
from lmaudit.progress import stdout_console

app = typer.Typer(add_completion=False)


def _mia_rows(bounds: dict) -> list[list[str]]:
    return [[name, f"{b['epsilon']:.3f}", f"{b['threshold']:.4g}", b["direction"], f"{b['tpr_lo']:.3f}",
             f"{b['fpr_hi']:.3f}", f"{b['n_members']}+{b['n_nonmembers']}"] for name, b in bounds.items()]


def _canary_rows(bounds: dict) -> list[list[str]]:
    return [[name, f"{b['epsilon']:.3f}", str(b["k_plus"]), str(b["k_minus"]), str(b["guesses"]), str(b["correct"]),
             str(b["m"])] for name, b in bounds.items()]


@app.command(rich_help_panel=c.PANEL_AUDIT)
def epsilon(
    config: Optional[Path] = c.config_option(),
    run_dir: Path = typer.Argument(..., help="A folder written by lmaudit mia (or demo)."),
    delta: float = typer.Option(1e-5, help="The δ of the (ε, δ)-DP claim under test, in (0, 1)."),
    confidence: float = typer.Option(0.95, help="Probability that each bound holds, in (0, 1)."),
    attack: Optional[str] = typer.Option(None, help="Only this attack (default: every attack of the run)."),
    seed: int = c.seed_option("Seed of the split into the threshold half and the bound half."),
    canaries: Optional[Path] = typer.Option(
        None, help="A folder from 'lmaudit corpus canaries': audit its canaries (scored in RUN_DIR by id) with the "
                   "one-run bound instead of RUN_DIR's members and non-members."),
    out: Optional[Path] = typer.Option(None, help="Folder for epsilon.json (default: RUN_DIR)."),
) -> None:
    """ε lower bounds: the largest ε each attack shows the training was not (ε, δ)-DP for."""
    delta, confidence = check_level("--delta", delta), check_level("--confidence", confidence)
    level = f"{confidence:g} confidence, δ = {delta:g}"
    result = api.epsilon(run_dir, delta=delta, confidence=confidence, attack=attack, seed=seed, canaries=canaries)
    bounds = result["attacks"]
    if canaries is None:
        header = ["attack", "ε_lb", "threshold", "test", "TPR_lo", "FPR_hi", "n (mem+non)"]
        table = c.rich_table(f"ε lower bounds ({level})", header, _mia_rows(bounds))
        note = (f"held-out split (seed {seed}): each threshold was chosen on a stratified half of the scores and "
                "the bound computed on the other half (n), so each row holds at the stated confidence on its own")
    else:
        header = ["attack", "ε_lb", "k+", "k-", "guesses", "correct", "canaries"]
        table = c.rich_table(f"one-run canary ε lower bounds ({level})", header, _canary_rows(bounds))
        tried = next(iter(bounds.values()))["pairs_tried"]
        note = (f"one run (Steinke, Nasr, Jagielski 2023): guess 'in' for the k+ highest scores, 'out' for the k- "
                f"lowest; the best of {tried} (k+, k-) pairs, Bonferroni-corrected, so each row holds at the stated "
                "confidence on its own")
    path = result.write(run_dir if out is None else out)
    c.print_table(table)
    stdout_console.print(note + (" (the largest of several attacks' rows does not)." if len(bounds) > 1 else "."),
                         soft_wrap=True)
    stdout_console.print(f"written: {path}", soft_wrap=True)
