"""``lmaudit run`` (experiments), ``lmaudit tables`` (rebuild an experiment's tables), ``lmaudit report``,
``lmaudit claims`` and ``lmaudit reproduce`` (committed experiments re-run and compared)."""

from __future__ import annotations

import importlib
import time
from pathlib import Path
from typing import Optional

import typer

from lmaudit import api
from lmaudit.api.reports import build_claims, write_report
from lmaudit.api.tools import atomic_path, deferred
from lmaudit.commands import common as c
from lmaudit.commands.running import RunOptions, backend_from, check_out, finish, shared_options
from lmaudit.errors import LmauditError
from lmaudit.progress import stdout_console

# the experiments (they train models) are imported when a command runs: the command line's help stays light
run_demo = deferred("lmaudit.experiments.demo", "run_demo")
compare_demo = deferred("lmaudit.experiments.demo_values", "compare_demo")
record_demo_values = deferred("lmaudit.experiments.demo_values", "record_demo")
rebuild_outputs = deferred("lmaudit.experiments.outputs", "rebuild_outputs")
load_experiment = deferred("lmaudit.experiments.registry", "load_experiment")
compare_folders = deferred("lmaudit.experiments.reproduce", "compare_folders")
reproduce = deferred("lmaudit.experiments.reproduce", "reproduce")
write_comparison = deferred("lmaudit.experiments.reproduce", "write_comparison")
run_experiment = deferred("lmaudit.experiments.runner", "run_experiment")


def _quick(module: str):
    """The quick subset a module states (``QUICK``): the re-runs of reproduce, the quick demo's settings."""
    return importlib.import_module(module).QUICK

app = typer.Typer(add_completion=False)


@app.command("run", rich_help_panel=c.PANEL_RESULTS)
@shared_options(run=True, model=False)
def run_cmd(
    config: Optional[Path] = c.config_option(),
    experiment: Path = typer.Argument(..., help="Experiment file (TOML), e.g. experiments/dlm-dft.toml."),
    out: Path = typer.Option(Path("results"), help="Results root; the experiment writes OUT/NAME/."),
    run_options: RunOptions = None,
) -> None:
    """Run an experiment file and write its results, table and plots."""
    if out.exists() and not out.is_dir():
        raise LmauditError(f"--out '{out}' is an existing file", hint="name the folder that holds experiment folders")
    cfg = load_experiment(experiment)
    # OUT holds other experiments: only OUT/NAME is replaced
    check_out(out / cfg.name, "the experiment's folder", kind="experiment", inputs={"the experiment file": experiment})
    with backend_from(run_options.backend, run_options.address, run_options.workers) as backend:
        with api.on_backend(backend):  # the experiment's jobs run on the current backend: the one chosen here
            folder = run_experiment(cfg, out_root=out, command=f"lmaudit run {experiment}",
                                    report=not run_options.no_report)
    stdout_console.print((folder / "table.md").read_text())
    finish(folder / "results.json", folder, run_options.no_report, run_options.mlflow)


@app.command("tables", rich_help_panel=c.PANEL_RESULTS)
def tables_cmd(
    config: Optional[Path] = c.config_option(),
    run_dirs: list[Path] = typer.Argument(..., help="Experiment folders written by 'lmaudit run', e.g. "
                                                    "results/dlm-dft."),
    no_report: bool = typer.Option(False, "--no-report", help="Do not write report.html / report.md."),
) -> None:
    """Rebuild experiment folders' tables, figures and table.md from their results.json, without re-running."""
    for folder in run_dirs:
        rebuild_outputs(folder, report=not no_report)
        stdout_console.print(f"rebuilt: {folder / 'table.md'}")
        if not no_report:
            stdout_console.print(f"report: {folder / 'report.html'}")


@app.command(rich_help_panel=c.PANEL_RESULTS)
def report(
    config: Optional[Path] = c.config_option(),
    run_dir: Path = typer.Argument(..., help="A folder written by mia, demo, run, audit-set, extract or pii."),
    show_pii: bool = typer.Option(False, "--show-pii", help="Show e-mail addresses and phone numbers in the previews "
                                  "of the most exposed records (masked by default)."),
) -> None:
    """Write RUN_DIR/report.html (self-contained, plots embedded) and RUN_DIR/report.md."""
    t0 = time.perf_counter()
    path = write_report(run_dir, show_pii=show_pii)
    stdout_console.print(f"report: {path}  ({time.perf_counter() - t0:.1f} s)")


