"""ε lower bounds of a run folder's attacks: from its members and non-members, or from canaries.

Reads ``scores.parquet`` of a folder written by ``lmaudit mia`` (or ``demo``), after
checking the folder against its manifest, and writes ``epsilon.json``.
"""

from __future__ import annotations

import difflib
import json
from pathlib import Path

import numpy as np
import pandas as pd

from lmaudit.errors import LmauditError
from lmaudit.folders import missing_folder_hint, verify_folder
from lmaudit.privacy.bounds import METHOD, EpsilonBound, check_level, epsilon_lower_bound
from lmaudit.privacy.canaries import DECOYS, read_canary_folder
from lmaudit.privacy.one_run import CanaryBound, canary_audit
from lmaudit.utils import provenance, write_json_atomic

EPSILON_FILE = "epsilon.json"
_NOT_MIA = "pass a folder written by lmaudit mia or demo"


EXPOSURE_COLUMNS = ("p_value", "rank")  # what scores.parquet stores beside the scores (report.records.stored_columns)


def read_run_scores(run_dir: str | Path) -> tuple[pd.DataFrame, list[str]]:
    """(scores.parquet of a run folder, the attack columns in the run's order); the folder is verified first."""
    run = Path(run_dir)
    if not run.is_dir():
        raise LmauditError(f"{run}: no such folder", hint=missing_folder_hint(run) or _NOT_MIA)
    verify_folder(run)
    path = run / "scores.parquet"
    if not path.is_file():
        raise LmauditError(f"{run} is not a membership-inference run (no scores.parquet)", hint=_NOT_MIA)
    try:
        frame = pd.read_parquet(path)
    except Exception as exc:  # pyarrow raises several types for a damaged or non-parquet file
        raise LmauditError(f"{path}: unreadable ({type(exc).__name__})", hint=_NOT_MIA) from None
    if "id" not in frame.columns:
        raise LmauditError(f"{path}: no 'id' column, so not the scores of a membership-inference run", hint=_NOT_MIA)
    numeric = [c for c in frame.columns if c not in ("id", "label") and pd.api.types.is_numeric_dtype(frame[c])]
    try:
        declared = list(json.loads((run / "results.json").read_text(encoding="utf-8")).get("attacks", {}))
    except (OSError, ValueError, AttributeError):
        declared = []
    # the run's attacks; without results.json, every numeric column but the exposure columns written beside them
    attacks = ([a for a in declared if a in numeric] if declared else
               [a for a in numeric if a not in EXPOSURE_COLUMNS])
    if not attacks:
        raise LmauditError(f"{path}: no attack score columns", hint=_NOT_MIA)
    return frame, attacks


def pick_attacks(attacks: list[str], name: str | None) -> list[str]:
    """All attacks of the run, or the one named (a typo gets the closest name suggested)."""
    if name is None:
        return attacks
    if name not in attacks:
        close = difflib.get_close_matches(name, attacks, n=1)
        raise LmauditError(f"the run has no attack '{name}'",
                           hint=(f"did you mean '{close[0]}'? " if close else "") + f"it has: {', '.join(attacks)}")
    return [name]


def mia_bounds(run_dir: str | Path, *, attack: str | None = None, delta: float = 1e-5, confidence: float = 0.95,
               seed: int = 0) -> dict[str, EpsilonBound]:
    """:func:`~lmaudit.privacy.bounds.epsilon_lower_bound` of each attack (or the one named) of a mia run."""
    delta, confidence = check_level("delta", delta), check_level("confidence", confidence)
    frame, attacks = read_run_scores(run_dir)
    if "label" not in frame.columns:
        raise LmauditError(f"{Path(run_dir) / 'scores.parquet'}: no 'label' column (member 1 / non-member 0)",
                           hint=_NOT_MIA)
    labels = frame["label"].to_numpy()
    return {a: epsilon_lower_bound(labels, frame[a].to_numpy(), delta=delta, confidence=confidence, seed=seed)
            for a in pick_attacks(attacks, attack)}


def canary_bounds(run_dir: str | Path, canaries: str | Path, *, attack: str | None = None, delta: float = 1e-5,
                  confidence: float = 0.95) -> dict[str, CanaryBound]:
    """:func:`~lmaudit.privacy.one_run.canary_audit` of each attack (or the one named) over the canaries' scores.

    The canaries' scores are looked up by id in the run's ``scores.parquet`` (its labels
    and any other rows are ignored): a run of ``lmaudit mia --members DIR/canaries.jsonl
    --nonmembers DIR/decoys.jsonl`` on the model trained with ``DIR/train_canaries.jsonl``.
    """
    delta, confidence = check_level("delta", delta), check_level("confidence", confidence)
    ids, included = read_canary_folder(canaries)
    frame, attacks = read_run_scores(run_dir)
    chosen = pick_attacks(attacks, attack)
    rows = frame[frame["id"].astype(str).isin(set(ids))]
    if rows["id"].duplicated().any():
        raise LmauditError(f"{Path(run_dir) / 'scores.parquet'}: canary id "
                           f"'{rows['id'][rows['id'].duplicated()].iloc[0]}'"
                           " appears more than once", hint="score each canary once")
    rows = rows.set_index(rows["id"].astype(str))
    missing = [i for i in ids if i not in rows.index]
    if missing:
        raise LmauditError(f"{len(missing)} of {len(ids)} canaries have no score in {Path(run_dir) / 'scores.parquet'} "
                           f"(e.g. {missing[0]})",
                           hint="score every canary: lmaudit mia --model MODEL "
                                f"--members {Path(canaries) / 'canaries.jsonl'} "
                                f"--nonmembers {Path(canaries) / DECOYS} --out RUN_DIR")
    return {a: canary_audit(rows.loc[ids, a].to_numpy(dtype=np.float64), included, delta=delta, confidence=confidence)
            for a in chosen}


def epsilon_payload(run_dir: str | Path, bounds: dict, *, delta: float, confidence: float, seed: int | None,
                    canaries: str | Path | None = None) -> dict:
    """The content of ``epsilon.json``: provenance, the settings, and one bound per attack."""
    method = (METHOD + ": the threshold is chosen on a seeded stratified half, the bound computed on the other"
              if canaries is None else next(iter(bounds.values())).method)
    return {"type": "epsilon-lower-bound", **provenance(), "run": str(run_dir),
            "mode": "mia" if canaries is None else "canaries", "canaries": None if canaries is None else str(canaries),
            "method": method, "delta": delta, "confidence": confidence, "seed": seed,
            "validity": f"each attack's bound holds at {confidence:g} confidence on its own; the largest of several "
                        "attacks' bounds does not",
            "attacks": {name: b.to_dict() for name, b in bounds.items()}}


def write_epsilon(out: str | Path, payload: dict) -> Path:
    """Write ``OUT/epsilon.json`` atomically; return its path."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise LmauditError(f"--out '{out}' is an existing file", hint="name a folder (it is created if absent)")
    path = out / EPSILON_FILE
    write_json_atomic(path, payload)
    return path
