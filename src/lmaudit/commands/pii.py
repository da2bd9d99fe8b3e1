"""``lmaudit pii``: reconstruct redacted PII fields and report the attack success rate per ranking signal."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from lmaudit import api
from lmaudit.api.reports import asr_rows, mask_value, redact
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
from lmaudit.progress import stdout_console
from lmaudit.settings import read_number

app = typer.Typer(add_completion=False)


@app.command(rich_help_panel=c.PANEL_AUDIT)
@shared_options(run=True)
def pii(
    config: Optional[Path] = c.config_option(),
    model: Optional[Path] = c.model_option("Local model folder (DLM, or AR) to attack."),
    records: Path = typer.Option(..., help="JSONL/CSV: redacted 'text' with one placeholder, and the true value."),
    field: str = typer.Option("email", help="email or phone: the column holding the true value."),
    reference: Optional[Path] = typer.Option(None, help="DLM reference model: enables the Q-Skew signals."),
    candidates: int = typer.Option(64, help="Independent generations per record."),
    mask_length: str = typer.Option("20", help="Mask tokens inserted at the placeholder (AR: tokens sampled); a "
                                                "comma list (8,10,12) spreads the candidates over those lengths."),
    steps: Optional[int] = typer.Option(None, help="DLM denoising steps (default: mask length)."),
    alpha: str = typer.Option("auto", help="Weight of Q-Skew in 'combined': a number, or auto (fit on --calibration)."),
    calibration: Optional[Path] = typer.Option(None, help="Records with known values to fit alpha on."),
    include_truth: bool = typer.Option(False, "--include-truth",
                                       help="Inference mode: add the true value to each record's candidates, so the "
                                            "signals are compared as rankers even where generation misses it."),
    placeholder: str = typer.Option("[REDACTED]", help="The marker that replaced the value in the text."),
    show_pii: bool = typer.Option(False, "--show-pii", help="Show and write the PII values (hidden by default)."),
    seed: int = c.seed_option(),
    out: Path = typer.Option(Path("runs/pii"), help="Output folder."),
    text_field: str = c.text_field_option(),
    split: Optional[str] = c.split_option(),
    model_options: ModelOptions = None,
    run_options: RunOptions = None,
) -> None:
    """Reconstruct a redacted field: generate candidates, rank them (ce, Q-Skew, combined), report top-1 ASR."""
    model, reference = c.pick_model(model, None, ""), c.source_arg(reference)
    check_out(out, job="reconstruct_pii", inputs={**model_inputs("--model", model, model_options),
                                                      **model_inputs("--reference", reference, model_options),
                                                      "--records": records, "--calibration": calibration})
    # the options' text as the settings' values; the config's declared checks refuse a bad one, naming the option
    lengths = [read_number(m.strip(), integral=True) for m in mask_length.split(",")]
    cfg = api.ReconstructConfig(field=field, candidates=candidates,
                                mask_length=lengths[0] if len(lengths) == 1 else lengths, steps=steps,
                                alpha=alpha if alpha == "auto" else read_number(alpha), include_truth=include_truth,
                                seed=seed)
    # the records are read and checked before the model loads
    with backend_from(run_options.backend, run_options.address, run_options.workers) as backend:
        result = api.reconstruct_pii(model, records, reference=reference, calibration=calibration, config=cfg,
                                     placeholder=placeholder, show_pii=show_pii, text_field=text_field, split=split,
                                     backend=backend, **model_options.load_kwargs(run_options.backend))
    payload = result.payload
    path = result.write(out, report=not run_options.no_report)
    cov = payload["coverage"]
    title = (f"PII reconstruction ({field}), {payload['mode']} mode: {payload['n_records']} records, true value "
             f"generated for {cov['percent']:.0f}% (95% interval {cov['ci95'][0]:.0f}–{cov['ci95'][1]:.0f}%)"
             + (f", α = {payload['alpha']:g}" if payload["alpha"] is not None else ""))
    c.print_table(c.rich_table(title, *asr_rows(payload)))
    if payload["alpha_sweep"] is not None:
        sweep = payload["alpha_sweep"]
        stdout_console.print("  combined ASR by α: " + ", ".join(f"{a:g}: {p:.0f}%" for a, p in
                                                                 zip(sweep["alpha"], sweep["percent"])))
    if "generation" in payload:
        stdout_console.print("  generation mode (the true value only when generated): " + ", ".join(
            f"{s} {a['percent']:.0f}%" for s, a in payload["generation"]["asr"].items()))
    show = (lambda v: v or "-") if show_pii else (lambda v: mask_value(v, field))
    for rid, case in list(zip(payload["records"]["id"], payload["_cases"]))[:5]:
        top = case["values"][0] if case["values"] else None
        rid = rid if show_pii else redact(str(rid))  # an id that looks like an e-mail address or a phone number
        stdout_console.print(f"  {rid}: true {show(case['truth'])}, first candidate {show(top)}", highlight=False,
                             markup=False)
    finish(path, out, run_options.no_report, run_options.mlflow)
