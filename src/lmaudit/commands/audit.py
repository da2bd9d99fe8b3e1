"""``lmaudit audit-set`` and ``lmaudit unlearn``."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from lmaudit.commands import (address_option, backend_from, backend_option, driver_device, finish, rich_table,
                              workers_option)
from lmaudit.progress import stdout_console


def audit_rows(payload: dict) -> tuple[list[str], list[list[str]]]:
    """(header, rows) of a set-level audit: one row per method."""
    header = ["method", "ρ (non-member-like)", "90% interval", "unclipped ρ", "trained fraction 1−ρ", "anomaly",
              "fit + bootstrap (ms)"]
    rows = []
    for name, est in payload["methods"].items():
        lo, hi = est["ci90"] if est["ci90"][0] is not None else (float("nan"), float("nan"))
        rows.append([name, f"{est['rho']:.3f}", f"[{lo:.3f}, {hi:.3f}]", f"{est['rho_unclipped']:.3f}",
                     f"{est['trained_fraction']:.3f}", "YES" if est["anomaly"] else "no",
                     f"{est['timings_ms']['fit'] + est['timings_ms']['bootstrap']:.0f}"])
    return header, rows


def register(app: typer.Typer, config_option) -> None:
    @app.command("audit-set")
    def audit_set(
        config: Optional[Path] = config_option(),
        model: Path = typer.Option(..., help="Local model folder (AR or DLM) to audit."),
        members: Path = typer.Option(..., help="Texts known to be in the training data (e.g. the retain set)."),
        nonmembers: Path = typer.Option(..., help="Texts known not to be in the training data."),
        suspect: Path = typer.Option(..., help="The set to audit (a forget set, a benchmark, ...)."),
        method: str = typer.Option("both", help="smi, smi-m or both."),
        features: str = typer.Option("hidden", help="hidden (mean-pooled last hidden state) or scores (attack scores)."),
        kernel: str = typer.Option("rbf", help="SMI-M kernel: rbf, laplacian or linear."),
        bandwidth_factor: float = typer.Option(1.0, help="SMI-M: multiplies the median-distance bandwidth."),
        bootstrap: int = typer.Option(200, help="Bootstrap resamples of the suspect set for the 90% interval."),
        attacks: Optional[str] = typer.Option(None, help="features=scores: comma-separated attacks (default: all)."),
        reference: Optional[Path] = typer.Option(None, help="features=scores: reference model for reference attacks."),
        seed: int = typer.Option(0),
        out: Path = typer.Option(Path("runs/audit"), help="Output folder."),
        kind: Optional[str] = typer.Option(None, help="ar or dlm (default: from the saved config)."),
        no_report: bool = typer.Option(False, "--no-report", help="Do not write report.html / report.md."),
        backend: str = backend_option(),
        address: Optional[str] = address_option(),
        workers: Optional[int] = workers_option(),
    ) -> None:
        """Set-level audit: the fraction ρ of the suspect set that behaves like non-members (1 − ρ: trained on)."""
        from lmaudit.audit.run import AuditConfig, run_audit
        from lmaudit.data.loaders import load_texts
        from lmaudit.models.loading import load_model
        from lmaudit.utils import write_json_atomic

        names = [a.strip() for a in attacks.split(",") if a.strip()] if attacks else None
        cfg = AuditConfig(method=method, features=features, kernel=kernel, bandwidth_factor=bandwidth_factor,
                          bootstrap=bootstrap, seed=seed, attacks=names)
        cfg.validate()
        loaded = load_model(model, kind=kind, device=driver_device(backend))
        ref = load_model(reference, kind=loaded.kind, device=driver_device(backend)) if reference else None
        with backend_from(backend, address, workers):
            payload = run_audit(loaded, load_texts(members), load_texts(nonmembers), load_texts(suspect), cfg,
                                reference=ref)
        out.mkdir(parents=True, exist_ok=True)
        write_json_atomic(out / "results.json", payload)
        title = (f"Set-level audit: {payload['n_suspect']} suspect texts vs {payload['n_members']} members / "
                 f"{payload['n_nonmembers']} non-members ({features} features, d = {payload['features']['dim']})")
        stdout_console.print(rich_table(title, *audit_rows(payload)))
        finish(out / "results.json", out, no_report)

    @app.command()
    def unlearn(
        config: Optional[Path] = config_option(),
        model: Path = typer.Option(..., help="The fine-tuned model folder (AR or DLM)."),
        forget: Path = typer.Option(..., help="Texts to forget."),
        retain: Path = typer.Option(..., help="Texts to keep (the rest of the training data)."),
        method: str = typer.Option(..., help="retrain, gradient_ascent, npo or finetune."),
        out: Path = typer.Option(..., help="Folder to save the unlearned model to."),
        base: Optional[Path] = typer.Option(None, help="retrain: the model the original fine-tuning started from."),
        epochs: float = typer.Option(2.0),
        lr: float = typer.Option(1e-4),
        batch_size: int = typer.Option(16),
        block: int = typer.Option(64, help="DFT block length in tokens."),
        mode: str = typer.Option("dft", help="dft or ift (as the original fine-tuning)."),
        retain_weight: float = typer.Option(1.0, help="gradient_ascent/npo: weight of the retain-set loss (0: none)."),
        npo_beta: float = typer.Option(0.1, help="npo: inverse temperature β."),
        seed: int = typer.Option(0),
    ) -> None:
        """Produce an unlearned model to audit (retrain = fine-tune the base on the retain set: the gold standard)."""
        from lmaudit.data.loaders import load_texts
        from lmaudit.progress import info
        from lmaudit.unlearn import unlearn as do_unlearn

        do_unlearn(model, load_texts(forget), load_texts(retain), out, method=method, base_dir=base, epochs=epochs,
                   lr=lr, batch_size=batch_size, block=block, mode=mode, retain_weight=retain_weight,
                   npo_beta=npo_beta, seed=seed)
        info(f"saved to {out}")

    @app.command()
    def shadows(
        config: Optional[Path] = config_option(),
        base: Path = typer.Option(..., help="The model the target was fine-tuned from."),
        pool: Path = typer.Option(..., help="Population pool: each shadow trains on a random half."),
        out: Path = typer.Option(..., help="Folder for the shadow models and shadows.json."),
        k: int = typer.Option(8, help="Number of shadow models."),
        epochs: float = typer.Option(4.0),
        lr: float = typer.Option(1e-3),
        block: int = typer.Option(64),
        batch_size: int = typer.Option(16),
        mode: str = typer.Option("dft"),
        seed: int = typer.Option(0),
    ) -> None:
        """Train K shadow models for LiRA and RMIA (use the target's own fine-tuning settings)."""
        from lmaudit.data.loaders import load_texts
        from lmaudit.shadows import train_shadows

        path = train_shadows(base, load_texts(pool), out, k=k, seed=seed, epochs=epochs, lr=lr, block=block,
                             batch_size=batch_size, mode=mode)
        stdout_console.print(f"shadows: {path}")
