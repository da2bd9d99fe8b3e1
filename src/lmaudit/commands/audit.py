"""``lmaudit audit-set``: the fraction of a suspect set that behaves like non-members (SMI / SMI-M), or the proportion
of it used in training (DUCI, on shadow models); ``lmaudit dataset-inference``: a p-value for "the model was trained
on the suspect set"."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from lmaudit import api
from lmaudit.api.reports import audit_caveats, audit_rows, inference_summary
from lmaudit.commands import common as c
from lmaudit.commands.mia import data_option, label_field_option
from lmaudit.commands.running import (
    ModelOptions,
    RunOptions,
    backend_from,
    check_out,
    finish,
    model_inputs,
    shared_options,
)
from lmaudit.progress import stdout_console

app = typer.Typer(add_completion=False)


@app.command("audit-set", rich_help_panel=c.PANEL_AUDIT)
@shared_options(run=True)
def audit_set(
    config: Optional[Path] = c.config_option(),
    model: Optional[Path] = c.model_option("Local model folder (AR or DLM) to audit."),
    members: Optional[Path] = typer.Option(None, help="Texts known to be in the training data (e.g. the retain set)."),
    nonmembers: Optional[Path] = typer.Option(None, help="Texts known not to be in the training data."),
    suspect: Path = typer.Option(..., help="The set to audit (a forget set, a benchmark, ...)."),
    data: Optional[Path] = data_option(),
    label_field: Optional[str] = label_field_option(),
    text_field: str = c.text_field_option(),
    split: Optional[str] = c.split_option(),
    method: str = typer.Option("both", help="smi, smi-m, both (smi and smi-m) or duci (the used proportion, calibrated "
                                            "on --shadows; no members or non-members)."),
    features: str = typer.Option("hidden", help="hidden (mean-pooled last hidden state) or scores (attack scores)."),
    kernel: str = typer.Option("rbf", help="SMI-M kernel: rbf, laplacian or linear."),
    bandwidth_factor: float = typer.Option(1.0, help="SMI-M: multiplies the median-distance bandwidth."),
    bootstrap: int = typer.Option(200, help="Bootstrap resamples for the interval (SMI: 90%, of the suspect set; "
                                            "DUCI: 95%, of the records with their shadow scores)."),
    attacks: Optional[str] = typer.Option(None, help="features=scores: comma-separated attacks (default: all)."),
    reference: Optional[Path] = typer.Option(None, help="features=scores or method duci: reference model for "
                                                        "reference attacks."),
    shadows: Optional[Path] = typer.Option(None, help="method duci: folder from 'lmaudit shadows' whose pool held the "
                                                      "suspect set (the reference models of known membership)."),
    attack: Optional[str] = typer.Option(None, help="method duci: the attack whose decisions are counted (default: "
                                                    "reference with --reference, else loss)."),
    seed: int = c.seed_option(),
    out: Path = typer.Option(Path("runs/audit"), help="Output folder."),
    allow_overlap: bool = c.allow_overlap_option(),
    model_options: ModelOptions = None,
    run_options: RunOptions = None,
) -> None:
    """Set-level audit: the fraction ρ of the suspect set that behaves like non-members (1 − ρ: trained on); with
    --method duci, the proportion of it used in training, from one attack's decisions debiased on shadow models."""
    model, reference = c.pick_model(model, None, ""), c.source_arg(reference)
    check_out(out, job="audit_set", inputs={**model_inputs("--model", model, model_options),
                                             **model_inputs("--reference", reference, model_options),
                                             "--members": members, "--nonmembers": nonmembers, "--data": data,
                                             "--suspect": suspect, "--shadows": shadows})
    cfg = api.AuditConfig(method=method, features=features, kernel=kernel, bandwidth_factor=bandwidth_factor,
                          bootstrap=bootstrap, seed=seed, attacks=c.split_names(attacks), allow_overlap=allow_overlap,
                          attack=attack)
    with backend_from(run_options.backend, run_options.address, run_options.workers) as backend:
        result = api.audit_set(model, members, nonmembers, suspect, data=data, label_field=label_field,
                               text_field=text_field, split=split, reference=reference, shadows=shadows, config=cfg,
                               backend=backend, **model_options.load_kwargs(run_options.backend))
    payload = result.payload
    path = result.write(out, report=not run_options.no_report)
    if method == "duci":
        title = (f"DUCI: the proportion of {payload['n_suspect']} suspect texts used in training, calibrated on "
                 f"{payload['n_shadows']} shadow models ({payload['methods']['duci']['attack']} attack)")
    else:
        title = (f"Set-level audit: {payload['n_suspect']} suspect texts vs {payload['n_members']} members / "
                 f"{payload['n_nonmembers']} non-members ({features} features, d = {payload['features']['dim']})")
    c.print_table(c.rich_table(title, *audit_rows(payload)))
    caveats = audit_caveats(payload)  # shared texts
    caveats += [f"Caveat: {note}." for note in payload["overlap"].get("notes", [])]  # formats that differ
    if caveats:
        stdout_console.print(" ".join(caveats), markup=False, soft_wrap=not stdout_console.is_terminal)
    finish(path, out, run_options.no_report, run_options.mlflow)


