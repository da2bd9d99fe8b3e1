"""What the release gate and the model card read: the gate's thresholds (arguments or a TOML file, checked as
settings are) and results folders, refused unless intact.

A folder is intact when its manifest (``lmaudit_manifest.json``) lists its ``results.json`` (and, for a
membership-inference run, its ``scores.parquet``) and every file it lists is unchanged. A folder without one
(written by hand, or by an older lmaudit) is refused unless the caller trusts it (``trust_edited``). Either way,
the figures the gate compares with its thresholds (each attack's AUC and TPRs and their 95% intervals) are computed
again from the stored scores, with the seed and number of bootstrap resamples the run records (the bootstrap is
seeded: the same scores give the same intervals), and a folder whose ``results.json`` states other figures is
refused, naming the first. A folder is read once however its path is spelled (``runs/a``, ``runs/a/``,
``./runs/../runs/a`` or ``runs/a/results.json``)."""

from __future__ import annotations

import dataclasses
import difflib
import math
from dataclasses import dataclass
from pathlib import Path

from lmaudit.errors import LmauditError, SettingError, warn
from lmaudit.folders import MANIFEST, missing_folder_hint, verify_folder
from lmaudit.metrics import TPR_POINTS, summarize_attacks
from lmaudit.report.build import check_recorded_aucs, read_results
from lmaudit.runs.common import RunResult
from lmaudit.runs.mia_result import MIAResult
from lmaudit.settings import boolean, check_settings, fraction, refusing, setting, table
from lmaudit.utils import read_toml

MIA_TYPES = ("mia", "demo")  # results read as a membership-inference run


def tpr_key(fpr, name: str = "max_tpr_at", flag: str | None = None) -> str:
    """The stored key of the TPR at ``fpr`` ("1%", "0.01", 0.01 or "tpr@1%fpr" all give ``tpr@1%fpr``)."""
    if isinstance(fpr, str) and fpr in TPR_POINTS:
        return fpr
    try:
        text = str(fpr).strip()
        value = float(text[:-1]) / 100 if text.endswith("%") else float(text)
    except ValueError:
        value = math.nan
    found = [k for k, f in TPR_POINTS.items() if math.isclose(f, value, rel_tol=1e-9)]
    if not found:
        raise SettingError(name, f"{{name}}: no run stores a TPR at FPR {fpr!r}", flag=flag,
                           hint=f"the runs store it at {', '.join(fpr_label(k) for k in TPR_POINTS)} FPR")
    return found[0]


def fpr_label(key: str) -> str:
    """``tpr@1%fpr`` → ``1%``."""
    return key[len("tpr@"):-len("fpr")]


def _fpr_table():
    """{FPR: largest TPR allowed}: each FPR one the runs store, each TPR in [0, 1]."""
    def check(value, name: str, flag: str | None) -> None:
        table()(value, name, flag)
        for fpr, tpr in value.items():
            tpr_key(fpr, name, flag)
            fraction()(tpr, f"{name}.{fpr}", f"{flag or '--max-tpr-at'} {fpr}=")
    return refusing(check, 3, {"no such rate": 0.5}, {"1%": 1.5})


def _optional(check):
    def optional(value, name: str, flag: str | None) -> None:
        if value is not None:
            check(value, name, flag)
    return refusing(optional, *(v for v in getattr(check, "invalid", ()) if v is not None))


def _bits(value, name: str, flag: str | None) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise SettingError(name, f"{{name}} must be a number of bits ≥ 0, got {value!r}", flag=flag)


refusing(_bits, -1, True, "3", math.nan)


