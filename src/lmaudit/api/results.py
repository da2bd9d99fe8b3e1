"""Jobs on results already written: ε lower bounds of a run, two runs compared, and a results folder read back."""

from __future__ import annotations

from pathlib import Path

from lmaudit.report.build import read_results, verify_run
from lmaudit.runs.common import RunResult, job_of_type
from lmaudit.runs.compare import CompareConfig, ComparisonResult, compare_runs
from lmaudit.runs.epsilon import EpsilonResult, run_epsilon
from lmaudit.runs.mia import MIAResult

# what lmaudit.api (and lmaudit) exports of this module: its jobs and the settings they take
__all__ = ["epsilon", "load_results", "compare", "CompareConfig"]


def epsilon(run_dir, *, delta: float = 1e-5, confidence: float = 0.95, attack: str | None = None, seed: int = 0,
            canaries=None) -> EpsilonResult:
    """ε lower bounds of a membership-inference run folder: per attack, the largest ε the run shows the training was
    not (ε, δ)-DP for (a threshold chosen on a seeded half of the scores, the bound on the other), or with
    ``canaries`` (a folder from ``lmaudit corpus canaries``) the one-run bound over the canaries' scores.
    ``write(folder)`` writes ``epsilon.json``.

    Examples
    --------
    >>> run = lmaudit.mia(MODEL, "members.jsonl", "nonmembers.jsonl",
    ...                   config=lmaudit.RunConfig(attacks=["loss"], n_bootstrap=20))
    >>> _ = run.write("runs/mia")
    >>> bounds = lmaudit.epsilon("runs/mia", delta=1e-4)
    >>> list(bounds.to_frame()["attack"]), bool(bounds["attacks"]["loss"]["epsilon"] >= 0)
    (['loss'], True)
    """
    return run_epsilon(run_dir, delta=delta, confidence=confidence, attack=attack, seed=seed, canaries=canaries)


def compare(run_a, run_b, *, config: CompareConfig | None = None) -> ComparisonResult:
    """Two membership-inference runs (folders or results) compared on the texts both scored (matched by content,
    the same labels): per attack both AUCs, AUC(B) − AUC(A) with its paired bootstrap interval, the TPR at 1% FPR's
    difference, the rank correlation of the two runs' scores, and each run's verdict beside the other's. For a served
    model against its weights, a model before and after unlearning, two checkpoints.

    Examples
    --------
    >>> cfg = lmaudit.RunConfig(attacks=["loss", "min_k"], n_bootstrap=20)
    >>> _ = lmaudit.mia(MODEL, "members.jsonl", "nonmembers.jsonl", config=cfg).write("runs/a")
    >>> same = lmaudit.compare("runs/a", "runs/a", config=lmaudit.CompareConfig(n_bootstrap=100))
    >>> same["attacks"]["loss"]["delta_auc"], same["attacks"]["loss"]["reading"], same["matched"]["members"]
    (0.0, 'no difference shown', 12)
    """
    return compare_runs(run_a, run_b, config)


def load_results(folder: str | Path, *, verify: bool = True) -> MIAResult | RunResult:
    """A results folder read back: an :class:`MIAResult` (``mia``, the demo's AR part; its ``write()`` writes it
    again) or the result type its job declares (``audit-set``, ``extract``, ``pii``, ``dataset-inference``: a
    :class:`~lmaudit.runs.common.RunResult` with its payload, ``to_frame()`` and repr).

    The folder is first checked as ``lmaudit report`` checks one (:func:`~lmaudit.report.build.verify_run`): files
    changed since the run wrote them are refused, naming the file. ``verify=False`` loads them anyway, with a
    warning: a figure edited by hand then comes back as if measured.

    Examples
    --------
    >>> _ = lmaudit.mia(MODEL, "members.jsonl", "nonmembers.jsonl",
    ...                 config=lmaudit.RunConfig(attacks=["loss"], n_bootstrap=20)).write("runs/again")
    >>> lmaudit.load_results("runs/again").n_members
    12
    """
    folder = Path(folder)
    verify_run(folder, verify=verify)
    job = job_of_type(read_results(folder / "results.json").get("type") or "mia")  # early runs named no type
    return (job.result if job is not None else MIAResult).load(folder)
