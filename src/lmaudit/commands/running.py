"""Helpers of the commands that load models, run jobs and write results: the model-loading and backend options,
the output-folder checks (kept apart from :mod:`lmaudit.commands.common` so that light commands stay light)."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Optional

import typer

from lmaudit import api
from lmaudit.api import tools
from lmaudit.errors import LmauditError
from lmaudit.progress import stdout_console
from lmaudit.settings import boolean, check_settings, integer, location, one_of, setting, text


@dataclass
class ModelOptions:
    """How to load the model(s) a command uses: the same options on every command that loads one."""

    # the types alone where the meaning is checked by the source that reads it (the kind, the device, the paths)
    kind: Optional[str] = setting(None, check=text(optional=True))
    trust_remote_code: bool = setting(False, check=boolean())
    allow_pickle: bool = setting(False, check=boolean())
    mask_token_id: Optional[int] = setting(None, check=integer(0, optional=True))
    shift_logits: Optional[bool] = setting(None, check=boolean(optional=True))
    dtype: str = setting("auto", check=one_of(tools.DTYPE_NAMES))
    device: str = setting("auto", check=text())
    adapter_base: Optional[Path] = setting(None, check=location(optional=True))
    tokenizer: Optional[Path] = setting(None, check=location(optional=True))
    served_model: Optional[str] = setting(None, check=text(optional=True))
    top_k: Optional[int] = setting(None, check=integer(1, optional=True))
    concurrency: Optional[int] = setting(None, check=integer(1, optional=True))

    def __post_init__(self) -> None:
        """Checked before any work (the device is checked when the model loads)."""
        check_settings(self)

    def load_kwargs(self, backend: str = "local", **overrides) -> dict:
        """Keyword arguments of :func:`lmaudit.api.load_model` (``overrides`` win)."""
        return {**asdict(self), "device": driver_device(backend) or self.device, **overrides}

    def training_kwargs(self) -> dict:
        """The load options a training command passes on (only those the user set; the kind travels apart)."""
        return {k: v for k, v in asdict(self).items() if k != "kind" and v not in (None, False, "auto")}


@dataclass
class RunOptions:
    """Where shard work runs and whether a report is written."""

    no_report: bool = setting(False, check=boolean())
    backend: str = setting("local", check=text())  # its name, checked when the backend is made
    address: Optional[str] = setting(None, check=text(optional=True))
    workers: Optional[int] = setting(None, check=integer(1, optional=True))
    mlflow: Optional[str] = setting(None, check=text(optional=True))
    mlflow_experiment: str = setting("lmaudit", check=text())
    mlflow_run_name: Optional[str] = setting(None, check=text(optional=True))

    def __post_init__(self) -> None:
        """``--mlflow``: a URI MLflow could not write to is refused here, before any model loads; the URI then
        carries the experiment and run name to :func:`finish`."""
        check_settings(self)
        if self.mlflow:
            uri = api.check_tracking_uri(self.mlflow)
            self.mlflow = MLflowTarget(uri, self.mlflow_experiment, self.mlflow_run_name)


class MLflowTarget(str):
    """A tracking URI (the string itself) with the experiment and run name a results folder is logged under."""

    def __new__(cls, uri: str, experiment: str = "lmaudit", run_name: Optional[str] = None) -> "MLflowTarget":
        target = super().__new__(cls, uri)
        target.experiment, target.run_name = experiment, run_name
        return target


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
    ("tokenizer", Optional[Path], typer.Option(None, help="A served model (--model URL): the folder, GGUF file or "
                                                          "name of a local copy of its tokenizer.")),
    ("served_model", Optional[str], typer.Option(None, help="A served model: its name where the endpoint serves "
                                                            "several.")),
    ("top_k", Optional[int], typer.Option(None, help="A served model: top log-probabilities asked per position "
                                                     "(default 20; Min-K%++ and Gap-K% read them, approximately).")),
    ("concurrency", Optional[int], typer.Option(None, help="A served model: requests in flight at once (default 4).")),
]
_RUN_PARAMS = [
    ("no_report", bool, typer.Option(False, "--no-report", help="Do not write report.html / report.md.")),
    ("backend", str, typer.Option("local", help="Where probes run: local (this process) or ray (Ray actors, one "
                                                "model copy each; needs pip install 'lmaudit\\[ray]'). Results are "
                                                "identical.")),
    ("address", Optional[str],
     typer.Option(None, help="--backend ray: address of a running Ray cluster (default: start a local one).")),
    ("workers", Optional[int],
     typer.Option(None, help="--backend ray: number of actors (default: one per GPU, else one per CPU).")),
    ("mlflow", Optional[str], typer.Option(None, metavar="URI", help="Also log the run to MLflow at this tracking URI "
                                                                   "(what was audited, settings, figures with their "
                                                                   "intervals, the folder and report; checked before "
                                                                   "any work; pip install 'lmaudit\\[mlflow]').")),
    ("mlflow_experiment", str, typer.Option("lmaudit", metavar="NAME", help="--mlflow: the MLflow experiment of the "
                                                                           "run (when no run is active).")),
    ("mlflow_run_name", Optional[str], typer.Option(None, metavar="NAME", help="--mlflow: the MLflow run's name "
                                                                              "(default: the output folder's).")),
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


def check_out(out: Path, what: str = "--out", *, job: str | None = None, kind: str | None = None,
              inputs: dict | None = None) -> Path:
    """An output folder must be new, empty or one lmaudit wrote as the results of ``job`` (its ``Job``'s type) or as
    ``kind`` (what no job writes: a corpus, a demo, an experiment), which is replaced whole, and none of the
    command's ``inputs`` ({option: path or paths}) or the cache: said before any work."""
    return tools.check_output(out, what, kind=(lambda: api.JOBS[job].type) if job else kind, inputs=inputs)


def model_inputs(option: str, path: Optional[Path], options: Optional["ModelOptions"] = None) -> dict:
    """{option: the folders loading ``path`` reads} (an adapter's bases included), for :func:`check_out`."""
    if path is None or tools.is_endpoint(str(path)):
        return {}
    return {option: tools.model_folders(path, options.adapter_base if options else None)}


def driver_device(backend: str) -> Optional[str]:
    """Where this process keeps a model: on the CPU when Ray workers hold the copies that compute."""
    return "cpu" if backend == "ray" else None


@contextmanager
def backend_from(name: str, address: Optional[str], workers: Optional[int]) -> Iterator:
    """The backend the options choose, to pass to the block's jobs (``backend=``); closed afterwards."""
    backend = api.make_backend(name, address=address, workers=workers)
    try:
        yield backend
    finally:
        backend.close()


# the training jobs' parameters a refused output folder is compared with, and the options that set them
def finish(results: Path, out: Path, no_report: bool, mlflow: Optional[str] = None) -> None:
    """Print where the results and (unless ``no_report``) the report written with them are; with ``mlflow``, log
    the folder to MLflow at that tracking URI (:func:`lmaudit.api.track`) and say where."""
    stdout_console.print(f"results: {results}")
    if not no_report:
        stdout_console.print(f"report: {out / 'report.html'}")
    if mlflow:
        names = {"experiment": getattr(mlflow, "experiment", "lmaudit"), "run_name": getattr(mlflow, "run_name", None)}
        stdout_console.print(f"mlflow: run {log_to_mlflow(out, mlflow, **names)} at {tools.mask_secrets(mlflow)}")


def log_to_mlflow(out: Path, uri: str, **names) -> str:
    """:func:`lmaudit.api.track` of a folder just written; should logging fail, the error says that the results
    are kept and how to log them later."""
    try:
        return api.track(out, str(uri), **names)
    except LmauditError as exc:
        raise LmauditError(f"the results are in {out}, but logging them to MLflow failed: {exc.message}",
                           hint="; ".join(filter(None, [exc.hint, f"log them later with: lmaudit track {out} "
                                                                 f"--mlflow {uri}"]))) from None