@dataclass
class GateThresholds:
    """The gate's thresholds (None: not checked; a boolean None: as a thresholds file says, else False).

    Examples
    --------
    >>> GateThresholds(max_auc=0.6, max_tpr_at={"1%": 0.05}).max_tpr_at
    {'tpr@1%fpr': 0.05}
    """

    max_auc: float | None = setting(None, check=fraction(optional=True))
    max_tpr_at: dict = setting(default_factory=dict, check=_fpr_table())
    max_exposure: float | None = setting(None, check=_optional(_bits))
    allow_set_differences: bool | None = setting(None, check=_optional(boolean()))
    allow_unresolved: bool | None = setting(None, check=_optional(boolean()))

    def __post_init__(self) -> None:
        check_settings(self)
        self.max_tpr_at = {tpr_key(k): float(v) for k, v in self.max_tpr_at.items()}

    def over(self, base: GateThresholds) -> GateThresholds:
        """These thresholds where set, ``base``'s elsewhere (TPR thresholds merged per FPR)."""
        given = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        merged = {k: getattr(base, k) if v is None else v for k, v in given.items()}
        merged["max_tpr_at"] = {**base.max_tpr_at, **self.max_tpr_at}
        return GateThresholds(**merged)

    def given(self) -> bool:
        return self.max_auc is not None or bool(self.max_tpr_at) or self.max_exposure is not None

    def to_json(self) -> dict:
        return {"max_auc": self.max_auc, "max_tpr_at": {fpr_label(k): v for k, v in self.max_tpr_at.items()},
                "max_exposure": self.max_exposure, "allow_set_differences": bool(self.allow_set_differences),
                "allow_unresolved": bool(self.allow_unresolved)}


def read_thresholds(path: str | Path) -> GateThresholds:
    """A thresholds file (TOML, keys as the command's options: ``max_auc = 0.6``, ``[max_tpr_at]`` ``"1%" = 0.05``,
    ...); an unknown key or a bad value is one error naming the file and the key."""
    raw = read_toml(path, "thresholds file")
    known = [f.name for f in dataclasses.fields(GateThresholds)]
    where = str(path).replace("{", "{{").replace("}", "}}")
    values = {}
    for key, value in raw.items():
        name = key.replace("-", "_")
        if name not in known:
            close = difflib.get_close_matches(name, known, n=1)
            raise LmauditError(f"{where}: unknown key '{key}'",
                               hint=f"did you mean '{close[0]}'?" if close else f"known keys: {', '.join(known)}")
        values[name] = value
    try:
        return GateThresholds(**values)
    except SettingError as exc:  # named as the file spells it: the file, then the key
        raise SettingError(exc.field, f"{where}: {exc.template}", flag=exc.field, hint=exc.hint_template) from None


@dataclass
class GatedRun:
    """A results folder read for the gate: ``raw`` its ``results.json``, ``result`` the typed result."""

    folder: Path
    raw: dict
    result: MIAResult | RunResult

    @property
    def name(self) -> str:
        return str(self.folder)

    @property
    def is_mia(self) -> bool:
        return isinstance(self.result, MIAResult)

    def exposure(self) -> dict[str, dict]:
        """{canary: {"exposure": bits, "exposure_ci95": [lo, hi] or None}} the run carries (empty if none)."""
        found = self.raw.get("exposure")
        if not isinstance(found, dict):
            return {}
        return {name: e for name, e in found.items()
                if isinstance(e, dict) and isinstance(e.get("exposure"), (int, float))}


def _braced(text) -> str:
    """``text`` as a message template with settings in braces: its own braces doubled."""
    return str(text).replace("{", "{{").replace("}", "}}")


TRUST = {"trust_edited": ("trust_edited=True", "--trust-edited")}  # how the error names the setting


def verify_files(folder: Path, kind: str, trust_edited: bool) -> None:
    """Refuse a folder whose files changed since the run wrote them (naming the file), or one whose manifest is
    missing or leaves out its results, unless ``trust_edited``: then a warning, and its AUCs checked against its
    scores (:func:`~lmaudit.report.build.check_recorded_aucs`)."""
    manifest = verify_folder(folder)  # a listed file that changed is refused here, naming it
    needed = ["results.json"] + (["scores.parquet"] if kind in MIA_TYPES else [])
    unlisted = [] if manifest is None else [name for name in needed if name not in manifest["files"]]
    if manifest is not None and not unlisted:
        return
    why = f"no {MANIFEST}" if manifest is None else f"its {MANIFEST} does not list {', '.join(unlisted)}"
    if not trust_edited:
        raise LmauditError(f"{_braced(folder)}: {why}, so nothing shows that its figures are the ones the run "
                           "measured", hint="re-run the command that wrote it, or pass {trust_edited} to read it "
                                            "anyway (its figures are still checked against its scores)",
                           options=TRUST)
    warn(f"{folder}: {why}; read as trusted: its figures are checked against its scores only")
    check_recorded_aucs(folder)


