"""Membership-inference tables: every attack (``mia``), Q-Skew ablations (``ablation``), other references
(``misaligned-ref``).

The three types share their payload — ``rows``: ``{label: {per_seed, auc, tpr@10%fpr,
tpr@1%fpr}}`` with each metric as [mean, std] over seeds — and its table; they differ in
their keys and in what a row is: an attack, a variant, or a (reference, attack) pair.

With ``compare = LABEL`` the payload gains ``paired``: ``{"compare": LABEL, "vs": {other:
[{seed, diff, ci95, tpr@1%fpr, tpr@5%fpr}]}}``, AUC(LABEL) − AUC(other) on the same samples per
seed with the paired stratified bootstrap 95% interval (:func:`~lmaudit.metrics.paired_auc_diff`,
1,000 resamples), so a claim such as "Q-Skew beats every baseline" is read from intervals, and
the TPR differences at 1% and 5% FPR on the same resamples (``{diff, ci95}``, None where the
non-members are too few: :func:`~lmaudit.metrics.paired_tpr_diffs`).
"""

from __future__ import annotations

from dataclasses import dataclass

from lmaudit.attacks import list_attacks
from lmaudit.attacks.registry import attack_params, attack_variants
from lmaudit.errors import LmauditError
from lmaudit.experiments.config import BaseConfig
from lmaudit.experiments.registry import register_experiment
from lmaudit.experiments.workspace import METRICS, Workspace, aggregate, metrics
from lmaudit.metrics import LOW_FPRS, paired_auc_diff, paired_tpr_diffs
from lmaudit.settings import boolean, each, integer, one_of, setting, text

HEADERS = ("AUC", "TPR@10%FPR", "TPR@1%FPR")
N_PAIRED = 1000  # paired bootstrap resamples


@dataclass
class MIAConfig(BaseConfig):
    budget: int = setting(16, check=integer(1))  # masked forwards per model per sample (DLM attacks)
    # None: every attack of the model's kind that is not opt-in
    attacks: list[str] | None = setting(None, check=each(text(), optional=True))
    # attack -> its parameters ([params.neighbourhood] n = 10)
    params: dict[str, dict] = setting(default_factory=dict, check=attack_params)
    reference_prior: bool = setting(True, check=boolean())  # also score the reference as a target (set check rows)
    # a row label: AUC(compare) − AUC(each other row), paired, per seed
    compare: str | None = setting(None, check=text(optional=True))


@dataclass
class AblationConfig(BaseConfig):
    budget: int = setting(16, check=integer(1))
    variants: dict[str, dict] = setting(default_factory=dict, check=attack_variants)  # label -> {attack, params}
    compare: str | None = setting(None, check=text(optional=True))


@dataclass
class MisalignedConfig(BaseConfig):
    budget: int = setting(16, check=integer(1))
    attacks: list[str] | None = setting(None, check=each(text(), optional=True))
    references: list[str] = setting(default_factory=lambda: ["golden", "other-seed", "perturbed"],
                                    check=each(one_of(("golden", "other-seed", "perturbed"))))
    compare: str | None = setting(None, check=text(optional=True))


def _runnable(kind: str) -> list[str]:
    """The attacks a run with a reference and no shadow models scores (``attacks = None``)."""
    return [a.name for a in list_attacks(kind) if not a.needs_shadows]


def _check_compare(compare: str | None, rows: list[str]) -> None:
    """Before anything is trained: ``compare`` must name a row the experiment will have."""
    if compare is not None and compare not in rows:
        raise LmauditError(f"compare = '{compare}' is not a row of this experiment", hint=f"rows: {', '.join(rows)}")


