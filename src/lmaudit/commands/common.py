"""What every command shares: ``--config``, model-loading options, backend options, output helpers."""

from __future__ import annotations

import functools
import inspect
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.measure import Measurement
from rich.table import Table

from lmaudit.errors import LmauditError
from lmaudit.folders import check_replaceable, with_cache
from lmaudit.models.sources import DTYPE_NAMES, model_folders
from lmaudit.progress import stdout_console
from lmaudit.settings import check_settings, one_of, seed_value, setting
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
    return typer.Option(None, "--model", help=help + " A .gguf file, a folder holding one, or a named model "
                                                     "(smollm2-135m: lmaudit models list) works too. [required]")


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


@dataclass
class ModelOptions:
    """How to load the model(s) a command uses: the same options on every command that loads one."""

    kind: Optional[str] = None
    trust_remote_code: bool = False
    allow_pickle: bool = False
    mask_token_id: Optional[int] = None
    shift_logits: Optional[bool] = None
    dtype: str = setting("auto", check=one_of(DTYPE_NAMES))
    device: str = "auto"
    adapter_base: Optional[Path] = None

    def __post_init__(self) -> None:
        """Checked before any work (the device is checked when the model loads)."""
        check_settings(self)

    def load_kwargs(self, backend: str = "local", **overrides) -> dict:
        """Keyword arguments of :func:`lmaudit.models.loading.load_model` (``overrides`` win)."""
        return {**asdict(self), "device": driver_device(backend) or self.device, **overrides}

    def training_kwargs(self) -> dict:
        """The load options a training command passes on (only those the user set; the kind travels apart)."""
        return {k: v for k, v in asdict(self).items() if k != "kind" and v not in (None, False, "auto")}


@dataclass
class RunOptions:
    """Where shard work runs and whether a report is written."""

    no_report: bool = False
    backend: str = "local"
    address: Optional[str] = None
    workers: Optional[int] = None


_MODEL_PARAMS = [
    ("kind", Optional[str], typer.Option(None, help="ar or dlm (default: detected from the saved config).")),
    ("trust_remote_code", bool,
     typer.Option(False, help="Allow modeling code shipped with the checkpoint (only files in the folder).")),
    ("allow_pickle", bool, typer.Option(False, help="Allow pickle (.bin) weights.")),
    ("mask_token_id", Optional[int], typer.Option(None, help="DLM: id of the mask token (default: config/tokenizer).")),
    ("shift_logits", Optional[bool], typer.Option(None, "--shift-logits/--no-shift-logits",
                                                  help="DLM: Dream-style shifted logits (default: detected).")),
    ("dtype", str, typer.Option("auto", help="Weights' precision: auto (the checkpoint's on a GPU, float32 on a CPU), "
                                            "float32, bfloat16 or float16 (GPU only). Probe statistics are float32.")),
    ("device", str, typer.Option("auto", help="cpu, cuda, cuda:N or auto (a GPU when there is one).")),
    ("adapter_base", Optional[Path], typer.Option(None, help="A model folder that is a PEFT/LoRA adapter is applied to "
                                                             "this base model folder (default: the local folder its "
                                                             "adapter_config.json names).")),
]
_RUN_PARAMS = [
    ("no_report", bool, typer.Option(False, "--no-report", help="Do not write report.html / report.md.")),
    ("backend", str, typer.Option("local", help="Where probes run: local (this process) or ray (Ray actors, one model "
                                                "copy each; needs pip install 'lmaudit\\[ray]'). Results are identical.")),
    ("address", Optional[str],
     typer.Option(None, help="--backend ray: address of a running Ray cluster (default: start a local one).")),
    ("workers", Optional[int],
     typer.Option(None, help="--backend ray: number of actors (default: one per GPU, else one per CPU).")),
]


def shared_options(*, run: bool = False, model: bool = True, extra: tuple = ()):
    """Decorator adding the shared option sets to a command.

    The command declares ``model_options: ModelOptions`` (with ``model=True``) and
    ``run_options: RunOptions`` (with ``run=True``) as its last parameters; the
    command line shows their fields as ordinary options (``--trust-remote-code``,
    ``--backend``, ...) and the command receives them gathered in those objects.
    ``extra`` adds more groups, each ``(argument name, dataclass, [(field, annotation,
    typer.Option)])`` (e.g. the training commands' LoRA and DP options).
    """
    groups = ([("model_options", ModelOptions, _MODEL_PARAMS)] if model else []) + \
        ([("run_options", RunOptions, _RUN_PARAMS)] if run else []) + list(extra)

    def decorate(fn):
        sig = inspect.signature(fn)
        own = [p for p in sig.parameters.values() if p.name not in {g[0] for g in groups}]
        extra = [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation)
                 for _, _, params in groups for name, annotation, default in params]

        @functools.wraps(fn)
        def command(**kwargs):
            for arg, cls, params in groups:
                kwargs[arg] = cls(**{name: kwargs.pop(name) for name, _, _ in params})
            return fn(**kwargs)

        command.__signature__ = sig.replace(parameters=own + extra)
        return command

    return decorate


def check_out(out: Path, what: str = "--out", *, kind: str | None = None, inputs: dict | None = None) -> Path:
    """An output folder must be new, empty or one lmaudit wrote as ``kind`` (it is replaced whole), and none of the
    command's ``inputs`` ({option: path or paths}) or the cache: said before any work."""
    return check_replaceable(out, what, kind=kind, inputs=with_cache(inputs))


def model_inputs(option: str, path: Optional[Path], options: Optional["ModelOptions"] = None) -> dict:
    """{option: the folders loading ``path`` reads} (an adapter's bases included), for :func:`check_out`."""
    if path is None:
        return {}
    return {option: model_folders(path, options.adapter_base if options else None)}


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
