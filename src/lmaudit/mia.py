"""Membership inference run: probe once per model, score every attack, write results.

``OUT/results.json`` holds provenance, configuration and per-attack metrics;
``OUT/scores.parquet`` one row per sample (id, label, one column per attack).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from lmaudit import __version__
from lmaudit.attacks import get_attack, list_attacks
from lmaudit.data.loaders import Record, TextSet, check_overlap
from lmaudit.errors import LmauditError
from lmaudit.metrics import summarize
from lmaudit.models.fingerprint import tokenizer_fingerprint
from lmaudit.models.loading import LoadedModel
from lmaudit.probes.ar import ARProbeConfig
from lmaudit.progress import info
from lmaudit.utils import cache_dir, git_commit, package_versions, write_json_atomic


@dataclass
class RunConfig:
    """What a membership-inference run did, recorded in ``results.json``."""

    attacks: list[str] | None = None  # None: every attack of the model's kind that can run
    params: dict[str, dict] = field(default_factory=dict)  # per-attack parameter overrides
    seed: int = 0
    batch_size: int = 32
    max_length: int | None = None
    n_bootstrap: int = 1000
    use_cache: bool = True
    budget: int = 16  # DLM: masked forwards per model per sample for every attack


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

    def to_json(self) -> dict:
        return {
            "lmaudit_version": __version__,
            "git_commit": git_commit(),
            "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "packages": package_versions(),
            "config": asdict(self.config),
            "target": self.target,
            "reference": self.reference,
            "n_members": self.n_members,
            "n_nonmembers": self.n_nonmembers,
            "attacks": self.attacks,
            "timings_s": self.timings_s,
        }

    def write(self, out_dir: str | Path) -> Path:
        import pandas as pd

        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        write_json_atomic(out / "results.json", self.to_json())
        if self.examples:
            write_json_atomic(out / "examples.json", self.examples)
        frame = pd.DataFrame({"id": self.ids, "label": self.labels, **self.scores})
        tmp = out / ".scores.parquet.tmp"
        frame.to_parquet(tmp, index=False)
        tmp.replace(out / "scores.parquet")
        return out / "results.json"


def _select_attacks(names: list[str] | None, kind: str, has_reference: bool, has_shadows: bool = False):
    if names is None:
        specs = [s for s in list_attacks(kind)
                 if (has_reference or not s.needs_reference) and (has_shadows or not s.needs_shadows)]
        for what, skipped in (("--reference", [s.name for s in list_attacks(kind) if s.needs_reference and not has_reference]),
                              ("--shadows", [s.name for s in list_attacks(kind) if s.needs_shadows and not has_shadows])):
            if skipped:
                info(f"[dim]skipping {', '.join(skipped)} (needs {what})[/dim]")
        return specs
    specs = [get_attack(n, kind) for n in names]
    missing = [s.name for s in specs if s.needs_reference and not has_reference]
    if missing:
        raise LmauditError(f"attack(s) {', '.join(missing)} need a reference model", hint="pass --reference DIR")
    missing = [s.name for s in specs if s.needs_shadows and not has_shadows]
    if missing:
        raise LmauditError(f"attack(s) {', '.join(missing)} need shadow models", hint="pass --shadows DIR")
    return specs


def _score_shards(specs, params, n: int, shards, *, whole_stats, shadow_stats=None) -> dict[str, np.ndarray]:
    """Scores of every attack: per-sample attacks one shard at a time, the others on the whole set.

    ``shards`` yields ``((start, stop), stats, reference stats)``; ``whole_stats()``
    returns (stats, reference stats) of the whole set and is called only when an
    attack needs it. Peak memory thus follows the shard size, not the set size.
    """
    scores = {s.name: np.empty(n, dtype=np.float64) for s in specs}
    per_sample = [s for s in specs if s.per_sample]
    if per_sample:
        for (a, b), stats, ref_stats in shards:
            sub = None if shadow_stats is None else shadow_stats.take(np.arange(a, b))
            for spec in per_sample:
                scores[spec.name][a:b] = spec(stats, reference=ref_stats, shadows=sub if spec.needs_shadows else None,
                                              **params[spec.name])
    rest = [s for s in specs if not s.per_sample]
    if rest:
        stats, ref_stats = whole_stats()
        for spec in rest:
            scores[spec.name] = spec(stats, reference=ref_stats, shadows=shadow_stats if spec.needs_shadows else None,
                                     **params[spec.name])
    return scores


def _score_ar(target, reference, both, specs, params, config, cache, timings, n_members, shadows=None):
    from lmaudit.probes.ar import probe_ar_shards
    from lmaudit.probes.records import ARStats

    probe_cfg = ARProbeConfig(max_length=config.max_length, batch_size=config.batch_size)
    t0 = time.perf_counter()
    tar = probe_ar_shards(target.model, target.tokenizer, both, probe_cfg, model_fingerprint=target.fingerprint,
                          cache_dir=cache, description="probe target")
    timings["probe_target"] = time.perf_counter() - t0
    ref = None
    if reference is not None and any(s.needs_reference for s in specs):
        t0 = time.perf_counter()
        ref = probe_ar_shards(reference.model, reference.tokenizer, both, probe_cfg,
                              model_fingerprint=reference.fingerprint, cache_dir=cache, description="probe reference")
        timings["probe_reference"] = time.perf_counter() - t0
    shadow_stats = None
    if shadows is not None and any(s.needs_shadows for s in specs):
        from lmaudit.shadows import shadow_stats as compute_shadow_stats

        t0 = time.perf_counter()
        shadow_stats = compute_shadow_stats(shadows, both)
        timings["probe_shadows"] = time.perf_counter() - t0
    shards = ((bounds, tar.get(i), None if ref is None else ref.get(i)) for i, bounds in enumerate(tar.bounds))

    def whole():
        return ARStats.concat(tar.all()), None if ref is None else ARStats.concat(ref.all())

    t0 = time.perf_counter()
    scores = _score_shards(specs, params, len(both), shards, whole_stats=whole, shadow_stats=shadow_stats)
    timings["score"] = time.perf_counter() - t0
    forwards = {s.name: 1 + (len(shadows.paths) if s.needs_shadows else 0) for s in specs}
    return scores, forwards, {}


def _score_dlm(target, reference, both, specs, params, config, cache, timings, n_members, shadows=None):
    from lmaudit.probes.masked import MaskedStats, probe_masked_shards

    if reference is not None and reference.kind != "dlm":
        raise LmauditError(f"the reference '{reference.path}' is an AR model; a DLM target needs a DLM reference")
    if reference is not None and tokenizer_fingerprint(reference.tokenizer) != tokenizer_fingerprint(target.tokenizer):
        raise LmauditError(
            f"the reference '{reference.path}' uses another tokenizer than the target",
            hint="masked probes feed both models the same token ids: use a reference with the target's tokenizer",
        )
    plans: dict = {}
    for spec in specs:
        plans.setdefault(spec.plan(params[spec.name], config.budget), []).append(spec)
    scores, forwards, examples = {}, {}, {}
    fps = (target.fingerprint, None if reference is None else reference.fingerprint)
    for plan, group in plans.items():
        t0 = time.perf_counter()
        use_ref = reference is not None and any(s.needs_reference for s in group)

        def probe(textset, plan=plan, use_ref=use_ref):
            return probe_masked_shards(target.adapter, target.tokenizer, textset, plan,
                                       reference=reference.adapter if use_ref else None, seed=config.seed,
                                       batch_size=config.batch_size, fingerprints=fps, cache_dir=cache)

        n_patterns = np.zeros(len(both))

        def shards(probe=probe, n_patterns=n_patterns):
            for (a, b), stats in probe(both):
                n_patterns[a:b] = stats.n_patterns
                yield (a, b), stats, None

        def whole(probe=probe):
            return MaskedStats.concat([s for _, s in probe(both)]), None

        group_scores = _score_shards(group, params, len(both), shards(), whole_stats=whole)
        timings[f"probe_{plan.kind}"] = timings.get(f"probe_{plan.kind}", 0.0) + time.perf_counter() - t0
        for spec in group:
            scores[spec.name] = group_scores[spec.name]
            forwards[spec.name] = float(n_patterns.mean())
            if spec.name == "q_skew" and use_ref and 0 < n_members < len(both):
                examples["q_skew"] = _typical_deltas(both, scores["q_skew"], n_members, probe)
    return scores, forwards, examples


def _typical_deltas(both: TextSet, score: np.ndarray, n_members: int, probe) -> dict:
    """Δ values of the member and the non-member whose scores are the medians of their sets.

    The two records are probed again on their own (their masks depend only on their
    content, so their Δ values are those the scores were computed from).
    """
    from lmaudit.probes.masked import MaskedStats

    picks = {}
    for name, idx in (("member", np.arange(n_members)), ("nonmember", np.arange(n_members, len(both)))):
        picks[name] = int(idx[np.argsort(score[idx])[len(idx) // 2]])
    stats = MaskedStats.concat([s for _, s in probe(TextSet([both.records[i] for i in picks.values()],
                                                            source=both.source))])
    out = {}
    for row, (name, i) in enumerate(picks.items()):
        lo, hi = stats.offsets[row], stats.offsets[row + 1]
        out[name] = np.round(stats.logp[lo:hi].astype(np.float64) - stats.ref_logp[lo:hi], 5).tolist()
        out[f"{name}_score"] = float(score[i])
    return out


def run_mia(
    target: LoadedModel,
    members: TextSet,
    nonmembers: TextSet,
    *,
    reference: LoadedModel | None = None,
    config: RunConfig | None = None,
    shadows=None,
) -> MIAResult:
    """Score members and non-members with every selected attack.

    AR: one probe pass per model serves every attack. DLM: one masked probe per
    distinct mask plan (target and reference on identical masks), each attack
    spending ``config.budget`` forwards per model per sample.
    """
    config = config or RunConfig()
    specs = _select_attacks(config.attacks, target.kind, reference is not None, shadows is not None)
    unknown = set(config.params) - {s.name for s in specs}
    if unknown:
        raise LmauditError(f"parameters given for attack(s) not run: {', '.join(sorted(unknown))}")
    params = {s.name: {**s.params, **config.params.get(s.name, {})} for s in specs}
    check_overlap(members, nonmembers)
    both = TextSet(
        [Record(f"m:{r.id}", r.target, r.context) for r in members.records]
        + [Record(f"n:{r.id}", r.target, r.context) for r in nonmembers.records],
        source=f"{members.source} + {nonmembers.source}",
    )
    labels = np.r_[np.ones(len(members), dtype=np.int64), np.zeros(len(nonmembers), dtype=np.int64)]
    cache = cache_dir() if config.use_cache else None
    timings: dict[str, float] = {}
    score_fn = _score_dlm if target.kind == "dlm" else _score_ar
    scores, forwards, examples = score_fn(target, reference, both, specs, params, config, cache, timings, len(members),
                                          shadows=shadows)

    t0 = time.perf_counter()
    metrics = {}
    for spec in specs:
        metrics[spec.name] = {"params": params[spec.name], "forwards_per_sample": forwards[spec.name],
                              **summarize(labels, scores[spec.name], n_resamples=config.n_bootstrap, seed=config.seed)}
    timings["metrics"] = time.perf_counter() - t0
    return MIAResult(
        config=config,
        target={"path": target.path, "fingerprint": target.fingerprint, "kind": target.kind},
        reference=None if reference is None else {"path": reference.path, "fingerprint": reference.fingerprint},
        n_members=len(members),
        n_nonmembers=len(nonmembers),
        attacks=metrics,
        scores={s.name: scores[s.name] for s in specs},
        labels=labels,
        ids=[r.id for r in members.records] + [r.id for r in nonmembers.records],
        timings_s=timings,
        examples=examples,
    )


def score_set(target: LoadedModel, textset: TextSet, *, reference: LoadedModel | None = None,
              config: RunConfig | None = None, shadows=None) -> dict[str, np.ndarray]:
    """Attack scores of one unlabelled text set: {attack: (n,) scores, higher = more member-like}.

    The probes are the ones :func:`run_mia` uses (and share its cache).
    """
    config = config or RunConfig()
    specs = _select_attacks(config.attacks, target.kind, reference is not None, shadows is not None)
    params = {s.name: {**s.params, **config.params.get(s.name, {})} for s in specs}
    score_fn = _score_dlm if target.kind == "dlm" else _score_ar
    cache = cache_dir() if config.use_cache else None
    scores, _, _ = score_fn(target, reference, textset, specs, params, config, cache, {}, 0, shadows=shadows)
    return {s.name: np.asarray(scores[s.name], dtype=np.float64) for s in specs}


def results_table(result: MIAResult):
    """A rich table of the run's metrics, best AUC first."""
    from rich.table import Table

    kind = result.target.get("kind", "ar").upper()
    table = Table(title=f"Membership inference ({kind}): {result.n_members} members vs {result.n_nonmembers} non-members")
    for col in ("attack", "AUC", "95% CI", "TPR@10%FPR", "TPR@1%FPR", "TPR@0.1%FPR"):
        table.add_column(col, justify="left" if col == "attack" else "right")
    for name, m in sorted(result.attacks.items(), key=lambda kv: -kv[1]["auc"]):
        lo, hi = m["auc_ci95"]
        table.add_row(name, f"{m['auc']:.3f}", f"[{lo:.3f}, {hi:.3f}]", f"{m['tpr@10%fpr']:.1%}",
                      f"{m['tpr@1%fpr']:.1%}", f"{m['tpr@0.1%fpr']:.1%}")
    return table
