"""``lmaudit mia`` and ``lmaudit demo``."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from lmaudit.commands import common as c
from lmaudit.commands.running import backend_from, finish
from lmaudit.data.loaders import load_texts
from lmaudit.models.loading import load_model
from lmaudit.models.shadows import ShadowSet
from lmaudit.progress import stdout_console
from lmaudit.runs.demo import FULL, QUICK, run_demo
from lmaudit.runs.mia import RunConfig, results_table, run_mia

app = typer.Typer(add_completion=False)


@app.command(rich_help_panel=c.PANEL_AUDIT)
@c.shared_options(run=True)
def mia(
    config: Optional[Path] = c.config_option(),
    model: Optional[Path] = c.model_option("Local model folder to audit (the target)."),
    target: Optional[Path] = c.alias_option("--target"),
    members: Path = typer.Option(..., help="Texts known to be in the training data."),
    nonmembers: Path = typer.Option(..., help="Texts known not to be in the training data."),
    reference: Optional[Path] = typer.Option(None, help="Reference model folder (enables 'reference')."),
    attacks: Optional[str] = typer.Option(None, help="Comma-separated attacks (default: all that can run)."),
    param: list[str] = typer.Option([], help="Attack parameter ATTACK.KEY=VALUE (repeatable)."),
    out: Path = typer.Option(Path("runs/mia"), help="Output folder."),
    seed: int = typer.Option(0),
    batch_size: int = typer.Option(32),
    bootstrap: int = typer.Option(1000, help="Bootstrap resamples for the AUC interval."),
    no_cache: bool = typer.Option(False, "--no-cache", help="Do not read or write the probe cache."),
    budget: int = typer.Option(16, help="DLM: masked forwards per model per sample, for every attack."),
    shadows: Optional[Path] = typer.Option(None, help="Folder from 'lmaudit shadows' (enables lira and rmia)."),
    model_options: c.ModelOptions = None,
    run_options: c.RunOptions = None,
) -> None:
    """Membership inference: members vs non-members, every attack, AUC and TPR@FPR."""
    model = c.pick_model(model, target, "--target")
    c.check_out(out)
    mem, non = load_texts(members), load_texts(nonmembers)
    cfg = RunConfig(attacks=c.split_names(attacks), params=c.parse_params(param), seed=seed, batch_size=batch_size,
                    n_bootstrap=bootstrap, use_cache=not no_cache, budget=budget)
    opts = model_options.load_kwargs(run_options.backend)
    tgt = load_model(model, **opts)
    ref = load_model(reference, **{**opts, "kind": tgt.kind}) if reference else None
    shadow_set = ShadowSet.load(shadows) if shadows is not None else None
    with backend_from(run_options.backend, run_options.address, run_options.workers):
        result = run_mia(tgt, mem, non, reference=ref, config=cfg, shadows=shadow_set)
    path = result.write(out, report=not run_options.no_report)
    stdout_console.print(results_table(result))
    finish(path, out, run_options.no_report)


@app.command(rich_help_panel=c.PANEL_RESULTS)
def demo(
    config: Optional[Path] = c.config_option(),
    quick: bool = typer.Option(False, "--quick", help="A smaller, faster version of the same pipeline."),
    out: Path = typer.Option(Path("runs/demo"), help="Output folder."),
    no_report: bool = typer.Option(False, "--no-report", help="Do not write report.html / report.md."),
) -> None:
    """Run the whole pipeline on the embedded default (corpus, tiny models, every AR and DLM attack)."""
    c.check_out(out)
    result, dlm_result = run_demo(out, QUICK if quick else FULL, report=not no_report)
    stdout_console.print(results_table(result))
    stdout_console.print(results_table(dlm_result))
    stdout_console.print(f"(total {result.timings_s['demo_total']:.0f} s)")
    finish(out / "results.json", out, no_report)