@app.command("claims", rich_help_panel=c.PANEL_RESULTS)
def claims_cmd(
    config: Optional[Path] = c.config_option(),
    root: Path = typer.Argument(Path("results"), help="The folder of experiment folders (each with results.json)."),
    out: Optional[Path] = typer.Option(None, help="Where to write the table (default ROOT/CLAIMS.md)."),
) -> None:
    """Write CLAIMS.md: each claim of the four papers, the paper's figure, ours with its interval, the verdict."""
    if not root.is_dir():
        raise LmauditError(f"'{root}' is not a folder", hint="name the folder that holds the experiments' folders")
    target = out or root / "CLAIMS.md"
    text = build_claims(root, command="lmaudit claims" + ("" if root == Path("results") else f" {root}"))
    if target.is_dir() or (target.exists() and _first_line(target) != text.split("\n", 1)[0]):
        raise LmauditError(f"--out '{target}' is {'a folder' if target.is_dir() else 'a file lmaudit did not write'}; "
                           "claims replaces only a table it wrote", hint="name a new file, or an earlier CLAIMS.md")
    with atomic_path(target) as tmp:
        tmp.write_text(text + "\n")
    stdout_console.print(f"claims: {target}")


def _first_line(path: Path) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.readline().rstrip("\n")
    except OSError:
        return ""


@app.command("reproduce", rich_help_panel=c.PANEL_RESULTS)
def reproduce_cmd(
    config: Optional[Path] = c.config_option(),
    names: Optional[list[str]] = typer.Argument(None, help="Committed experiments to re-run (default: the quick "
                                                            "subset docs/how-to/reproduce.md names, under an hour on "
                                                            "2 cores)."),
    results: Path = typer.Option(Path("results"), help="The committed experiment folders to compare with."),
    scratch: Path = typer.Option(Path("runs/reproduce"), help="Where the re-runs are written (NAME/ each)."),
    demo: bool = typer.Option(True, "--demo/--no-demo", help="Also run 'demo --quick' and compare it with "
                                                              "RESULTS/demo-quick.json."),
    compare_only: bool = typer.Option(False, "--compare-only", help="Compare SCRATCH with RESULTS without "
                                                                    "running anything."),
    record_demo: bool = typer.Option(False, "--record-demo", help="Write RESULTS/demo-quick.json instead: the "
                                                                 "quick demo on seeds 0, 1, 2 (about 10 minutes)."),
) -> None:
    """Re-run committed experiments into a scratch folder and compare: verdicts, headline figures against the seed
    spread, corpus. Exit 0 when every one agrees, 1 when one does not."""
    if record_demo:
        written = record_demo_values(results / "demo-quick.json", scratch=scratch / "demo")
        stdout_console.print(f"demo values: {written}")
        return
    chosen = tuple(names) if names else _quick("lmaudit.experiments.reproduce")
    for folder in [scratch / n for n in chosen] + ([scratch / "demo"] if demo else []):
        check_out(folder, "the re-run's folder", kind="demo" if folder.name == "demo" else "experiment")
    if compare_only:
        found = compare_folders(results, scratch, chosen)
    else:
        found = reproduce(chosen, results=results, scratch=scratch,
                          run=lambda cfg, root: run_experiment(cfg, out_root=root, report=False,
                                                               command=f"lmaudit reproduce {cfg.name}"))
    if demo:
        if not compare_only:
            run_demo(scratch / "demo", _quick("lmaudit.experiments.demo"))
        found.append(compare_demo(scratch / "demo", results / "demo-quick.json"))
    write_comparison(found, scratch / "reproduce.json")
    for comparison in found:
        for line in comparison.lines():
            stdout_console.print(line, markup=False, soft_wrap=True)
    agree = sum(x.agrees for x in found)
    stdout_console.print(f"{agree} of {len(found)} agree; details: {scratch / 'reproduce.json'}")
    if agree < len(found):
        raise typer.Exit(1)
