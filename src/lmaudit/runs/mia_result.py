"""The settings and the result of a membership-inference run (:mod:`lmaudit.runs.mia` runs it): what ``results.json``
and ``scores.parquet`` hold, written as one unit and read back."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

import numpy as np
import pandas as pd

from lmaudit.data.loaders import TextSet
from lmaudit.errors import LmauditError
from lmaudit.report.build import read_results, read_scores
from lmaudit.report.cells import metric_rows
from lmaudit.report.document import notebook_html
from lmaudit.report.plots import roc_figure
from lmaudit.report.records import stored_columns
from lmaudit.report.summary import strongest_attack
from lmaudit.runs.common import provenance, write_results
from lmaudit.runs.mia_notes import verdict_text
from lmaudit.runs.set_check import PRIOR
from lmaudit.settings import boolean, check_settings, each, integer, one_of, seed_value, setting, table, text
from lmaudit.utils import stable_hash

MAX_BUDGET = 1024  # masked forwards per model and sample: 64× the default; more only multiplies cost


def budget_memory_hint(budget) -> str:
    """What a budget costs in memory: masked probes keep 16 bytes per masked token, pattern and model."""
    per_text = (budget if isinstance(budget, int) and budget > 0 else 0) * 128 * 16 * 2  # 256 tokens, half masked
    return (f"each masked forward keeps about 16 bytes per masked token and model: a budget of {budget!r} would keep "
            f"≈ {per_text / 2**20:,.0f} MiB per text of 256 tokens (target and reference); the default is 16")


@dataclass
class RunConfig:
    """What a membership-inference run did, recorded in ``results.json``.

    Examples
    --------
    >>> lmaudit.RunConfig(attacks=["loss", "min_k"], params={"min_k": {"k": 0.1}}).params["min_k"]["k"]
    0.1
    >>> lmaudit.RunConfig(n_bootstrap=-1)
    Traceback (most recent call last):
    ...
    lmaudit.errors.SettingError: n_bootstrap must be an integer ≥ 0, got -1
    """

    # None: every attack of the model's kind that can run
    attacks: list[str] | None = setting(None, check=each(text(), optional=True))
    params: dict[str, dict] = setting(default_factory=dict, check=table())  # per-attack parameter overrides
    seed: int = setting(0, check=seed_value())
    batch_size: int | None = setting(None, check=integer(1, optional=True))  # None: the model's token budget
    max_batch_tokens: int | None = setting(None, check=integer(1, optional=True))  # also cap a batch's padded tokens
    max_length: int | None = setting(None, check=integer(2, optional=True), flag="--max-tokens")  # below the context
    long_texts: str = setting("truncate", check=one_of(("truncate", "window")))  # window (AR): every token scored
    n_bootstrap: int = setting(1000, check=integer(0), flag="--bootstrap")
    use_cache: bool = setting(True, check=boolean())
    # DLM: masked forwards per model per sample for every attack
    budget: int = setting(16, check=integer(1, MAX_BUDGET, hint=budget_memory_hint))
    blind: bool = setting(True, check=boolean())  # model-free baselines: do the sets differ without the model?
    # with a reference: its own reference-free scores (it never saw the members: its AUC should be near 0.5)
    reference_prior: bool = setting(True, check=boolean())
    # score members and non-members that share more than a small share of texts
    allow_overlap: bool = setting(False, check=boolean())
    # pairs in the target tokenizer's chat template (None: when it has one)
    chat_template: bool | None = setting(None, check=boolean(optional=True))

    def __post_init__(self) -> None:
        """Every setting is checked here (its constraint is declared beside it), before any model is loaded."""
        check_settings(self)


@dataclass
class MIAResult:
    config: RunConfig
    target: dict
    reference: dict | None
    n_members: int
    n_nonmembers: int
    attacks: dict[str, dict]
    scores: dict[str, np.ndarray]
    labels: np.ndarray
    ids: list[str]
    timings_s: dict[str, float]
    examples: dict = field(default_factory=dict)  # per attack: data a report shows (e.g. Q-Skew's Δ values)
    long_texts: dict = field(default_factory=dict)  # texts longer than the context, per set, and what was done
    overlap: dict = field(default_factory=dict)  # texts the sets share, and duplicates (lmaudit.data.overlap)
    chat_template: bool = False  # the pairs were scored in the target tokenizer's chat template
    set_check: dict = field(default_factory=dict)  # the blind baselines: do the sets differ without the model?
    blind_scores: dict[str, np.ndarray] = field(default_factory=dict)  # their out-of-fold scores, per record
    prior_scores: dict[str, np.ndarray] = field(default_factory=dict)  # the reference's own scores, per attack
    privleak: dict = field(default_factory=dict)  # against a retrained model's run (lmaudit.runs.privleak)
    held_out: dict | None = None  # non-members an attack took for itself (ReCaLL's prefix), scored by none
    digests: list[str] = field(default_factory=list)  # per record, of its content (:func:`text_digests`)
    skipped: dict = field(default_factory=dict)  # attacks the target's access could not run: {attack: why}
    built_from: dict = field(default_factory=dict)  # models trained here: the corpus' and tokenizer's content hashes

    @property
    def type(self) -> str:
        """``mia``: what ``results.json`` says this result is (as ``RunResult.type`` for the other jobs)."""
        return "mia"

    def payload(self) -> dict:
        """What ``results.json`` holds besides the provenance block."""
        return {
            "type": "mia",
            "config": asdict(self.config),
            "target": self.target,
            "reference": self.reference,
            "n_members": self.n_members,
            "n_nonmembers": self.n_nonmembers,
            "attacks": self.attacks,
            # the attack under which scores.parquet's p_value and rank are computed
            "exposure_attack": strongest_attack(self.attacks) if self.attacks else None,
            "long_texts": self.long_texts,
            "overlap": self.overlap,
            **({"held_out": self.held_out} if self.held_out else {}),
            **({"skipped": self.skipped} if self.skipped else {}),
            "chat_template": self.chat_template,
            "set_check": self.set_check,
            **({"privleak": self.privleak} if self.privleak else {}),
            **({"built_from": self.built_from} if self.built_from else {}),
            "timings_s": self.timings_s,
        }

    def to_json(self) -> dict:
        return {**provenance(), **self.payload()}

    def to_frame(self) -> pd.DataFrame:
        """One row per attack, best AUC first: AUC with its 95% interval, the TPRs, forwards per sample."""
        rows = [{"attack": name, "auc": m["auc"], "auc_low": m["auc_ci95"][0], "auc_high": m["auc_ci95"][1],
                 **{key: m.get(key) for key in ("tpr@10%fpr", "tpr@1%fpr", "tpr@0.1%fpr")},
                 "forwards_per_sample": m.get("forwards_per_sample")} for name, m in self.attacks.items()]
        return pd.DataFrame(rows).sort_values("auc", ascending=False, ignore_index=True)

    def _repr_html_(self) -> str:
        """A notebook shows the verdict and the table (the terminal's), best AUC first."""
        kind = self.target.get("kind", "ar").upper()
        return notebook_html(f"Membership inference ({kind}): {self.n_members} members vs {self.n_nonmembers} "
                             "non-members", [verdict_text(self)], metric_rows(self.attacks, self.set_check))

    def plot(self, *, attacks: list[str] | None = None, log: bool = False, n_resamples: int = 200, ax=None):
        """ROC curves of ``attacks`` (default every one) with pointwise 95% bootstrap bands; ``log`` for the low-FPR
        regime (log-log axes). Returns the matplotlib figure (drawn on ``ax`` when given)."""
        chosen = attacks or list(self.scores)
        unknown = [a for a in chosen if a not in self.scores]
        if unknown:
            raise LmauditError(f"no scores of {', '.join(unknown)} in this run",
                               hint=f"one of {', '.join(self.scores)}")
        return roc_figure(self.labels, {a: np.asarray(self.scores[a], float) for a in chosen}, log=log,
                          n_resamples=n_resamples, seed=self.config.seed, ax=ax)

    def __repr__(self) -> str:
        kind = self.target.get("kind", "ar").upper()
        return (f"<MIAResult {kind}: {self.n_members} members vs {self.n_nonmembers} non-members, "
                f"{len(self.attacks)} attacks. {verdict_text(self)}>")

    @classmethod
    def load(cls, folder: str | Path) -> "MIAResult":
        """A run ``write`` wrote (or ``lmaudit mia``): ``results.json``, ``scores.parquet`` and ``examples.json``."""
        folder = Path(folder)
        res = read_results(folder / "results.json")
        if not isinstance(res.get("attacks"), dict) or "target" not in res:
            raise LmauditError(f"{folder / 'results.json'}: not a membership-inference run")
        scores = read_scores(folder / "scores.parquet", res)
        known = {f.name for f in fields(RunConfig)}  # settings of older versions are left out, newer ones default
        examples = folder / "examples.json"
        return cls(config=RunConfig(**{k: v for k, v in res["config"].items() if k in known}), target=res["target"],
                   reference=res.get("reference"), n_members=res["n_members"], n_nonmembers=res["n_nonmembers"],
                   attacks=res["attacks"], scores={n: scores[n].to_numpy() for n in res["attacks"]},
                   labels=scores["label"].to_numpy(), ids=scores["id"].astype(str).tolist(),
                   timings_s=res.get("timings_s", {}),
                   examples=read_results(examples) if examples.is_file() else {},
                   long_texts=res.get("long_texts", {}), overlap=res.get("overlap", {}),
                   chat_template=bool(res.get("chat_template", False)), set_check=res.get("set_check") or {},
                   privleak=res.get("privleak") or {}, held_out=res.get("held_out"), skipped=res.get("skipped") or {},
                   digests=scores["digest"].astype(str).tolist() if "digest" in scores.columns else [],
                   blind_scores={n: scores[n].to_numpy() for n in (res.get("set_check") or {}).get("baselines", {})
                                 if n in scores.columns},
                   prior_scores={n: scores[PRIOR + n].to_numpy()
                                 for n in ((res.get("set_check") or {}).get("reference") or {}).get("attacks", {})
                                 if PRIOR + n in scores.columns})

    def write(self, out_dir: str | Path, *, report: bool = False, files=None, kind: str = "mia") -> Path:
        """``results.json``, ``scores.parquet`` and (when there are any) ``examples.json``, written as one unit
        (:func:`~lmaudit.runs.common.write_results`); returns the path of ``results.json``.

        ``scores.parquet`` has one row per record: id, label, one column per attack, and under
        the strongest attack (:func:`~lmaudit.report.summary.strongest_attack`, named in
        ``results.json`` as ``exposure_attack``) ``p_value`` (the fraction of non-members scoring
        at least as high) and ``rank`` (members only, 1 = most exposed).
        """
        exposure = stored_columns(self.scores, self.labels, strongest_attack(self.attacks)) if self.attacks else {}
        # results.json names that attack ("exposure_attack"), so the two columns are never read without it
        frame = pd.DataFrame({"id": self.ids, "label": self.labels,
                              **({"digest": self.digests} if self.digests else {}),
                              **self.scores, **self.blind_scores,
                              **{PRIOR + n: s for n, s in self.prior_scores.items()}, **exposure})
        return write_results(out_dir, self.payload(), kind=kind, tables={"scores.parquet": frame},
                             extra_json={"examples.json": self.examples} if self.examples else None,
                             files=files, report=report)


def text_digests(*sets: TextSet) -> list[str]:
    """One digest per record of ``sets`` in order, of its content (context and target) alone, never its id: two runs
    scored the same texts when their digests (with the labels) match."""
    return [stable_hash("text", r.context, r.target) for ts in sets for r in ts.records]

