"""``dp-audit``: fine-tune with DP at several ε, then check the claim against what attacks achieve.

Per seed, model kind and ε (0 in ``epsilons`` means no DP, ε = ∞): the base fine-tuned
on the members plus the canaries a fair coin put in (δ = 1/n, n the training texts),
full fine-tuning with DP-SGD (:mod:`lmaudit.models.dp`); then

- utility: the held-out loss (the objective on the non-members);
- the MIA table (every attack, reference = the base) and ε_lb of the best attack
  (:func:`~lmaudit.privacy.bounds.epsilon_lower_bound`, held-out threshold);
- ε_lb of the one-run canary audit (:func:`~lmaudit.privacy.one_run.canary_audit`) on
  the best attack's scores of the canaries.

The invariant ε_lb ≤ ε must hold for every DP row: a violation is flagged (it would be
a bug in DP training or in a bound). Payload: ``rows`` (one per kind and ε, mean over
seeds where numeric) and ``per_seed``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from lmaudit import api
from lmaudit.data.loaders import TextSet
from lmaudit.experiments.config import KINDS, BaseConfig
from lmaudit.experiments.registry import register_experiment
from lmaudit.experiments.workspace import Workspace
from lmaudit.models.dp import DPSpec
from lmaudit.models.unlearn import mean_loss
from lmaudit.privacy.bounds import epsilon_lower_bound
from lmaudit.privacy.canaries import make_canaries
from lmaudit.privacy.one_run import canary_audit
from lmaudit.report import plots
from lmaudit.settings import each, integer, non_negative, one_of, positive, setting, text
from lmaudit.utils import stable_seed


@dataclass
class DPAuditConfig(BaseConfig):
    # 0: no DP (ε = ∞)
    epsilons: list[float] = setting(default_factory=lambda: [1.0, 4.0, 8.0, 0.0], check=each(non_negative()))
    kinds: list[str] = setting(default_factory=lambda: ["ar", "dlm"], check=each(one_of(KINDS)))
    max_grad_norm: float = setting(1.0, check=positive())
    n_canaries: int = setting(100, check=integer(1))
    canary_kind: str = setting("rare", check=one_of(("random", "rare", "pii")))
    confidence: float = setting(0.95, check=positive(below=1))
    budget: int = setting(16, check=integer(1))
    attacks: list[str] | None = setting(None, check=each(text(), optional=True))


def _canaries(cfg: DPAuditConfig, seed: int) -> tuple[TextSet, TextSet, np.ndarray]:
    """(canaries, decoys never trained on, which canaries a fair coin put into the training data)."""
    texts = make_canaries(cfg.n_canaries, cfg.canary_kind, seed=seed)
    decoys = make_canaries(cfg.n_canaries, cfg.canary_kind, seed=seed, stream="decoy")
    included = np.random.default_rng(stable_seed("dp-audit-coins", seed)).random(cfg.n_canaries) < 0.5
    return (TextSet.from_texts(texts, prefix="c", source="canaries"),
            TextSet.from_texts(decoys, prefix="d", source="decoys"), included)


def _model(ws: Workspace, cfg: DPAuditConfig, kind: str, train: TextSet, eps: float, delta: float, seed: int):
    base = ws.base(kind=kind)
    dp = DPSpec(epsilon=eps, delta=delta, max_grad_norm=cfg.max_grad_norm) if eps > 0 else None
    key = ("dp-audit", str(base), train.fingerprint(), cfg.mode, cfg.epochs, cfg.lr, cfg.block, cfg.batch_size, seed,
           eps, delta, cfg.max_grad_norm)
    return base, api.finetune(base, train, mode=cfg.mode, epochs=cfg.epochs, lr=cfg.lr, block=cfg.block,
                              batch_size=cfg.batch_size, seed=seed, dp=dp, cache_key=key).path


def run(ws: Workspace, cfg: DPAuditConfig) -> dict:
    """Utility, MIA and both ε lower bounds of each (kind, ε) model."""
    per_seed = []
    for seed in cfg.seeds:
        members, nonmembers = ws.data(seed)
        canaries, decoys, included = _canaries(cfg, seed)
        train = TextSet(members.records + [r for r, inc in zip(canaries.records, included) if inc],
                        source="members + included canaries")
        delta = 1.0 / len(train)
        for kind in cfg.kinds:
            for eps in cfg.epsilons:
                base, target = _model(ws, cfg, kind, train, eps, delta, seed)
                loaded = ws.load(target)
                result = ws.mia(target, base, members, nonmembers, seed, budget=cfg.budget, attacks=cfg.attacks)
                best = max(result.attacks, key=lambda n: result.attacks[n]["auc"])
                mia_lb = epsilon_lower_bound(result.labels, result.scores[best], delta=delta,
                                             confidence=cfg.confidence, seed=seed)
                on_canaries = ws.mia(target, base, canaries, decoys, seed, budget=cfg.budget, attacks=[best])
                canary_lb = canary_audit(on_canaries.scores[best][: len(canaries)], included, delta=delta,
                                         confidence=cfg.confidence)
                spent = (loaded.dp or {}).get("epsilon") if eps > 0 else None
                lb = max(mia_lb.epsilon, canary_lb.epsilon)
                per_seed.append({
                    "seed": seed, "kind": kind, "target_epsilon": eps or None, "epsilon": spent, "delta": delta,
                    "heldout_loss": mean_loss(loaded, nonmembers, mode=cfg.mode, block=cfg.block, seed=seed),
                    "best_attack": best, "auc": result.attacks[best]["auc"],
                    "auc_by_attack": {n: m["auc"] for n, m in result.attacks.items()},
                    "mia_bound": mia_lb.to_dict(), "canary_bound": canary_lb.to_dict(),
                    "violation": spent is not None and lb > spent,
                })
    return {"per_seed": per_seed, "rows": _rows(per_seed)}


def _rows(per_seed: list[dict]) -> list[dict]:
    rows = []
    for kind in dict.fromkeys(r["kind"] for r in per_seed):
        for eps in dict.fromkeys(r["target_epsilon"] for r in per_seed if r["kind"] == kind):
            runs = [r for r in per_seed if r["kind"] == kind and r["target_epsilon"] == eps]
            mean = lambda key, rs=runs: float(np.mean([key(r) for r in rs]))  # noqa: E731
            rows.append({"kind": kind, "target_epsilon": eps,
                         "epsilon": None if eps is None else mean(lambda r: r["epsilon"]),
                         "heldout_loss": mean(lambda r: r["heldout_loss"]), "auc": mean(lambda r: r["auc"]),
                         "best_attack": runs[0]["best_attack"],
                         "mia_lb": mean(lambda r: r["mia_bound"]["epsilon"]),
                         "canary_lb": mean(lambda r: r["canary_bound"]["epsilon"]),
                         "violations": sum(r["violation"] for r in runs), "n_seeds": len(runs)})
    return rows


def _eps(value) -> str:
    return "∞ (no DP)" if value is None else f"{value:.2f}"


def tables(record: dict) -> list[tuple[str, list[str], list[list[str]]]]:
    exp = record["experiment"]
    rows = [[r["kind"].upper(), _eps(r["target_epsilon"]), "-" if r["epsilon"] is None else f"{r['epsilon']:.2f}",
             f"{r['heldout_loss']:.3f}", f"{r['best_attack']} {r['auc']:.3f}", f"{r['mia_lb']:.2f}",
             f"{r['canary_lb']:.2f}", "VIOLATED" if r["violations"] else ("holds" if r["epsilon"] else "-")]
            for r in record["rows"]]
    caption = (f"DP fine-tuning (C = {exp['max_grad_norm']}, δ = 1/n) of the base on {exp['n_members']} members plus "
               f"the canaries a fair coin put in ({exp['n_canaries']} {exp['canary_kind']} canaries); ε_lb at "
               f"{100 * exp['confidence']:.0f}% confidence from the best attack (held-out threshold) and from the "
               "canaries (one run). The invariant ε_lb ≤ ε must hold on every DP row; mean over seeds.")
    return [(caption, ["model", "target ε", "spent ε", "held-out loss", "best attack AUC", "ε_lb (MIA)",
                       "ε_lb (canaries)", "ε_lb ≤ ε"], rows)]


def figures(record: dict) -> list[tuple[str, str, bytes]]:
    """ε_lb against the claimed ε, with the diagonal ε_lb = ε (the no-DP rows at the right edge)."""
    points = [(r["kind"], r["epsilon"], max(r["mia_lb"], r["canary_lb"])) for r in record["rows"]]
    finite = [e for _, e, _ in points if e is not None]
    right = (max(finite) if finite else 1.0) * 1.5
    series = {}
    for kind, eps, lb in points:
        series.setdefault(kind.upper(), []).append((right if eps is None or math.isinf(eps) else eps, lb))
    return [("epsilon_lb_vs_epsilon", "ε lower bound vs claimed ε (no DP drawn at the right edge)",
             plots.epsilon_bounds(series, right=right))]


def setting(exp: dict) -> str:
    """``table.md``'s line: both kinds, DP fine-tuning at each ε."""
    kinds = " and ".join(k.upper() for k in exp["kinds"])
    return f"{kinds} `{exp['preset']}`, {exp['mode']} fine-tuning for {exp['epochs']} epochs with DP-SGD at each ε."


register_experiment("dp-audit", config=DPAuditConfig, run=run, tables=tables, figures=figures, setting=setting)
