"""The ``lmaudit`` command line.

Errors a user can fix are printed as one line (cause and hint) with a non-zero
exit code; ``--debug`` shows the traceback instead. ``--quiet`` silences progress.
"""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path
from typing import Optional

import typer

from lmaudit.commands import address_option, backend_from, backend_option, driver_device, workers_option
from lmaudit.errors import LmauditError
from lmaudit.progress import console, info, set_quiet, stdout_console

app = typer.Typer(add_completion=False, no_args_is_help=True, help="Audit what language models remember of their training data.")
corpus_app = typer.Typer(no_args_is_help=True, help="The embedded corpus (docstrings of installed packages).")
app.add_typer(corpus_app, name="corpus")
_state = {"debug": False}


@app.callback()
def _global(
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bars or informational output."),
    debug: bool = typer.Option(False, "--debug", help="Show tracebacks on errors."),
) -> None:
    set_quiet(quiet)
    _state["debug"] = debug


def _load_config(ctx: typer.Context, param, value: Optional[Path]):
    """``--config FILE.toml``: the file's keys become the command's defaults; the command line overrides them."""
    if value is None:
        return value
    from lmaudit.utils import read_toml

    data = read_toml(value, "config file")
    params = {p.name: p for p in ctx.command.params if p.name != "config"}
    defaults = {}
    for key, val in data.items():
        name = key.replace("-", "_")
        if name not in params:
            raise LmauditError(f"{value}: unknown key '{key}' for 'lmaudit {ctx.info_name}'",
                               hint=f"known keys: {', '.join(sorted(params))}")
        if isinstance(val, list) and not params[name].multiple:
            val = ",".join(map(str, val))  # e.g. attacks = ["loss", "gap_k"]
        defaults[name] = val
    ctx.default_map = {**(ctx.default_map or {}), **defaults}
    return value


def config_option():
    return typer.Option(None, "--config", is_eager=True, callback=_load_config,
                        help="TOML file with the same keys as the options; the command line overrides it.")


def _parse_params(items: list[str]) -> dict[str, dict]:
    """``NAME.KEY=VALUE`` options → {NAME: {KEY: value}} (values parsed as JSON when possible)."""
    out: dict[str, dict] = {}
    for item in items:
        try:
            lhs, value = item.split("=", 1)
            name, key = lhs.split(".", 1)
        except ValueError:
            raise LmauditError(f"--param '{item}' is not of the form ATTACK.KEY=VALUE", hint="e.g. --param gap_k.k=0.1") from None
        try:
            parsed = json.loads(value)
        except json.JSONDecodeError:
            parsed = value
        out.setdefault(name, {})[key] = parsed
    return out


@corpus_app.command("build")
def corpus_build(
    config: Optional[Path] = config_option(),
    packages: str = typer.Option("numpy,scipy,torch,transformers", help="Comma-separated packages (names or folders)."),
    force: bool = typer.Option(False, help="Rebuild even if cached."),
) -> None:
    """Extract, clean and cache the docstring corpus; print its manifest."""
    from lmaudit.data.corpus import build_corpus

    corpus = build_corpus(tuple(p for p in packages.split(",") if p), force=force)
    stdout_console.print_json(data=corpus.manifest)


@app.command()
def pretrain(
    config: Optional[Path] = config_option(),
    out: Path = typer.Option(..., help="Folder to save the model to."),
    kind: str = typer.Option("ar", help="Model kind: ar (causal) or dlm (masked diffusion)."),
    preset: str = typer.Option("tiny", help="Model size: tiny or small."),
    tokens: Optional[int] = typer.Option(None, help="Training tokens (default: the preset's)."),
    seed: int = typer.Option(0),
    init_from: Optional[Path] = typer.Option(None, help="DLM: adapt this AR model folder instead of starting from scratch."),
) -> None:
    """Pretrain a tiny model on the embedded corpus' pretraining pool."""
    from lmaudit.data.corpus import build_corpus
    from lmaudit.models.build import corpus_tokenizer
    from lmaudit.models.build import pretrain as do_pretrain

    corpus = build_corpus()
    do_pretrain(corpus, corpus_tokenizer(corpus), out, kind=kind, preset=preset, tokens=tokens, seed=seed,
                init_from=init_from)
    info(f"saved to {out}")


