"""What every command shares: ``--config``, model-loading options, backend options, output helpers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer
from rich.table import Table

from lmaudit.errors import LmauditError
from lmaudit.utils import read_toml

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
    return typer.Option(None, "--model", help=help + " [required]")


def alias_option(name: str):
    """An older spelling of ``--model`` (e.g. ``--target``), kept so that scripts and configs still run."""
    return typer.Option(None, name, hidden=True)


def pick_model(model: Optional[Path], alias: Optional[Path], alias_name: str) -> Path:
    """``--model``, or its older spelling; exactly one of them."""
    if model is not None and alias is not None and model != alias:
        raise LmauditError(f"--model and {alias_name} name different folders", hint="give --model only")
    chosen = model if model is not None else alias
    if chosen is None:
        raise LmauditError("missing option --model", hint="pass the folder of the model to use")
    return chosen


def kind_option():
    return typer.Option(None, help="ar or dlm (default: detected from the saved config).")


def trust_remote_code_option():
    return typer.Option(False, help="Allow modeling code shipped with the checkpoint (only files in the folder).")


def allow_pickle_option():
    return typer.Option(False, help="Allow pickle (.bin) weights.")


def mask_token_id_option():
    return typer.Option(None, help="DLM: id of the mask token (default: config/tokenizer).")


def shift_logits_option():
    return typer.Option(None, "--shift-logits/--no-shift-logits", help="DLM: Dream-style shifted logits (default: detected).")


def load_options(*, kind, trust_remote_code, allow_pickle, mask_token_id, shift_logits, backend: str = "local") -> dict:
    """Keyword arguments of :func:`lmaudit.models.loading.load_model` from the shared options."""
    return dict(kind=kind, trust_remote_code=trust_remote_code, allow_pickle=allow_pickle, mask_token_id=mask_token_id,
                shift_logits=shift_logits, device=driver_device(backend))


def backend_option():
    return typer.Option("local", help="Where probes run: local (this process) or ray (Ray actors, one model copy "
                                      "each; needs pip install 'lmaudit[ray]'). Results are identical.")


def address_option():
    return typer.Option(None, help="--backend ray: address of a running Ray cluster (default: start a local one).")


def workers_option():
    return typer.Option(None, help="--backend ray: number of actors (default: one per GPU, else one per CPU).")


def no_report_option():
    return typer.Option(False, "--no-report", help="Do not write report.html / report.md.")


def driver_device(backend: str) -> Optional[str]:
    """Where this process keeps a model: on the CPU when Ray workers hold the copies that compute."""
    return "cpu" if backend == "ray" else None


def parse_params(items: list[str]) -> dict[str, dict]:
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


def split_names(value: Optional[str]) -> Optional[list[str]]:
    """A comma-separated option as a list (None when not given)."""
    return [a.strip() for a in value.split(",") if a.strip()] if value else None


def rich_table(title: str, header: list[str], rows: list[list[str]]) -> Table:
    """A rich table: first column left-aligned, the others right-aligned."""
    table = Table(title=title)
    for i, col in enumerate(header):
        table.add_column(col, justify="left" if i == 0 else "right")
    for row in rows:
        table.add_row(*row)
    return table
