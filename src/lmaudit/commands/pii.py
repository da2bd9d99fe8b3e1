"""``lmaudit pii``: reconstruct redacted PII fields and report the attack success rate per ranking signal."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from lmaudit.commands import finish, rich_table
from lmaudit.progress import stdout_console


def asr_rows(payload: dict) -> tuple[list[str], list[list[str]]]:
    header = ["signal", "top-1 ASR", "records", "median rank (when generated)"]
    rows = []
    for s, a in payload["asr"].items():
        ranks = [r for r in payload["records"][f"rank_{s}"] if r is not None]
        med = f"{sorted(ranks)[len(ranks) // 2]}" if ranks else "-"
        rows.append([s, f"{a['percent']:.1f}%", f"{a['count']}/{payload['n_records']}", med])
    return header, rows


def write_reconstruction(payload: dict, out: Path, *, show_pii: bool) -> Path:
    """results.json and records.csv (ranks only); candidates.jsonl with the values only when ``show_pii``."""
    import pandas as pd

    from lmaudit.utils import atomic_path, write_json_atomic

    out.mkdir(parents=True, exist_ok=True)
    cases = payload.pop("_cases")
    with atomic_path(out / "records.csv") as tmp:
        pd.DataFrame(payload["records"]).to_csv(tmp, index=False)
    write_json_atomic(out / "results.json", payload)
    if show_pii:
        with atomic_path(out / "candidates.jsonl") as tmp, open(tmp, "w", encoding="utf-8") as fh:
            for rid, c in zip(payload["records"]["id"], cases):
                fh.write(json.dumps({"id": rid, "truth": c["truth"], "candidates": c["values"],
                                     **{k: [float(x) for x in c[k]] for k in ("ce", "skew_pii", "skew_context")
                                        if k in c}}) + "\n")
    payload["_cases"] = cases
    return out / "results.json"


def register(app: typer.Typer, config_option) -> None:
    @app.command()
    def pii(
        config: Optional[Path] = config_option(),
        model: Path = typer.Option(..., help="Local model folder (DLM, or AR) to attack."),
        records: Path = typer.Option(..., help="JSONL/CSV: redacted 'text' with one placeholder, and the true value."),
        field: str = typer.Option("email", help="email or phone: the column holding the true value."),
        reference: Optional[Path] = typer.Option(None, help="DLM reference model: enables the Q-Skew signals."),
        candidates: int = typer.Option(64, help="Independent generations per record."),
        mask_length: int = typer.Option(20, help="Mask tokens inserted at the placeholder (AR: tokens sampled)."),
        steps: Optional[int] = typer.Option(None, help="DLM denoising steps (default: mask length)."),
        alpha: str = typer.Option("auto", help="Weight of Q-Skew in 'combined': a number, or auto (fit on --calibration)."),
        calibration: Optional[Path] = typer.Option(None, help="Records with known values to fit alpha on."),
        placeholder: str = typer.Option("[REDACTED]", help="The marker that replaced the value in the text."),
        show_pii: bool = typer.Option(False, "--show-pii", help="Show and write the PII values (hidden by default)."),
        seed: int = typer.Option(0),
        out: Path = typer.Option(Path("runs/pii"), help="Output folder."),
        no_report: bool = typer.Option(False, "--no-report", help="Do not write report.html / report.md."),
    ) -> None:
        """Reconstruct a redacted field: generate candidates, rank them (ce, Q-Skew, combined), report top-1 ASR."""
        from lmaudit.data.loaders import load_texts
        from lmaudit.errors import LmauditError
        from lmaudit.models.loading import load_model
        from lmaudit.reconstruct import ReconstructConfig, mask_value, redacted_records, run_reconstruction

        try:
            a = alpha if alpha == "auto" else float(alpha)
        except ValueError:
            raise LmauditError(f"--alpha '{alpha}' is neither 'auto' nor a number") from None
        if a != "auto" and not 0 <= a <= 1:
            raise LmauditError(f"--alpha must be in [0, 1], got {a}")
        cfg = ReconstructConfig(field=field, candidates=candidates, mask_length=mask_length, steps=steps, alpha=a,
                                seed=seed)
        recs = redacted_records(load_texts(records), field, placeholder=placeholder)
        calib = redacted_records(load_texts(calibration), field, placeholder=placeholder) if calibration else None
        target = load_model(model)
        ref = load_model(reference, kind=target.kind) if reference else None
        payload = run_reconstruction(target, recs, cfg, reference=ref, calibration=calib)
        payload.update({"config": {**cfg.__dict__, "placeholder": placeholder}, "model": str(model),
                        "reference": None if reference is None else str(reference), "show_pii": show_pii})
        path = write_reconstruction(payload, out, show_pii=show_pii)
        title = (f"PII reconstruction ({field}): {payload['n_records']} records, true value generated for "
                 f"{payload['coverage']['percent']:.0f}%" + (f", α = {payload['alpha']:g}" if payload["alpha"] is not None
                                                             else ""))
        stdout_console.print(rich_table(title, *asr_rows(payload)))
        show = (lambda v: v or "-") if show_pii else mask_value
        for rid, c in list(zip(payload["records"]["id"], payload["_cases"]))[:5]:
            top = c["values"][0] if c["values"] else None
            stdout_console.print(f"  {rid}: true {show(c['truth'])}, first candidate {show(top)}", highlight=False)
        finish(path, out, no_report)