@app.command("dataset-inference", rich_help_panel=c.PANEL_AUDIT)
@shared_options(run=True)
def dataset_inference(
    config: Optional[Path] = c.config_option(),
    model: Optional[Path] = c.model_option("Local model folder (AR or DLM) to audit."),
    suspect: Path = typer.Option(..., help="The set that may have been trained on (e.g. a content owner's texts)."),
    validation: Path = typer.Option(..., help="Texts drawn like the suspect set and known never to have been "
                                              "trained on."),
    members: Optional[Path] = typer.Option(None, help="Texts known to be trained on: adds SMI's ρ of the suspect "
                                                      "set on the same scores."),
    reference: Optional[Path] = typer.Option(None, help="Reference model folder (adds the reference attacks)."),
    text_field: str = c.text_field_option(),
    split: Optional[str] = c.split_option(),
    attacks: Optional[str] = typer.Option(None, help="Comma-separated attacks whose scores are the features "
                                                     "(default: every attack that can run)."),
    param: list[str] = typer.Option([], help="Attack parameter ATTACK.KEY=VALUE (repeatable)."),
    splits: int = typer.Option(20, help="Seeded halvings of both sets; the test runs on each."),
    outliers: str = typer.Option("clip", help="clip (each score to the 2.5th-97.5th percentiles of the fitting "
                                              "halves) or none."),
    budget: int = typer.Option(16, help="DLM: masked forwards per model per sample, for every attack."),
    seed: int = c.seed_option(),
    no_cache: bool = typer.Option(False, "--no-cache", help="Do not read or write the probe cache."),
    out: Path = typer.Option(Path("runs/dataset-inference"), help="Output folder."),
    allow_overlap: bool = c.allow_overlap_option(),
    blind: bool = typer.Option(True, "--blind/--no-blind",
                               help="Also score the suspect and validation sets with model-free baselines (n-grams, "
                                    "simple features; out of fold): when they tell the sets apart the verdict is "
                                    "\"cannot tell\"."),
    reference_prior: bool = typer.Option(
        True, "--reference-prior/--no-reference-prior",
        help="With --reference: also score both sets with the reference as the target (it never saw either set, so "
             "its AUC should be near 0.5; when it tells them apart the verdict is \"cannot tell\")."),
    model_options: ModelOptions = None,
    run_options: RunOptions = None,
) -> None:
    """Dataset inference: a p-value for "the model was trained on the suspect set" (Maini et al., 2024)."""
    model, reference = c.pick_model(model, None, ""), c.source_arg(reference)
    check_out(out, job="dataset_inference", inputs={**model_inputs("--model", model, model_options),
                                                     **model_inputs("--reference", reference, model_options),
                                                     "--suspect": suspect, "--validation": validation,
                                                     "--members": members})
    cfg = api.InferenceConfig(attacks=c.split_names(attacks), params=c.parse_params(param), splits=splits, seed=seed,
                              outliers=outliers, budget=budget, use_cache=not no_cache, allow_overlap=allow_overlap,
                              blind=blind, reference_prior=reference_prior)
    with backend_from(run_options.backend, run_options.address, run_options.workers) as backend:
        result = api.dataset_inference(model, suspect, validation, members=members, reference=reference,
                                       text_field=text_field, split=split, config=cfg, backend=backend,
                                       **model_options.load_kwargs(run_options.backend))
    path = result.write(out, report=not run_options.no_report)
    summary = inference_summary(result.payload)  # every point but the closing reading: the checks and caveats too
    said = [p for p in summary.points if not p.startswith("Reading:")]
    stdout_console.print(summary.headline + ". " + " ".join(said), markup=False,
                         soft_wrap=not stdout_console.is_terminal)
    finish(path, out, run_options.no_report, run_options.mlflow)