class _Collector:
    """Per-seed metrics of every row and, with ``compare``, the paired differences against it."""

    def __init__(self, compare: str | None) -> None:
        self.compare = compare
        self.rows: dict[str, list] = {}
        self.vs: dict[str, list] = {}

    def seed(self, seed: int, labels, entries: dict[str, tuple[dict, object]]) -> None:
        """Record one seed: ``entries`` maps a row label to (its metrics, its scores)."""
        for label, (m, _) in entries.items():
            self.rows.setdefault(label, []).append(m)
        if self.compare is None or self.compare not in entries:
            return
        for label, (_, scores) in entries.items():
            if label != self.compare:
                first = entries[self.compare][1]
                diff, lo, hi = paired_auc_diff(labels, first, scores, n_resamples=N_PAIRED, seed=seed)
                self.vs.setdefault(label, []).append({"seed": seed, "diff": diff, "ci95": [lo, hi],
                                                      **paired_tpr_diffs(labels, first, scores,
                                                                         n_resamples=N_PAIRED, seed=seed)})

    def payload(self) -> dict:
        out = {"rows": {k: {"per_seed": v, **aggregate(v)} for k, v in self.rows.items()}}
        if self.compare is not None:
            out["paired"] = {"compare": self.compare, "vs": self.vs}
        return out


def run_mia_table(ws: Workspace, cfg: MIAConfig) -> dict:
    """Every attack (or ``attacks``) on the target fine-tuned on the members, reference = its base."""
    _check_compare(cfg.compare, cfg.attacks or _runnable(cfg.kind))
    out = _Collector(cfg.compare)
    alone = holding_out(cfg.attacks, cfg.params)
    for seed in cfg.seeds:
        members, nonmembers, base, target = ws.fine_tuned_run(seed)
        rest = None if cfg.attacks is None else [a for a in cfg.attacks if a not in alone]
        result = ws.mia(target, base, members, nonmembers, seed, budget=cfg.budget, attacks=rest,
                        params={k: v for k, v in cfg.params.items() if k not in alone},
                        reference_prior=cfg.reference_prior)
        out.seed(seed, result.labels, {name: (metrics(result, name), result.scores[name]) for name in result.attacks})
        for name in alone:  # on fewer non-members: a row without a paired difference
            result = ws.mia(target, base, members, nonmembers, seed, budget=cfg.budget, attacks=[name],
                            params={name: cfg.params[name]} if name in cfg.params else None,
                            reference_prior=cfg.reference_prior)
            out.seed(seed, result.labels, {name: (metrics(result, name), result.scores[name])})
    return out.payload()


def holding_out(attacks: list[str] | None, params: dict[str, dict]) -> list[str]:
    """The attacks that hold out some of the non-members (ReCaLL without a prefix of its own): each is run alone,
    so that every other attack scores the whole sets."""
    own_prefix = {"prefix_file", "prefix_texts"} & set(params.get("recall", {}))
    return ["recall"] if "recall" in (attacks or []) and not own_prefix else []


def run_ablation(ws: Workspace, cfg: AblationConfig) -> dict:
    """One row per variant: an attack and its parameters (``[variants.LABEL] attack = ..., k = ...``)."""
    _check_compare(cfg.compare, list(cfg.variants))
    out = _Collector(cfg.compare)
    for seed in cfg.seeds:
        members, nonmembers, base, target = ws.fine_tuned_run(seed)
        entries, labels = {}, None
        for label, variant in cfg.variants.items():
            attack = variant["attack"]
            params = {k: v for k, v in variant.items() if k != "attack"}
            result = ws.mia(target, base, members, nonmembers, seed, budget=cfg.budget, attacks=[attack],
                            params={attack: params})
            entries[label], labels = (metrics(result, attack), result.scores[attack]), result.labels
        out.seed(seed, labels, entries)
    return out.payload()


def run_misaligned(ws: Workspace, cfg: MisalignedConfig) -> dict:
    """Reference-based attacks with the golden reference, another seed's base, or a base tuned on perturbed text."""
    attacks = cfg.attacks or _runnable(cfg.kind)
    _check_compare(cfg.compare, [f"{r} / {a}" for r in cfg.references for a in attacks])
    out = _Collector(cfg.compare)
    for seed in cfg.seeds:
        members, nonmembers, base, target = ws.fine_tuned_run(seed)
        refs = {"golden": base, "other-seed": ws.base(seed=1),
                "perturbed": ws.finetuned(base, ws.other_data(seed), seed)}
        entries, labels = {}, None
        for ref_name in cfg.references:
            result = ws.mia(target, refs[ref_name], members, nonmembers, seed, budget=cfg.budget, attacks=cfg.attacks)
            labels = result.labels
            for name in result.attacks:
                entries[f"{ref_name} / {name}"] = (metrics(result, name), result.scores[name])
        out.seed(seed, labels, entries)
    return out.payload()


