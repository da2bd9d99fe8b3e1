"""``lmaudit canaries make`` and ``canaries audit``: secret canaries to plant, and their exposure (Carlini et al.,
2019) in a model trained with them."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from lmaudit import api
from lmaudit.api.secrets import write_exposure_canaries
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

app = typer.Typer(add_completion=False, no_args_is_help=True, rich_help_panel=c.PANEL_AUDIT,
                  help="Secret canaries to plant in fine-tuning data, and how much a model exposes them (bits).")


def _say(text: str) -> None:
    stdout_console.print(text, markup=False, highlight=False, emoji=False, soft_wrap=True)


@app.command("make")
def canaries_make(
    config: Optional[Path] = c.config_option(),
    out: Path = typer.Option(..., help="Folder for canaries.json (the secrets: keep it private) and train.jsonl."),
    template: str = typer.Option(..., "--format", help="The canaries' text with slots: {digits:K} (K digits) and "
                                                       "{letters:L} (L letters a-z), e.g. \"my pin is {digits:6}\"; "
                                                       "{{ and }} are literal braces. At least 400 fillings, and "
                                                       "letters 5 or more in a row (shorter runs fill in as words)."),
    n: int = typer.Option(20, "--n", help="Number of canaries (distinct secrets of the format)."),
    insertions: str = typer.Option("0,1,4,16", help="Insertion counts, comma-separated: canary i is put in "
                                                    "train.jsonl the i-th count (in turn) times; 0 plants a control, "
                                                    "never trained on, that the audit compares the others with."),
    seed: int = c.seed_option("Seed of the secrets and of the order of train.jsonl."),
) -> None:
    """Random secrets of a format, each put in train.jsonl its insertion count times.

    Append train.jsonl to the fine-tuning data, then measure the canaries with 'lmaudit canaries audit'."""
    check_out(out, kind="canaries")
    info = write_exposure_canaries(out, template, n=n, insertions=insertions, seed=seed)
    counts = [r["insertions"] for r in info["canaries"]]
    per = ", ".join(f"{counts.count(k)} × {k}" for k in sorted(set(counts)))
    _say(f"{n} canaries of '{template}' (|R| = {info['space_size']:,} fillings, {info['space_log2']:.1f} bits), "
         f"inserted {per} time(s)")
    _say(f"train.jsonl: {out / 'train.jsonl'} ({info['train_lines']} lines: append them to the fine-tuning data)")
    _say(f"the secrets: {out / 'canaries.json'} (keep it from whoever should not know them)")


@app.command("audit")
@shared_options(run=True)
def canaries_audit(
    config: Optional[Path] = c.config_option(),
    model: Optional[Path] = c.model_option("Local AR model folder."),
    canaries: Path = typer.Option(..., help="A folder from 'lmaudit canaries make'."),
    candidates: int = typer.Option(10_000, help="Never-inserted fillings of the format to rank each canary among "
                                                "(at most as many as there are: that many gives the exact rank)."),
    bootstrap: int = typer.Option(50, help="Resamples of the skew-normal fit, for a canary no candidate beats."),
    seed: int = c.seed_option("Seed of the candidates and of the bootstrap."),
    out: Path = typer.Option(Path("runs/canaries"), help="Output folder."),
    model_options: ModelOptions = None,
    run_options: RunOptions = None,
) -> None:
    """Exposure of each canary in bits: log2|R| − log2 rank among never-inserted fillings of its format.

    Each exposure comes with a 95% interval (of that canary's rank) and the chance p = 2^-exposure of a canary never
    trained on scoring as high; each insertion count is compared with the controls (inserted 0 times) by the shift of
    its exposures, with a 95% interval. 'lmaudit gate OUT --max-exposure BITS' gates them."""
    model = c.pick_model(model, None, "")
    check_out(out, job="canaries",
              inputs={**model_inputs("--model", model, model_options), "--canaries": canaries})
    cfg = api.ExposureConfig(candidates=candidates, bootstrap=bootstrap, seed=seed)
    with backend_from(run_options.backend, run_options.address, run_options.workers) as backend:
        result = api.canaries(model, canaries, config=cfg, backend=backend,
                              **model_options.load_kwargs(run_options.backend))
    payload = result.payload
    path = result.write(out, report=not run_options.no_report)
    ref = payload["reference"]
    how = "every never-inserted filling (exact ranks)" if ref["enumerated"] else \
        f"{ref['candidates']:,} of {ref['pool']:,} never-inserted fillings"
    rows = [[cid, str(e["insertions"]), f"{e['log_perplexity_bits']:.2f}", f"{e['exposure']:.2f}",
             f"[{e['exposure_ci95'][0]:.2f}, {e['exposure_ci95'][1]:.2f}]", f"{e['chance_p']:.2g}",
             str(e["beaten_by"]), e["estimate"]]
            for cid, e in payload["exposure"].items()]
    c.print_table(c.rich_table(f"Canary exposure (bits, at most {ref['max_exposure']:.2f}), ranked among {how}",
                               ["canary", "insertions", "log-perplexity", "exposure", "95% interval", "chance p",
                                "beaten by", "estimate"], rows))
    groups = [[k, str(g["n"]), f"{g['median']:.2f}", f"[{g['median_ci95'][0]:.2f}, {g['median_ci95'][1]:.2f}]",
               f"{g['median_ci_coverage']:.2f}", f"{g['min']:.2f} – {g['max']:.2f}"]
              for k, g in payload["by_insertions"].items()]
    c.print_table(c.rich_table("Exposure by insertion count", ["insertions", "canaries", "median", "interval of the "
                                                               "median", "its coverage", "range"], groups))
    _versus_controls(payload["versus_controls"])
    finish(path, out, run_options.no_report, run_options.mlflow)


def _versus_controls(versus: dict) -> None:
    """The controls against chance, and each insertion count against the controls."""
    chance, controls = versus["chance"], versus["controls"]
    if controls is None:
        _say(f"No controls (canaries inserted 0 times): chance is the only baseline, a never-trained canary's exposure "
             f"being above e bits with probability 2^-e (median {chance['median']:.2f}, mean {chance['mean']:.2f} "
             "bits). Plant controls with --insertions 0,... to compare against.")
        return
    lo, hi = controls["median_ci95"]
    test = ("" if controls["candidates_p"] is None else
            f"; scored like the never-inserted fillings: Mann–Whitney p = {controls['candidates_p']:.2g}"
            + ("" if controls["like_chance"] else " (they are not: was a control trained on?)"))
    _say(f"Controls (never trained on): median exposure {controls['median']:.2f} bits, interval [{lo:.2f}, {hi:.2f}] "
         f"(coverage {controls['median_ci_coverage']:.2f}); chance's median is {chance['median']:.2f}{test}")
    shifts = [[k, str(g["n"]), f"{g['shift']:+.2f}", f"[{g['ci'][0]:+.2f}, {g['ci'][1]:+.2f}]",
               f"{g['coverage']:.2f}", g["verdict"]] for k, g in versus["groups"].items()]
    if shifts:
        c.print_table(c.rich_table(f"Exposure against the {controls['n']} controls: shift in bits (Hodges–Lehmann)",
                                   ["insertions", "canaries", "shift", "interval", "its coverage", "verdict"],
                                   shifts))
