"""What every command shares: ``--config``, the model and data options, tables on the terminal.

Light (no torch): ``lmaudit attacks`` and the command line's start-up import it. The model-loading and backend
options, and the output-folder checks, are in :mod:`lmaudit.commands.running`."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.measure import Measurement
from rich.table import Table

from lmaudit.api.tools import read_toml
from lmaudit.errors import LmauditError
from lmaudit.progress import stdout_console
from lmaudit.settings import seed_value

PANEL_AUDIT = "Audit a model"
PANEL_MODELS = "Train and change models"
PANEL_RESULTS = "Experiments and reports"
PANEL_DATA = "Data"


def _load_config(ctx: typer.Context, param, value: Optional[Path]):
    """``--config FILE.toml``: the file's keys become the command's defaults; the command line overrides them."""
    if value is None:
        return value
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


def model_option(help: str = "Local model folder (AR or DLM)."):
    return typer.Option(None, "--model", help=help + " A .gguf file, a folder holding one, a named model "
                                                     "(smollm2-135m: lmaudit models list), or a served model's URL "
                                                     "(http://127.0.0.1:8080/v1, with --tokenizer) works too. "
                                                     "[required]")


def alias_option(name: str):
    """An older spelling of ``--model`` (e.g. ``--target``), kept so that scripts and configs still run."""
    return typer.Option(None, name, hidden=True)


def source_arg(path: Optional[Path]):
    """A model option as given: a served model's URL comes back as the URL (a path option folds its '//')."""
    text = None if path is None else str(path)
    if text and re.match(r"https?:/[^/]", text):
        return text.replace(":/", "://", 1)
    return path


def pick_model(model: Optional[Path], alias: Optional[Path], alias_name: str) -> Path:
    """``--model``, or its older spelling; exactly one of them (a served model's URL as given)."""
    model, alias = source_arg(model), source_arg(alias)
    if model is not None and alias is not None and model != alias:
        raise LmauditError(f"--model and {alias_name} name different folders", hint="give --model only")
    chosen = model if model is not None else alias
    if chosen is None:
        raise LmauditError("missing option --model", hint="pass the folder of the model to use")
    return chosen


def parse_params(items: list[str]) -> dict[str, dict]:
    """``NAME.KEY=VALUE`` options → {NAME: {KEY: value}} (values parsed as JSON when possible)."""
    out: dict[str, dict] = {}
    for item in items:
        try:
            lhs, value = item.split("=", 1)
            name, key = lhs.split(".", 1)
        except ValueError:
            raise LmauditError(f"--param '{item}' is not of the form ATTACK.KEY=VALUE",
                               hint="e.g. --param gap_k.k=0.1") from None
        try:
            parsed = json.loads(value)
        except json.JSONDecodeError:
            parsed = value
        out.setdefault(name, {})[key] = parsed
    return out


def _checked_seed(value: int) -> int:
    seed_value()(value, "seed", "--seed")  # the check every config's seed declares: refused before any work
    return value


def seed_option(help: str | None = None):
    """``--seed``, a 32-bit seed (:func:`lmaudit.settings.seed_value`), checked as the command line is read."""
    return typer.Option(0, help=help, callback=_checked_seed)


def text_field_option():
    return typer.Option("text", help="The text field/column of every data option (e.g. 'input' for WikiMIA).")


def allow_overlap_option():
    return typer.Option(False, "--allow-overlap",
                        help="Run although the sets share more than 5% of their texts (compared as a reader sees "
                             "them: Unicode NFC, invisible characters dropped, look-alike letters as one, whitespace "
                             "collapsed); the overlap is counted in results.json and the verdict.")


def chat_template_option():
    return typer.Option(None, "--chat-template/--no-chat-template",
                        help="Prompt/response pairs in the model tokenizer's chat template (default: when it has one; "
                             "the prompt is never scored or trained either way).")


def split_option():
    return typer.Option(None, help="The split to read from a datasets folder with several (DatasetDict).")


def split_names(value: Optional[str]) -> Optional[list[str]]:
    """A comma-separated option as a list (None when not given)."""
    return [a.strip() for a in value.split(",") if a.strip()] if value else None


LOG_WIDTH = 10_000  # the widest a table printed to a log (not a terminal) may be laid out


def print_table(table: Table) -> None:
    """Print a result table on stdout, never cutting a cell: on a terminal, a cell that does not fit folds onto the
    next line; to a log, a pipe or a file (not a terminal), the table is as wide as its content needs, not wrapped
    at 80 columns."""
    for column in table.columns:
        column.overflow = "fold"  # not "ellipsis": an interval cut to "[-0.35…" reads as another number
    if stdout_console.is_terminal:
        stdout_console.print(table)
        return
    wide = Console(file=stdout_console.file, width=LOG_WIDTH, highlight=False, no_color=True)
    width = Measurement.get(wide, wide.options, table).maximum
    Console(file=stdout_console.file, width=max(80, width), highlight=False, no_color=True).print(table)


def rich_table(title: str, header: list[str], rows: list[list[str]]) -> Table:
    """A rich table: first column left-aligned, the others right-aligned."""
    table = Table(title=title)
    for i, col in enumerate(header):
        table.add_column(col, justify="left" if i == 0 else "right")
    for row in rows:
        table.add_row(*row)
    return table