def _pm(mean_std: list[float]) -> str:
    """"93.8 ± 1.3" in percent; "n/a" for a TPR too few non-members resolve (stored as NaN)."""
    m, sd = mean_std
    return "n/a" if m != m else f"{100 * m:.1f} ± {100 * sd:.1f}"


def rows_tables(record: dict, first: str) -> list[tuple[str, list[str], list[list[str]]]]:
    """One table: a row per label, best mean AUC first, each metric as mean ± std in percent.

    Parameters
    ----------
    record : dict
        The record of ``results.json`` (``experiment`` and ``rows``).
    first : str
        The header of the label column.
    """
    exp = record["experiment"]
    rows = [[label] + [_pm(r[k]) for k in METRICS]
            for label, r in sorted(record["rows"].items(), key=lambda kv: -kv[1]["auc"][0])]
    # the masked-forward budget of DLM attacks: an AR probe is one forward whatever it says
    budget = f"; {exp['budget']} forwards per model per sample" if "budget" in exp and exp.get("kind") != "ar" else ""
    caption = (f"{exp['n_members']} members vs {exp['n_nonmembers']} non-members{budget}. Values are mean ± std "
               "over seeds, in percent.")
    if any("n/a" in row for row in rows):
        caption += " n/a: a TPR at an FPR finer than 1 / non-members cannot be measured (1% FPR needs ≥ 100)."
    return [(caption, [first, *HEADERS], rows)] + paired_tables(record)


def verdict(ci95: list[float], a: str, b: str) -> str:
    """'A ahead' / 'B ahead' only when the paired interval of AUC(a) − AUC(b) excludes 0, else 'tied'."""
    lo, hi = ci95
    return f"{a} ahead" if lo > 0 else f"{b} ahead" if hi < 0 else "tied"


def paired_tables(record: dict) -> list[tuple[str, list[str], list[list[str]]]]:
    """With ``compare``: AUC(compare) − AUC(each other row) per seed with its paired interval and verdict."""
    paired = record.get("paired")
    if not isinstance(paired, dict) or "compare" not in paired:  # none, or another type's own pairing
        return []
    a = paired["compare"]
    rows = [[b, str(p["seed"]), f"{100 * p['diff']:+.1f}", _ci(p["ci95"]),
             verdict(p["ci95"], a, b)] for b, per_seed in paired["vs"].items() for p in per_seed]
    out = [(f"AUC({a}) − AUC(row), in points, with the paired stratified bootstrap 95% interval ({N_PAIRED:,} "
            "resamples, the same for both rows): 'ahead' only when the interval excludes 0.",
            ["row", "seed", "difference", "95% CI", "verdict"], rows)]
    for key in LOW_FPRS:  # stored since TPR differences were paired too; absent from older results
        cells = [[b, str(p["seed"]), f"{100 * p[key]['diff']:+.1f}", _ci(p[key]["ci95"]), verdict(p[key]["ci95"], a, b)]
                 for b, per_seed in paired["vs"].items() for p in per_seed if p.get(key)]
        if cells:
            fpr = key.removeprefix("tpr@").removesuffix("fpr").upper()
            out.append((f"TPR({a}) − TPR(row) at {fpr} FPR, in points of the members, on the same resamples as the "
                        "AUC: 'ahead' only when the interval excludes 0.",
                        ["row", "seed", "difference", "95% CI", "verdict"], cells))
    return out


def _ci(ci95: list[float]) -> str:
    return f"[{100 * ci95[0]:+.1f}, {100 * ci95[1]:+.1f}]"


register_experiment("mia", config=MIAConfig, run=run_mia_table, tables=lambda rec: rows_tables(rec, "attack"))
register_experiment("ablation", config=AblationConfig, run=run_ablation,
                    tables=lambda rec: rows_tables(rec, "variant"))
register_experiment("misaligned-ref", config=MisalignedConfig, run=run_misaligned,
                    tables=lambda rec: rows_tables(rec, "reference / attack"))