@app.command()
def finetune(
    config: Optional[Path] = config_option(),
    base: Path = typer.Option(..., help="Model folder to start from."),
    data: Path = typer.Option(..., help="JSONL/CSV/folder: 'text' (dft) or 'prompt'+'response' (ift)."),
    out: Path = typer.Option(..., help="Folder to save the fine-tuned model to."),
    mode: str = typer.Option("dft", help="dft: packed fixed-length blocks; ift: loss on responses only."),
    epochs: float = typer.Option(4.0),
    lr: float = typer.Option(1e-3),
    block: int = typer.Option(64, help="DFT block length in tokens."),
    batch_size: int = typer.Option(16),
    seed: int = typer.Option(0),
    kind: Optional[str] = typer.Option(None, help="ar or dlm (default: from the saved config)."),
    mask_ratio: Optional[float] = typer.Option(None, help="DLM only: train with this fixed mask ratio."),
) -> None:
    """Fine-tune a model on your data (domain or instruction fine-tuning)."""
    from lmaudit.data.loaders import load_texts
    from lmaudit.models.build import finetune as do_finetune

    do_finetune(base, load_texts(data), out, mode=mode, epochs=epochs, lr=lr, block=block, batch_size=batch_size,
                seed=seed, kind=kind, mask_ratio=mask_ratio)
    info(f"saved to {out}")


@app.command()
def mia(
    config: Optional[Path] = config_option(),
    target: Path = typer.Option(..., help="Local model folder to audit."),
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
    trust_remote_code: bool = typer.Option(False, help="Allow modeling code shipped with the checkpoint."),
    allow_pickle: bool = typer.Option(False, help="Allow pickle (.bin) weights."),
    kind: Optional[str] = typer.Option(None, help="ar or dlm (default: detected from the saved config)."),
    budget: int = typer.Option(16, help="DLM: masked forwards per model per sample, for every attack."),
    mask_token_id: Optional[int] = typer.Option(None, help="DLM: id of the mask token (default: config/tokenizer)."),
    shift_logits: Optional[bool] = typer.Option(None, "--shift-logits/--no-shift-logits",
                                                help="DLM: Dream-style shifted logits (default: detected)."),
    shadows: Optional[Path] = typer.Option(None, help="Folder from 'lmaudit shadows' (enables lira and rmia)."),
    no_report: bool = typer.Option(False, "--no-report", help="Do not write report.html / report.md."),
    backend: str = backend_option(),
    address: Optional[str] = address_option(),
    workers: Optional[int] = workers_option(),
) -> None:
    """Membership inference: members vs non-members, every attack, AUC and TPR@FPR."""
    from lmaudit.data.loaders import load_texts
    from lmaudit.mia import RunConfig, results_table, run_mia
    from lmaudit.models.loading import load_model

    mem, non = load_texts(members), load_texts(nonmembers)
    names = [a.strip() for a in attacks.split(",") if a.strip()] if attacks else None
    cfg = RunConfig(attacks=names, params=_parse_params(param), seed=seed, batch_size=batch_size,
                    n_bootstrap=bootstrap, use_cache=not no_cache, budget=budget)
    opts = dict(trust_remote_code=trust_remote_code, allow_pickle=allow_pickle, mask_token_id=mask_token_id,
                shift_logits=shift_logits, device=driver_device(backend))
    tgt = load_model(target, kind=kind, **opts)
    ref = load_model(reference, kind=tgt.kind, **opts) if reference else None
    shadow_set = None
    if shadows is not None:
        from lmaudit.shadows import ShadowSet

        shadow_set = ShadowSet.load(shadows)
    with backend_from(backend, address, workers):
        result = run_mia(tgt, mem, non, reference=ref, config=cfg, shadows=shadow_set)
    path = result.write(out)
    stdout_console.print(results_table(result))
    stdout_console.print(f"results: {path}")
    _maybe_report(out, no_report)


