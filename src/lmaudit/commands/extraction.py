"""``lmaudit extract``, ``lmaudit generate`` and ``lmaudit corpus pii``."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from lmaudit.commands import (address_option, backend_from, backend_option, driver_device, finish, rich_table,
                              workers_option)
from lmaudit.progress import stdout_console


def extraction_table(payload: dict):
    """A rich table of an extraction summary: one row per step count (or 'ar')."""
    from lmaudit.report.extraction import summary_rows

    cfg = payload["config"]
    return rich_table(f"Extraction ({payload['kind'].upper()}): {payload['n_records']} records, mask {cfg['mask']}, "
                      f"n = {cfg['n']:,} queries", *summary_rows(payload))


def write_extraction(payload: dict, out: Path) -> Path:
    """``OUT/results.json`` (summary, config) and ``OUT/records.csv`` (one row per record)."""
    import pandas as pd

    from lmaudit.utils import atomic_path, write_json_atomic

    out.mkdir(parents=True, exist_ok=True)
    records = payload.pop("records")
    with atomic_path(out / "records.csv") as tmp:
        pd.DataFrame(records).to_csv(tmp, index=False)
    write_json_atomic(out / "results.json", {"type": "extraction", **payload})
    payload["records"] = records
    return out / "results.json"


def register(app: typer.Typer, corpus_app: typer.Typer, config_option) -> None:
    @app.command()
    def extract(
        config: Optional[Path] = config_option(),
        model: Path = typer.Option(..., help="Local model folder (AR or DLM)."),
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
        seed: int = typer.Option(0),
        out: Path = typer.Option(Path("runs/extract"), help="Output folder."),
        kind: Optional[str] = typer.Option(None, help="ar or dlm (default: from the saved config)."),
        trust_remote_code: bool = typer.Option(False, help="Allow modeling code shipped with the checkpoint."),
        allow_pickle: bool = typer.Option(False, help="Allow pickle (.bin) weights."),
        no_report: bool = typer.Option(False, "--no-report", help="Do not write report.html / report.md."),
        backend: str = backend_option(),
        address: Optional[str] = address_option(),
        workers: Optional[int] = workers_option(),
    ) -> None:
        """(n,p)-discoverable extraction: single-query success probability of reproducing the masked tokens."""
        from lmaudit.data.loaders import load_texts
        from lmaudit.errors import LmauditError
        from lmaudit.extraction.run import ExtractConfig, parse_steps, run_extraction
        from lmaudit.models.loading import load_model

        try:
            ps = [float(x) for x in p.split(",") if x.strip()]
        except ValueError:
            raise LmauditError(f"--p '{p}' is not a comma-separated list of numbers", hint="e.g. --p 0.5,0.99") from None
        cfg = ExtractConfig(mask=mask, steps=parse_steps(steps), order=order, trajectories=trajectories,
                            temperature=temperature, n=n, p=ps, context=context, relaxed=relaxed, samples=samples,
                            seed=seed)
        loaded = load_model(model, kind=kind, trust_remote_code=trust_remote_code, allow_pickle=allow_pickle,
                            device=driver_device(backend))
        with backend_from(backend, address, workers):
            payload = run_extraction(loaded, load_texts(data), cfg)
        payload["model"] = str(model)
        path = write_extraction(payload, out)
        stdout_console.print(extraction_table(payload))
        if "relaxed" in payload:
            r = payload["relaxed"]
            stdout_console.print("relaxed Pr(d ≤ ε), Gaussian vs empirical: " + ", ".join(
                f"ε={e}: {a:.3f}/{b:.3f}" for e, a, b in zip(r["eps"], r["predicted"], r["empirical"])))
        finish(path, out, no_report)

    @app.command()
    def generate(
        config: Optional[Path] = config_option(),
        model: Path = typer.Option(..., help="Local model folder (AR or DLM)."),
        prompt_file: Path = typer.Option(..., help="JSONL/CSV/folder of prompts ('text' field)."),
        gen_length: int = typer.Option(32, help="Tokens to generate per prompt."),
        steps: int = typer.Option(32, help="DLM: denoising steps in total."),
        block_length: Optional[int] = typer.Option(None, help="DLM: semi-autoregressive block length (default: one block)."),
        temperature: float = typer.Option(1.0, help="0 = greedy."),
        remasking: str = typer.Option("low_confidence", help="DLM: low_confidence or random."),
        seed: int = typer.Option(0),
        kind: Optional[str] = typer.Option(None, help="ar or dlm (default: from the saved config)."),
    ) -> None:
        """Sample continuations: LLaDA-style unmasking for a DLM, left-to-right sampling for an AR model."""
        import numpy as np

        from lmaudit.data.loaders import load_texts
        from lmaudit.extraction.sampler import ar_sample, denoise
        from lmaudit.models.loading import load_model

        loaded = load_model(model, kind=kind)
        tok = loaded.tokenizer
        for i, rec in enumerate(load_texts(prompt_file).records):
            prompt = np.asarray(tok(rec.text)["input_ids"], dtype=np.int64)
            if loaded.kind == "ar":
                new = ar_sample(loaded.model, prompt, gen_length, samples=1, temperature=temperature, seed=seed + i)[0]
            else:
                x = np.concatenate([prompt, np.full(gen_length, loaded.adapter.mask_token_id)])[None]
                new = denoise(loaded.adapter, x, np.ones_like(x), steps=steps, temperature=temperature,
                              remasking=remasking, block_length=block_length, seed=seed + i)[0, len(prompt):]
            stdout_console.print(f"[bold]{rec.id}[/bold] {rec.text}[green]{tok.decode(new)}[/green]", soft_wrap=True)

    @corpus_app.command("pii")
    def corpus_pii(
        config: Optional[Path] = config_option(),
        out: Path = typer.Option(Path("data/pii"), help="Folder for train.jsonl and unseen.jsonl."),
        n_train: int = typer.Option(200),
        n_unseen: int = typer.Option(200),
        seed: int = typer.Option(0),
    ) -> None:
        """Write synthetic e-mails with names, e-mail addresses and phone numbers (seeded Faker)."""
        from lmaudit.data.corpus import build_corpus
        from lmaudit.data.pii import pii_corpus, write_jsonl

        train, unseen = pii_corpus(build_corpus(), n_train, n_unseen, seed=seed)
        stdout_console.print(f"{write_jsonl(train, out / 'train.jsonl')}  {write_jsonl(unseen, out / 'unseen.jsonl')}")
