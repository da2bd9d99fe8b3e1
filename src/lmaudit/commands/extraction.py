"""``lmaudit extract`` and ``lmaudit generate``."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from lmaudit import api
from lmaudit.api.reports import summary_rows
from lmaudit.api.setup import parse_steps
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

app = typer.Typer(add_completion=False)


def extraction_table(payload: dict):
    """A rich table of an extraction summary: one row per step count (or 'ar')."""
    cfg = payload["config"]
    return c.rich_table(f"Extraction ({payload['kind'].upper()}): {payload['n_records']} records, mask {cfg['mask']}, "
                        f"n = {cfg['n']:,} queries", *summary_rows(payload))


@app.command(rich_help_panel=c.PANEL_AUDIT)
@shared_options(run=True)
def extract(
    config: Optional[Path] = c.config_option(),
    model: Optional[Path] = c.model_option(),
    data: Path = typer.Option(..., help="JSONL/CSV/folder of texts; PII masks read the named fields."),
    mask: str = typer.Option("suffix:32", help="suffix:K | prefix:K | random:F | span:A-B[,C-D] | pii[:email+phone]."),
    steps: str = typer.Option("1,2,4,8,max", help="DLM step counts N (comma-separated; 'max' = |M|)."),
    order: str = typer.Option("random", help="DLM unmasking order: random or low_confidence."),
    trajectories: int = typer.Option(512, help="Random trajectories R per record."),
    temperature: float = typer.Option(1.0, help="Sampling temperature T (> 0)."),
    n: int = typer.Option(10_000, help="Query budget n."),
    p: str = typer.Option("0.5,0.99", help="Target success probabilities p (comma-separated)."),
    context: str = typer.Option("both", help="DLM: 'left' hides the tokens after the mask, as an AR model."),
    relaxed: Optional[int] = typer.Option(None, help="Also relaxed extraction up to this Hamming tolerance ε."),
    samples: int = typer.Option(128, help="Relaxed extraction: sampled generations per record."),
    seed: int = c.seed_option(),
    show_pii: bool = typer.Option(False, "--show-pii", help="Write record ids that look like e-mail addresses or "
                                                            "phone numbers unmasked (masked by default)."),
    out: Path = typer.Option(Path("runs/extract"), help="Output folder."),
    text_field: str = c.text_field_option(),
    split: Optional[str] = c.split_option(),
    model_options: ModelOptions = None,
    run_options: RunOptions = None,
) -> None:
    """(n,p)-discoverable extraction: single-query success probability of reproducing the masked tokens."""
    model = c.pick_model(model, None, "")
    check_out(out, job="extract", inputs={**model_inputs("--model", model, model_options), "--data": data})
    try:
        ps = [float(x) for x in p.split(",") if x.strip()]
    except ValueError:
        raise LmauditError(f"--p '{p}' is not a comma-separated list of numbers", hint="e.g. --p 0.5,0.99") from None
    cfg = api.ExtractConfig(mask=mask, steps=parse_steps(steps), order=order, trajectories=trajectories,
                            temperature=temperature, n=n, p=ps, context=context, relaxed=relaxed, samples=samples,
                            seed=seed)
    with backend_from(run_options.backend, run_options.address, run_options.workers) as backend:  # data read first
        result = api.extract(model, data, config=cfg, text_field=text_field, split=split, show_pii=show_pii,
                             backend=backend, **model_options.load_kwargs(run_options.backend))
    payload = result.payload
    path = result.write(out, report=not run_options.no_report)
    c.print_table(extraction_table(payload))
    if "relaxed" in payload:
        r = payload["relaxed"]
        stdout_console.print("relaxed Pr(d ≤ ε), Gaussian vs empirical: " + ", ".join(
            f"ε={e}: {a:.3f}/{b:.3f}" for e, a, b in zip(r["eps"], r["predicted"], r["empirical"])))
    finish(path, out, run_options.no_report, run_options.mlflow)

@app.command(rich_help_panel=c.PANEL_MODELS)
@shared_options()
def generate(
    config: Optional[Path] = c.config_option(),
    model: Optional[Path] = c.model_option(),
    prompt_file: Path = typer.Option(..., help="JSONL/CSV/folder of prompts ('text' field)."),
    gen_length: int = typer.Option(32, help="Tokens to generate per prompt."),
    steps: int = typer.Option(32, help="DLM: denoising steps in total."),
    block_length: Optional[int] = typer.Option(None, help="DLM: semi-autoregressive block length "
                                                          "(default: one block)."),
    temperature: float = typer.Option(1.0, help="0 = greedy."),
    remasking: str = typer.Option("low_confidence", help="DLM: low_confidence or random."),
    seed: int = c.seed_option(),
    model_options: ModelOptions = None,
) -> None:
    """Sample continuations: LLaDA-style unmasking for a DLM, left-to-right sampling for an AR model."""
    model = c.pick_model(model, None, "")
    rows = api.generate(model, prompt_file, gen_length=gen_length, steps=steps, block_length=block_length,
                        temperature=temperature, remasking=remasking, seed=seed, **model_options.load_kwargs())
    for row in rows.itertuples():
        stdout_console.print(f"[bold]{row.id}[/bold] {row.prompt}[green]{row.continuation}[/green]", soft_wrap=True)
