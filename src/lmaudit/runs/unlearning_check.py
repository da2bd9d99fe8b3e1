"""``lmaudit unlearning-check``: does a forget set that an audit reads as forgotten come back under relearning or
quantisation?

Two models are checked side by side: the *unlearned* model and the *retrained* one (the base fine-tuned without the
forget set: the gold standard, which never saw it). The forget set F is split in two: a relearning subset R and the
audited part A = F − R (R is a seeded ``relearn_fraction`` of F, or texts given; a text of R also in A or in the
non-member reference set is refused, since the audit would then measure the relearning itself). Each model is
audited as it is and after each check:

- ``relearn``: ``steps`` optimiser steps of fine-tuning on R (every weight, or a LoRA adapter on top);
- ``q8_0`` / ``q4_0``: its weight matrices quantised to GGUF Q8_0 / Q4_0, written to a GGUF file and read back
  (:mod:`lmaudit.models.quantize`).

Every audit reads A against the same references: per attack, the AUC of A (positives) against the held-out
non-members N; and SMI-M's trained fraction 1 − ρ of A on the attack-score features, against the members M (texts
the model is known to keep, e.g. the retain set) and N. Both read "higher = remembered".

The three sets have roles that exclude each other, checked before any model is loaded (:func:`check_roles`): F was
trained on (by the model before its unlearning), so a text of F among N (texts neither model trained on) is refused;
M was trained on by both models, the retrained one included, so a text of F among M is refused too (the retrained
model would have seen it, and the gold standard would not be one); and a text both in M and N is refused (it would
be a reference of both kinds). F itself is not among M: M is the retain set, which the unlearning keeps, F the texts
it removes.

For each check and statistic X, three paired differences, each with a 95% percentile interval from resamples shared
by all the variants (the AUCs: one stratified resample of A and N serves every model; SMI-M: its own resamples of
A, which depend only on |A|, the bootstrap count and the seed):

- ``unlearned``: X(unlearned after the check) − X(unlearned);
- ``retrained``: X(retrained after the check) − X(retrained) (what the check teaches a model that never saw F:
  relearning on R also raises A's scores through what R and A share);
- ``beyond``: their difference. It is read by the one rule of :func:`~lmaudit.claims.verdicts.interval_verdict`,
  ``min_return`` (0.02: two AUC points, or 2% of the audited texts) the smallest return that counts: the interval
  above it → "came back" (the unlearned model regains more of A than the check alone gives); below 0 → "less than
  retrained"; below ``min_return`` → "no return of 0.02 or more"; otherwise "no evidence of a return" (the interval
  holds both 0 and a return that counts). SMI-M is undefined (None, verdict
  "undefined") for a model under which the member and non-member references cannot be told apart.

``after`` is X(unlearned after the check) − X(retrained after the check): whether, after the check, the unlearned
model can still be told from the gold standard; ``before`` the same of the two models as they are (did the audit
read the unlearning as done to begin with?).
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from lmaudit.attacks import get_attack
from lmaudit.audit.sets import standardise
from lmaudit.audit.smi import smi_m
from lmaudit.cache import cached_build
from lmaudit.claims.verdicts import AGAINST, INCONCLUSIVE, NOT_REPRODUCED, REPRODUCED, interval_verdict
from lmaudit.data.loaders import TextSet
from lmaudit.data.overlap import shared
from lmaudit.errors import DataError, LmauditError
from lmaudit.metrics import auc, stratified_bootstrap
from lmaudit.models.build import finetune
from lmaudit.models.loading import load_model
from lmaudit.models.lora import LoraSpec, folder_fingerprint
from lmaudit.models.quantize import SCHEMES as QUANTISATIONS
from lmaudit.models.quantize import write_quantized
from lmaudit.models.sources import detect_kind, resolve_source
from lmaudit.progress import info
from lmaudit.report.document import Report, Section, Summary
from lmaudit.report.tables import check_rows, check_table
from lmaudit.runs.common import Job, RunResult, register_job
from lmaudit.runs.mia import RunConfig, score_set
from lmaudit.settings import (
    boolean,
    check_settings,
    each,
    fraction,
    integer,
    non_negative,
    one_of,
    positive,
    seed_value,
    setting,
    text,
)

SCHEMES = tuple(QUANTISATIONS)  # q8_0, q4_0
# how one interval of "beyond" reads (interval_verdict, with the smallest return that counts as the threshold)
WORDS = {REPRODUCED: "came back", AGAINST: "less than retrained", NOT_REPRODUCED: "no return of {t} or more",
         INCONCLUSIVE: "no evidence of a return"}
SMI_M = "smi-m"
MIN_AUDITED = 5  # audited forget texts: fewer give no AUC worth an interval


@dataclass
class CheckConfig:
    """Settings of an unlearning check (recorded in ``results.json``), each checked on construction.

    Examples
    --------
    >>> lmaudit.CheckConfig(steps=10, quantize=["q4_0"]).quantize
    ['q4_0']
    >>> lmaudit.CheckConfig(quantize=["q3"])
    Traceback (most recent call last):
    ...
    lmaudit.errors.SettingError: unknown quantisation 'q3' (hint: use one of q8_0, q4_0)
    """

    relearn_fraction: float = setting(0.25, check=fraction(above_zero=True))  # of F, when no relearning texts given
    steps: int = setting(20, check=integer(1))  # relearning optimiser steps (no relearning: relearn=False)
    relearn: bool = setting(True, check=boolean())
    lr: float | None = setting(None, check=positive(optional=True))  # None: the fine-tuning default of the model
    batch_size: int | None = setting(None, check=integer(1, optional=True))
    quantize: list[str] = setting(default_factory=lambda: list(SCHEMES), check=each(one_of(SCHEMES,
                                                                                            noun="quantisation")))
    attacks: list[str] = setting(default_factory=lambda: ["loss", "zlib", "min_k"], check=each(text()))
    bootstrap: int = setting(1000, check=integer(20))
    seed: int = setting(0, check=seed_value())
    # the smallest return that counts (AUC, or share of the audited texts): a smaller one is no return
    min_return: float = setting(0.02, check=non_negative())

    def __post_init__(self) -> None:
        check_settings(self)

    @property
    def checks(self) -> list[str]:
        return (["relearn"] if self.relearn else []) + list(self.quantize)


def check_roles(forget: TextSet, members: TextSet, nonmembers: TextSet) -> None:
    """Refuse a forget set that shares a text with the non-members or with the members, and members that share one
    with the non-members (module docstring): one error naming both files and a shared record."""
    roles = ((forget, "forget text(s)", nonmembers, "the non-members",
              "the forget set must be texts the model was trained on, the non-members texts neither model trained on"),
             (forget, "forget text(s)", members, "the members",
              "the members (the retain set) are trained on by the retrained model too: a forget text among them is "
              "one the retrained model saw, so it is no model that never saw the forget set"),
             (members, "member(s)", nonmembers, "the non-members",
              "a text is kept by both models or held out from both, never both"))
    for texts, noun, other, name, why in roles:
        found = shared(other, texts)
        if found["normalised"]:
            theirs, ours = found["ids"][0]
            raise DataError(f"{texts.source}: {found['normalised']} {noun} are also among {name} ({other.source}), "
                            f"e.g. {ours} = {theirs}", hint=f"{why}; remove them from one of the files")


def split_forget(forget: TextSet, relearn_on: TextSet | None, nonmembers: TextSet, cfg: CheckConfig
                 ) -> tuple[TextSet, TextSet]:
    """(R, A): the relearning texts and the audited part of the forget set; refuses R sharing a text with A or N."""
    if relearn_on is None:
        order = np.random.default_rng(cfg.seed).permutation(len(forget))
        k = int(round(cfg.relearn_fraction * len(forget)))
        if k < 1 or len(forget) - k < MIN_AUDITED:
            raise DataError(f"{forget.source}: {len(forget)} forget texts leave {len(forget) - k} to audit after "
                            f"relearning on {k}", hint=f"audit at least {MIN_AUDITED} texts: give more forget texts "
                                                       "or another relearn fraction")
        pick = lambda idx, what: TextSet([forget.records[i] for i in sorted(idx)],  # noqa: E731
                                         source=f"{forget.source} ({what})")
        return pick(order[:k], "relearned part"), pick(order[k:], "audited part")
    for name, other in (("the audited forget texts", forget), ("the non-members", nonmembers)):
        found = shared(other, relearn_on)
        if found["normalised"]:
            raise DataError(f"{relearn_on.source}: {found['normalised']} relearning text(s) are also among {name} "
                            f"({other.source}), e.g. {found['ids'][0][1]}",
                            hint="relearn on texts outside the audited sets: the audit would measure the relearning "
                                 "itself")
    if len(forget) < MIN_AUDITED:
        raise DataError(f"{forget.source}: {len(forget)} forget texts to audit", hint=f"give at least {MIN_AUDITED}")
    return relearn_on, forget


def _variant(model: str, check: str, relearn: TextSet, cfg: CheckConfig, lora: LoraSpec | None,
             load_options: dict) -> str:
    """The folder of ``model`` after ``check`` (built once, then read from the cache)."""
    key = ("unlearning-check", check, folder_fingerprint(model, load_options.get("adapter_base")))
    if check == "relearn":
        key += (relearn.fingerprint(), cfg.steps, cfg.lr, cfg.batch_size, cfg.seed,
                None if lora is None else asdict(lora))
        build = lambda tmp: finetune(model, relearn, tmp, steps=cfg.steps, lr=cfg.lr,  # noqa: E731
                                     batch_size=cfg.batch_size, seed=cfg.seed, lora=lora, load_options=load_options,
                                     record={"stage": "relearn", "source": str(model)})
    else:
        build = lambda tmp: write_quantized(model, tmp, scheme=check, **load_options)  # noqa: E731
    return str(cached_build("models", key, build))


def _audit(path: str, sets: dict[str, TextSet], cfg: CheckConfig, load_options: dict, reference=None
           ) -> dict[str, np.ndarray]:
    """{set: (n, attacks) score matrix} of one model, the columns in ``cfg.attacks`` order."""
    loaded = load_model(path, **load_options)
    out = {}
    for name, ts in sets.items():
        scores = score_set(loaded, ts, reference=reference, config=RunConfig(attacks=cfg.attacks, seed=cfg.seed))
        out[name] = np.column_stack([scores[a] for a in cfg.attacks])
    return out


def _difference(point: float, reps: np.ndarray) -> dict:
    """A difference and its 95% percentile interval; None where a statistic was undefined (SMI-M on references it
    cannot tell apart)."""
    if not (np.isfinite(point) and np.isfinite(reps).all()):
        return {"diff": None, "ci95": [None, None]}
    return {"diff": float(point), "ci95": [float(x) for x in np.quantile(reps, [0.025, 0.975])]}


def _verdict(beyond: dict, threshold: float) -> str:
    if beyond["diff"] is None:
        return "undefined"
    return WORDS[interval_verdict(*beyond["ci95"], threshold=threshold)].format(t=f"{threshold:g}")


def _statistics(feats: dict, cfg: CheckConfig) -> tuple[dict, dict]:
    """Point values and bootstrap replicates of every statistic of one variant: {stat: value}, {stat: (B,)}."""
    A, N, M = feats["audited"], feats["nonmembers"], feats["members"]
    labels = np.r_[np.ones(len(A)), np.zeros(len(N))]
    both = np.vstack([A, N])
    reps = stratified_bootstrap(labels, both.T, n_resamples=cfg.bootstrap, seed=cfg.seed).auc
    points = {a: auc(labels, both[:, j]) for j, a in enumerate(cfg.attacks)}
    replicates = {a: reps[:, j] for j, a in enumerate(cfg.attacks)}
    try:
        est = smi_m(*standardise(M, N, A), bootstrap=cfg.bootstrap, seed=cfg.seed)
        points[SMI_M], replicates[SMI_M] = 1.0 - est.rho, 1.0 - est.replicates
    except LmauditError as exc:  # references the kernel cannot tell apart: ρ is not identifiable under this model
        info(f"SMI-M undefined: {exc.message}")
        points[SMI_M], replicates[SMI_M] = float("nan"), np.full(cfg.bootstrap, np.nan)
    return points, replicates


def compare(points: dict, replicates: dict, checks: list[str], *, threshold: float = 0.0) -> dict:
    """{check: {statistic: {unlearned, retrained, beyond, after, verdict}}} (module docstring)."""
    out = {}
    for check in checks:
        rows = {}
        for stat in points["unlearned"]["as is"]:
            p = {m: (points[m]["as is"][stat], points[m][check][stat]) for m in ("unlearned", "retrained")}
            r = {m: (replicates[m]["as is"][stat], replicates[m][check][stat]) for m in ("unlearned", "retrained")}
            beyond = _difference((p["unlearned"][1] - p["unlearned"][0]) - (p["retrained"][1] - p["retrained"][0]),
                                 (r["unlearned"][1] - r["unlearned"][0]) - (r["retrained"][1] - r["retrained"][0]))
            rows[stat] = {**{m: _difference(p[m][1] - p[m][0], r[m][1] - r[m][0]) for m in p}, "beyond": beyond,
                          "after": _difference(p["unlearned"][1] - p["retrained"][1],
                                               r["unlearned"][1] - r["retrained"][1]),
                          "verdict": _verdict(beyond, threshold)}
        out[check] = rows
    return out


def run_unlearning_check(unlearned: str, retrained: str, forget: TextSet, members: TextSet, nonmembers: TextSet, *,
                         relearn_on: TextSet | None = None, config: CheckConfig | None = None,
                         lora: LoraSpec | None = None, load_options: dict | None = None,
                         reference: str | None = None) -> CheckResult:
    """The result of one check (module docstring); ``reference``: the model the reference attacks compare
    with (the base both models were tuned from; unchanged by the checks)."""
    cfg, load_options = config or CheckConfig(), dict(load_options or {})
    check_roles(forget, members, nonmembers)
    if str(unlearned) == str(retrained):
        raise LmauditError("the unlearned and the retrained model are the same folder",
                           hint="give the model retrained without the forget set as the retrained model")
    kind = detect_kind(resolve_source(unlearned, load_options.get("adapter_base")).folder)  # an adapter: its base
    needing = [a for a in cfg.attacks if get_attack(a, kind).needs_reference]  # unknown attacks: said before any work
    if needing and reference is None:
        raise LmauditError(f"attack {needing[0]} needs a reference model", hint="give the base both models were tuned "
                           "from as the reference, or leave the attack out", options=("reference", "attacks"))
    relearn, audited = split_forget(forget, relearn_on, nonmembers, cfg)
    sets = {"audited": audited, "members": members, "nonmembers": nonmembers}
    ref = None if reference is None else load_model(reference, **load_options)
    t0 = time.perf_counter()
    paths, points, replicates, timings = {}, {}, {}, {}
    for role, model in (("unlearned", str(unlearned)), ("retrained", str(retrained))):
        paths[role], points[role], replicates[role] = {"as is": model}, {}, {}
        for check in cfg.checks:
            t = time.perf_counter()
            info(f"{role} model: {check} …")
            paths[role][check] = _variant(model, check, relearn, cfg, lora, load_options)
            timings[f"{role} {check}"] = time.perf_counter() - t
        for variant, path in paths[role].items():
            info(f"auditing the {role} model ({variant}) on {len(audited)} + {len(members)} + {len(nonmembers)} texts")
            opts = load_options if variant == "as is" else {}
            points[role][variant], replicates[role][variant] = _statistics(_audit(path, sets, cfg, opts, ref), cfg)
    checks = compare(points, replicates, cfg.checks, threshold=cfg.min_return)
    before = {stat: _difference(points["unlearned"]["as is"][stat] - points["retrained"]["as is"][stat],
                                replicates["unlearned"]["as is"][stat] - replicates["retrained"]["as is"][stat])
              for stat in points["unlearned"]["as is"]}
    return CheckResult({
        "type": "unlearning-check", "config": asdict(cfg), "lora": None if lora is None else asdict(lora),
        "models": paths, "reference": None if reference is None else str(reference),
        "statistics": ["AUC " + a for a in cfg.attacks] + ["SMI-M 1 - rho"],
        "n_audited": len(audited), "n_relearn": len(relearn), "n_members": len(members),
        "n_nonmembers": len(nonmembers),
        "data": {"audited": audited.source, "relearn": relearn.source, "members": members.source,
                 "nonmembers": nonmembers.source},
        "values": {m: {v: {k: x if np.isfinite(x) else None for k, x in stats.items()}
                       for v, stats in variants.items()} for m, variants in points.items()},
        "before": before, "checks": checks,
        "timings_s": {"models": timings, "total": time.perf_counter() - t0}})


RULE = ("\"beyond\" is the unlearned model's change under the check minus the retrained model's change under the same "
        "check, with a paired 95% bootstrap interval, read by the one interval rule with the smallest return that "
        "counts (min_return): the interval above it, the forget set came back; below it, no return of that size; "
        "below 0, less than the retrained model; holding both 0 and it, no evidence either way.")


def check_report(run: Path, res: dict, *, where: Path, show_pii: bool = False) -> Report:
    cfg = res["config"]
    text = (f"{res['n_audited']} audited forget texts ({res['data']['audited']}) read against {res['n_members']} "
            f"members and {res['n_nonmembers']} non-members; relearning: {cfg['steps']} steps on {res['n_relearn']} "
            f"texts ({res['data']['relearn']}); quantisation: {', '.join(cfg['quantize']) or 'none'}. AUC: the "
            "audited texts against the non-members; SMI-M: the trained fraction 1 − ρ on the attack scores. " + RULE)
    facts = {f"{role} model": str(paths["as is"]) for role, paths in res["models"].items()}
    facts["configuration"] = json.dumps(cfg)
    came = [r for r in check_rows(res) if r["verdict"] == "came back"]
    summary = Summary(CheckResult(res).headline(), "high" if came else None,
                      [f"{row[0]}, {row[1]}: beyond retrained {row[4]}: {row[6]}" for row in check_table(res)[1]],
                      rule=RULE)
    return Report("lmaudit unlearning check", f"Run folder: {where}", facts,
                  [Section("Relearning and quantisation against the retrained model", text, table=check_table(res))],
                  summary=summary)


class CheckResult(RunResult):
    """An unlearning check: ``to_frame()`` has one row per check and statistic (:func:`check_rows`)."""

    def to_frame(self) -> pd.DataFrame:
        return pd.DataFrame(check_rows(self.payload))

    def headline(self) -> str:
        came = [f"{r['check']} ({r['statistic']})" for r in check_rows(self.payload) if r["verdict"] == "came back"]
        audited = self.payload["n_audited"]
        if came:
            return f"Came back beyond the retrained model's own change on {audited} audited texts: {', '.join(came)}"
        return (f"No check brought the forget set back beyond the retrained model's own change ({audited} audited "
                "texts; each interval holds 0 or lies below it)")


JOB = register_job(Job("unlearning_check", "unlearning-check", "unlearning-check", CheckResult,
                             run_unlearning_check, CheckConfig, check_report))
