"""Helpers shared by test modules (not a test module: no test module imports another one)."""

from __future__ import annotations

import json
import traceback
from pathlib import Path

import numpy as np
import torch
from typer.testing import CliRunner

from lmaudit.folders import write_manifest

WORDS = (
    "the a model data train token layer value array matrix function return input output tensor shape "
    "index batch vector sample weight bias gradient loss mean sum axis dtype float integer string list "
    "dict key default optional parameter argument raise error type object class method call result set "
    "number size length first last next order sort random seed state device memory cache file path read "
    "write open close line column row table frame series group merge join split apply map filter reduce"
).split()

# the device a model loaded with device "auto" (the default) is on, as its handle and results.json record it
AUTO_DEVICE = "cuda:0" if torch.cuda.is_available() else "cpu"

# the tiny architecture of the test models (~35k parameters: built in a blink, a forward in about a millisecond)
TEST_PRESET_ARGS = dict(hidden=32, layers=2, heads=2, intermediate=64, context=128, pretrain_tokens=0, block=32,
                        batch=8, lr=1e-3)


def make_texts(n: int, *, seed: int, min_words: int = 12, max_words: int = 24) -> list[str]:
    """Seeded pseudo-sentences over a small vocabulary (distinct per seed)."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        k = int(rng.integers(min_words, max_words + 1))
        out.append(" ".join(rng.choice(WORDS, size=k)).capitalize() + ".")
    return out


def write_jsonl(path: Path, texts: list[str]) -> Path:
    """One ``{"text": ...}`` object per line."""
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    return path


def lmaudit(*args):
    """Run the ``lmaudit`` command line in this process (``typer.testing.CliRunner``); returns click's Result.

    An error is not turned into an exit code here: the Result's ``exception`` holds it, as
    :func:`lmaudit.cli.main` receives it (see :func:`assert_user_error`).
    """
    from lmaudit.cli import app

    return CliRunner().invoke(app, [str(a) for a in args])


def assert_ok(result) -> None:
    """Assert that a :func:`lmaudit` call succeeded, showing its error (and traceback) otherwise."""
    if result.exception is not None or result.exit_code != 0:
        trace = "".join(traceback.format_exception(*result.exc_info)) if result.exc_info else ""
        raise AssertionError(f"exit code {result.exit_code}: {result.exception!r}\n{result.output}\n{trace}")


def assert_user_error(result, *needles: str):
    """Assert that a :func:`lmaudit` call failed with an :class:`LmauditError` naming every needle.

    ``lmaudit.cli.main`` prints exactly such an error as one line (``error: <message>``) and exits
    with 2 (checked once, in a real subprocess, by tests/test_cli.py); here the message must be one line.
    """
    from lmaudit.cli import error_text
    from lmaudit.errors import LmauditError

    exc = result.exception
    assert isinstance(exc, LmauditError), (type(exc), exc, result.output)
    message = error_text(exc)  # what lmaudit.cli.main prints
    assert "\n" not in message, message
    for needle in needles:
        assert needle in message, message
    return exc


def synthetic_run(folder: Path, *, with_examples: bool = True) -> Path:
    """A membership-inference results folder (results.json, scores.parquet, examples.json, manifest) with made-up
    values."""
    import pandas as pd

    rng = np.random.default_rng(0)
    labels = np.r_[np.ones(60), np.zeros(60)].astype(int)
    scores = {"loss": rng.normal(size=120) + labels, "q_skew": rng.normal(size=120) + 2 * labels}
    pd.DataFrame({"id": [f"s{i}" for i in range(120)], "label": labels, **scores}).to_parquet(folder / "scores.parquet")
    attacks = {n: {"params": {"k": 0.2}, "auc": 0.8, "auc_ci95": [0.7, 0.9], "tpr@10%fpr": 0.5, "tpr@1%fpr": 0.1,
                   "tpr@0.1%fpr": 0.05, "forwards_per_sample": 16} for n in scores}
    res = {"lmaudit_version": "0.1.0", "git_commit": "abc", "created": "2026-01-01T00:00:00+00:00",
           "packages": {"torch": "2.13.0"}, "config": {"seed": 3, "params": {}},
           "target": {"path": "/models/t", "fingerprint": "f00d", "kind": "dlm"},
           "reference": {"path": "/models/r", "fingerprint": "beef"}, "n_members": 60, "n_nonmembers": 60,
           "attacks": attacks, "timings_s": {"probe": 1.5}}
    (folder / "results.json").write_text(json.dumps(res))
    if with_examples:
        (folder / "examples.json").write_text(json.dumps({"q_skew": {
            "member": rng.exponential(size=50).tolist(), "nonmember": rng.normal(size=50).tolist(),
            "member_score": 0.9, "nonmember_score": 0.0}}))
    write_manifest(folder, "run")
    return folder


def mini_experiment(tmp_path: Path, **kw):
    """A miniature experiment file (tiny corpus, 6 + 6 texts, one seed) with ``kw`` over its keys, loaded."""
    import scipy

    from lmaudit.experiments.registry import load_experiment

    base = dict(name="mini", kind="dlm", pretrain_tokens=4000, adapt_tokens=2000, n_members=6, n_nonmembers=6, epochs=2,
                seeds=[0], vocab_size=500, packages=[str(Path(scipy.__file__).parent / "optimize")])
    base.update(kw)

    def toml(v):
        if isinstance(v, dict):
            return "{ " + ", ".join(f'"{k}" = {toml(x)}' for k, x in v.items()) + " }"
        return json.dumps(v)

    f = tmp_path / "mini.toml"
    f.write_text("\n".join(f'"{k}" = {toml(v)}' for k, v in base.items()) + "\n")
    return load_experiment(f)


def causal(model, tokenizer, fingerprint: str = ""):
    """The handle of a causal LM in memory (a network the test built), kept in a probe cache only with a
    ``fingerprint``."""
    from lmaudit.models.adapters import ARAdapter

    return ARAdapter(model, tokenizer).handle(fingerprint=fingerprint)