GATED_FIGURES = ("auc", "auc_ci95", *TPR_POINTS, *(f"{k}_ci95" for k in TPR_POINTS))


def _same(stored, measured) -> bool:
    """Whether a stored figure (a number, an interval or None) is the measured one (to 1e-9)."""
    if measured is None or stored is None:
        return stored is None and measured is None
    if isinstance(measured, list):
        return (isinstance(stored, list) and len(stored) == len(measured)
                and all(_same(a, b) for a, b in zip(stored, measured)))
    return (isinstance(stored, (int, float)) and not isinstance(stored, bool)
            and math.isclose(stored, measured, rel_tol=0, abs_tol=1e-9))


def _shown(value) -> str:
    if isinstance(value, list):
        return "[" + ", ".join(_shown(v) for v in value) + "]"
    return f"{value:.6f}" if isinstance(value, float) else repr(value)


def check_figures(folder: Path, result: MIAResult) -> None:
    """Every figure a threshold is compared with (each attack's AUC, TPRs and their 95% intervals) computed again
    from the stored scores with the run's seed and bootstrap count; one that differs is refused, naming it."""
    cfg = result.config
    again = summarize_attacks(result.labels, result.scores, n_resamples=cfg.n_bootstrap, seed=cfg.seed)
    for name, stored in result.attacks.items():
        stored = stored if isinstance(stored, dict) else {}  # an entry edited into something else: no figure
        for key in GATED_FIGURES:
            if not _same(stored.get(key), again[name].get(key)):
                raise LmauditError(
                    f"{folder / 'results.json'}: {name}'s {key} is {_shown(stored.get(key))} but its scores in "
                    f"scores.parquet give {_shown(again[name].get(key))} (seed {cfg.seed}, {cfg.n_bootstrap:,} "
                    "bootstrap resamples)", hint="results.json was edited, or its files come from different runs; "
                                                 "re-run the command that wrote the folder")


def read_run(folder: str | Path, *, trust_edited: bool = False) -> GatedRun:
    """A results folder, refused unless intact (module docstring); ``trust_edited`` reads one without a manifest."""
    folder = Path(folder)
    if not folder.is_dir():
        hint = missing_folder_hint(folder) or "pass a folder written by lmaudit mia"
        raise LmauditError(f"{folder}: {'not a folder' if folder.exists() else 'no such folder'}", hint=hint)
    if not (folder / "results.json").is_file():
        raise LmauditError(f"{folder}: no results.json", hint="pass a folder written by lmaudit mia")
    raw = read_results(folder / "results.json")
    kind = raw.get("type") or ("mia" if "attacks" in raw and "target" in raw else "experiment")
    if kind not in MIA_TYPES and not isinstance(raw.get("exposure"), dict):
        raise LmauditError(f"{folder}: a {kind} folder, which no threshold of the gate applies to",
                           hint="the gate reads membership-inference runs (lmaudit mia) and runs that carry canary "
                                "exposure")
    verify_files(folder, kind, trust_edited)
    if kind in MIA_TYPES:
        result = MIAResult.load(folder)
        check_figures(folder, result)
        return GatedRun(folder, raw, result)
    return GatedRun(folder, raw, RunResult.load(folder))


def _folder(given) -> Path:
    """The results folder ``given`` names: itself, or the folder of a ``results.json``."""
    path = Path(given)
    return path.parent if path.name == "results.json" and path.is_file() else path


def read_runs(runs, *, trust_edited: bool = False) -> list[GatedRun]:
    """``runs`` (a folder or several) read with :func:`read_run`, each folder once however it is spelled (the
    first spelling names it)."""
    folders = [runs] if isinstance(runs, (str, Path)) else list(runs or [])
    if not folders:
        raise LmauditError("no results folder given", hint="name one or more folders written by lmaudit mia")
    unique: dict[Path, Path] = {}
    for given in folders:
        folder = _folder(given)
        unique.setdefault(folder.resolve(), folder)
    return [read_run(f, trust_edited=trust_edited) for f in unique.values()]
