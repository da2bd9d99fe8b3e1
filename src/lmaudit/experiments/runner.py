"""Run an experiment: its type's runner on a workspace of cached models, then the folder of its outputs.

Every experiment writes ``OUT/NAME/results.json`` (configuration, command, provenance,
the type's payload, and the tables and figures built from it), ``OUT/NAME/table.md``
and the type's PNG figures (:mod:`lmaudit.experiments.outputs`).
"""

from __future__ import annotations

import time
from dataclasses import asdict
from pathlib import Path

from lmaudit.experiments.config import BaseConfig, check_name
from lmaudit.experiments.outputs import write_outputs
from lmaudit.experiments.registry import get_experiment_type
from lmaudit.experiments.workspace import Workspace
from lmaudit.folders import check_replaceable
from lmaudit.progress import info
from lmaudit.utils import git_state, provenance


def run_experiment(cfg: BaseConfig, *, out_root: str | Path = "results", command: str = "",
                   report: bool = False) -> Path:
    """Run ``cfg`` (the config of its type, from :func:`~lmaudit.experiments.registry.load_experiment`).

    Writes the outputs under ``out_root/cfg.name`` (with the report when ``report``) and returns that folder.
    """
    t0 = time.perf_counter()
    spec = get_experiment_type(cfg.type)
    if not isinstance(cfg, spec.config):
        raise TypeError(f"experiment '{cfg.name}' of type '{cfg.type}' needs a {spec.config.__name__}, "
                        f"got {type(cfg).__name__}")
    check_name(cfg.name, f"experiment of type '{cfg.type}'")
    check_replaceable(Path(out_root) / cfg.name, "the experiment's folder", kind="experiment")
    git_state()  # the code that runs: read before the work, so a commit made meanwhile never restamps it
    info(f"experiment {cfg.name} ({cfg.type}): {cfg.description}")
    ws = Workspace(cfg)
    payload = spec.run(ws, cfg)
    record = {
        "experiment": asdict(cfg),
        "command": command,
        **provenance(),  # its commit is the one read at start (git_state is read once per process)
        "corpus": ws.corpus_hash(),
        "tokenizer": ws.tokenizer_hash(),
        "runtime_s": round(time.perf_counter() - t0, 1),
        **payload,
    }
    return write_outputs(Path(out_root) / cfg.name, record, report=report)
