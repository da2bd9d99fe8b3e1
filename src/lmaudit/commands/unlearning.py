"""``lmaudit unlearning-check``: does a forget set that an audit reads as forgotten come back under relearning or
quantisation, beyond what the same check does to the retrained model?"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from lmaudit import api
from lmaudit.api.reports import check_table
from lmaudit.commands import common as c
from lmaudit.commands.running import ModelOptions, RunOptions, check_out, finish, model_inputs, shared_options
from lmaudit.errors import SettingError
from lmaudit.progress import stdout_console

app = typer.Typer(add_completion=False)
DEFAULT_ATTACKS = ["loss", "zlib", "min_k"]


def _relearn_on(value: Optional[str]) -> tuple[Optional[float], Optional[Path]]:
    """``--relearn-on``: a fraction of the forget set in (0, 1), or a data file of texts to relearn on."""
    if value is None:
        return None, None
    try:
        share = float(value)
    except ValueError:
        return None, Path(value)
    if not 0 < share < 1:
        raise SettingError("relearn_on", f"{{name}} {value}: a fraction of the forget set must lie in (0, 1)",
                           hint="or give a data file of texts to relearn on")
    return share, None


@app.command("unlearning-check", rich_help_panel=c.PANEL_AUDIT)
@shared_options(run=True)
def unlearning_check(
    model: Path = typer.Option(..., help="The unlearned model folder (or GGUF file)."),
    retrained: Path = typer.Option(..., help="The model retrained without the forget set (the gold standard)."),
    forget: Path = typer.Option(..., help="The forget set."),
    members: Path = typer.Option(..., help="Texts both models are known to keep (e.g. the retain set)."),
    nonmembers: Path = typer.Option(..., help="Held-out texts neither model trained on."),
    relearn_on: Optional[str] = typer.Option(None, metavar="FRACTION|FILE",
                                             help="Relearn on this fraction of the forget set (the rest is audited; "
                                                  "default 0.25), or on the texts of this file."),
    steps: int = typer.Option(20, help="Relearning optimiser steps."),
    no_relearn: bool = typer.Option(False, "--no-relearn", help="Skip the relearning check."),
    lr: Optional[float] = typer.Option(None, help="Relearning learning rate (default: the model's fine-tuning "
                                                  "default)."),
    batch_size: Optional[int] = typer.Option(None, help="Relearning batch size."),
    lora: Optional[int] = typer.Option(None, "--lora", metavar="RANK", help="Relearn a LoRA adapter of this rank on "
                                                                             "top (as a pretrained model is tuned)."),
    quantize: str = typer.Option("q8_0,q4_0", help="Comma-separated GGUF quantisations to check (q8_0, q4_0), or "
                                                   "'none'."),
    attacks: Optional[str] = typer.Option(None, help="Comma-separated attacks audited (and SMI-M's features); default "
                                                     "loss,zlib,min_k, and reference with --reference."),
    reference: Optional[Path] = typer.Option(None, help="The base both models were tuned from: adds the reference "
                                                        "attack (the strongest here)."),
    bootstrap: int = typer.Option(1000, help="Paired bootstrap resamples."),
    min_return: float = typer.Option(0.02, help="The smallest return that counts (AUC, or share of the audited "
                                                "texts): an interval below it reads 'no return'."),
    text_field: str = c.text_field_option(),
    seed: int = c.seed_option(),
    out: Path = typer.Option(Path("runs/unlearning-check"), help="Output folder."),
    model_options: ModelOptions = None,
    run_options: RunOptions = None,
) -> None:
    """Relearning and quantisation checks of an unlearning, read against the retrained model with paired
    intervals."""
    share, texts = _relearn_on(relearn_on)
    check_out(out, job="unlearning_check", inputs={**model_inputs("--model", model, model_options),
                                                    **model_inputs("--retrained", retrained, model_options),
                                                    **model_inputs("--reference", reference, model_options),
                                                    "--forget": forget, "--members": members,
                                                    "--nonmembers": nonmembers, "--relearn-on": texts})
    schemes = [] if quantize.strip().lower() == "none" else c.split_names(quantize)
    named = c.split_names(attacks) or DEFAULT_ATTACKS + (["reference"] if reference else [])
    cfg = api.CheckConfig(relearn_fraction=share or 0.25, steps=steps, relearn=not no_relearn, lr=lr,
                          batch_size=batch_size, quantize=schemes, attacks=named, bootstrap=bootstrap, seed=seed,
                          min_return=min_return)
    result = api.unlearning_check(model, retrained, forget, members, nonmembers, relearn_on=texts, config=cfg,
                                  lora=lora, reference=reference, text_field=text_field,
                                  **model_options.training_kwargs())
    path = result.write(out, report=not run_options.no_report)
    c.print_table(c.rich_table(f"Unlearning check: {result['n_audited']} audited forget texts", *check_table(
        result.payload)))
    stdout_console.print(result.headline(), markup=False, soft_wrap=not stdout_console.is_terminal)
    finish(path, out, run_options.no_report, run_options.mlflow)