@app.command("attacks")
def attacks_cmd(
    config: Optional[Path] = config_option(),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
    kind: Optional[str] = typer.Option(None, help="Only attacks for ar or dlm models."),
) -> None:
    """List registered attacks: kind, reference need, direction, default parameters."""
    from rich.table import Table

    from lmaudit.attacks import list_attacks

    specs = [s.describe() for s in list_attacks(kind)]
    if as_json:
        sys.stdout.write(json.dumps(specs, indent=2) + "\n")
        return
    table = Table(title="Registered attacks (higher score = more likely a member)")
    for col in ("name", "kind", "reference", "parameters", "summary"):
        table.add_column(col)
    for s in specs:
        params = ", ".join(f"{k}={v}" for k, v in s["params"].items()) or "-"
        table.add_row(s["name"], s["kind"], "yes" if s["needs_reference"] else "no", params, s["summary"])
    stdout_console.print(table)


@app.command()
def demo(
    config: Optional[Path] = config_option(),
    quick: bool = typer.Option(False, "--quick", help="A smaller, faster version of the same pipeline."),
    out: Path = typer.Option(Path("runs/demo"), help="Output folder."),
    no_report: bool = typer.Option(False, "--no-report", help="Do not write report.html / report.md."),
) -> None:
    """Run the whole pipeline on the embedded default (corpus, tiny models, every AR attack)."""
    from lmaudit.demo import FULL, QUICK, run_demo
    from lmaudit.mia import results_table

    result, dlm_result = run_demo(out, QUICK if quick else FULL)
    stdout_console.print(results_table(result))
    stdout_console.print(results_table(dlm_result))
    stdout_console.print(f"results: {out / 'results.json'}  (total {result.timings_s['demo_total']:.0f} s)")
    _maybe_report(out, no_report)


@app.command("run")
def run_cmd(
    config: Optional[Path] = config_option(),
    experiment: Path = typer.Argument(..., help="Experiment file (TOML), e.g. experiments/dlm-dft.toml."),
    out: Path = typer.Option(Path("results"), help="Results root; the experiment writes OUT/NAME/."),
    no_report: bool = typer.Option(False, "--no-report", help="Do not write report.html / report.md."),
    backend: str = backend_option(),
    address: Optional[str] = address_option(),
    workers: Optional[int] = workers_option(),
) -> None:
    """Run an experiment file and write its results, table and plots."""
    from lmaudit.experiments import load_experiment, run_experiment

    cfg = load_experiment(experiment)
    with backend_from(backend, address, workers):
        folder = run_experiment(cfg, out_root=out, command=f"lmaudit run {experiment}")
    stdout_console.print((folder / "table.md").read_text())
    stdout_console.print(f"results: {folder}")
    _maybe_report(folder, no_report)


@app.command()
def report(
    config: Optional[Path] = config_option(),run_dir: Path = typer.Argument(..., help="A folder written by mia, demo or run.")) -> None:
    """Write RUN_DIR/report.html (self-contained, plots embedded) and RUN_DIR/report.md."""
    import time

    from lmaudit.report.build import write_report

    t0 = time.perf_counter()
    path = write_report(run_dir)
    stdout_console.print(f"report: {path}  ({time.perf_counter() - t0:.1f} s)")


from lmaudit.commands import audit as _audit  # noqa: E402
from lmaudit.commands import extraction as _extraction  # noqa: E402
from lmaudit.commands import pii as _pii  # noqa: E402

_extraction.register(app, corpus_app, config_option)
_audit.register(app, config_option)
_pii.register(app, config_option)


def _maybe_report(folder: Path, no_report: bool) -> None:
    if no_report:
        return
    from lmaudit.report.build import write_report

    stdout_console.print(f"report: {write_report(folder)}")


def _format_warning(message, category, filename, lineno, line=None) -> str:
    return f"warning: {message}\n"


def main() -> None:
    warnings.formatwarning = _format_warning
    try:
        app(standalone_mode=True)
    except LmauditError as exc:
        if _state["debug"]:
            raise
        console.print(f"[bold red]error:[/bold red] {exc}", markup=True, highlight=False, soft_wrap=True)
        sys.exit(2)
    except KeyboardInterrupt:
        console.print("interrupted")
        sys.exit(130)
    except Exception as exc:  # an unexpected failure: still one line unless --debug
        if _state["debug"]:
            raise
        console.print(f"[bold red]error:[/bold red] {type(exc).__name__}: {exc} (run with --debug for the traceback)",
                      soft_wrap=True)
        sys.exit(1)


if __name__ == "__main__":
    main()
