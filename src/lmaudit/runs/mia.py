"""Membership inference run: probe once per probe request, score every attack, write results.

``OUT/results.json`` holds provenance, configuration and per-attack metrics;
``OUT/scores.parquet`` one row per sample (id, label, one column per attack).
Attacks are grouped by the probe they declare (:mod:`lmaudit.probes.requests`):
AR attacks share one causal forward pass, DLM attacks one masked probe per
distinct mask plan; each group's records carry the reference and shadow
statistics its attacks read.
"""

from __future__ import annotations

import time
import warnings
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

import numpy as np
import pandas as pd

from lmaudit.attacks import get_attack, list_attacks
from lmaudit.attacks.recall import hold_out_prefix
from lmaudit.data.loaders import Record, TextSet
from lmaudit.data.overlap import check_sets, ngram_overlap
from lmaudit.errors import LmauditError
from lmaudit.metrics import summarize_attacks
from lmaudit.models.chat import chat_records, use_chat_template
from lmaudit.models.handle import ModelHandle
from lmaudit.models.lora import adapter_record
from lmaudit.probes.records import MaskedStats
from lmaudit.progress import info
from lmaudit.report.build import read_results, read_scores
from lmaudit.report.records import stored_columns
from lmaudit.report.summary import strongest_attack
from lmaudit.runs import peer_groups  # noqa: F401  (registers the gradient and neighbour probes)
from lmaudit.runs.common import provenance, write_results
from lmaudit.runs.mia_groups import Probing, check_requests, group_attacks, probe_group
from lmaudit.runs.mia_notes import degenerate_notes, long_text_counts, verdict_text
from lmaudit.runs.set_check import PRIOR, blind_baseline_scores, prior_check, set_check
from lmaudit.settings import boolean, check_settings, integer, one_of, seed_value, setting
from lmaudit.utils import cache_dir, stable_hash

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

    attacks: list[str] | None = None  # None: every attack of the model's kind that can run
    params: dict[str, dict] = field(default_factory=dict)  # per-attack parameter overrides
    seed: int = setting(0, check=seed_value())
    batch_size: int | None = setting(None, check=integer(1, optional=True))  # None: the model's token budget
    max_batch_tokens: int | None = setting(None, check=integer(1, optional=True))  # also cap a batch's padded tokens
    max_length: int | None = setting(None, check=integer(2, optional=True), flag="--max-tokens")  # below the context
    long_texts: str = setting("truncate", check=one_of(("truncate", "window")))  # window (AR): every token scored
    n_bootstrap: int = setting(1000, check=integer(0), flag="--bootstrap")
    use_cache: bool = True
    # DLM: masked forwards per model per sample for every attack
    budget: int = setting(16, check=integer(1, MAX_BUDGET, hint=budget_memory_hint))
    blind: bool = setting(True, check=boolean())  # model-free baselines: do the sets differ without the model?
    # with a reference: its own reference-free scores (it never saw the members: its AUC should be near 0.5)
    reference_prior: bool = setting(True, check=boolean())
    allow_overlap: bool = False  # score members and non-members that share more than a small share of texts
    chat_template: bool | None = None  # pairs in the target tokenizer's chat template (None: when it has one)

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
            "chat_template": self.chat_template,
            "set_check": self.set_check,
            **({"privleak": self.privleak} if self.privleak else {}),
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
                   privleak=res.get("privleak") or {}, held_out=res.get("held_out"),
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
        frame = pd.DataFrame({"id": self.ids, "label": self.labels, **({"digest": self.digests} if self.digests else {}),
                              **self.scores, **self.blind_scores,
                              **{PRIOR + n: s for n, s in self.prior_scores.items()}, **exposure})
        return write_results(out_dir, self.payload(), kind=kind, tables={"scores.parquet": frame},
                             extra_json={"examples.json": self.examples} if self.examples else None,
                             files=files, report=report)


def text_digests(*sets: TextSet) -> list[str]:
    """One digest per record of ``sets`` in order, of its content (context and target) alone, never its id: two runs
    scored the same texts when their digests (with the labels) match."""
    return [stable_hash("text", r.context, r.target) for ts in sets for r in ts.records]


def _select_attacks(names: list[str] | None, kind: str, has_reference: bool, has_shadows: bool = False,
                    params: dict | None = None):
    if names is None:
        given = set(params or {})
        specs = [s for s in list_attacks(kind)
                 if (has_reference or not s.needs_reference) and (has_shadows or not s.needs_shadows)
                 and (not s.opt_in or s.name in given)]
        for s in list_attacks(kind):
            if s.opt_in and s.name not in given:
                info(f"[dim]skipping {s.name} (opt-in: {s.opt_in}; name it in the attacks to run it)[/dim]")
        for what, skipped in (("--reference", [s.name for s in list_attacks(kind) if s.needs_reference and not has_reference]),
                              ("--shadows", [s.name for s in list_attacks(kind) if s.needs_shadows and not has_shadows])):
            if skipped:
                info(f"[dim]skipping {', '.join(skipped)} (needs {what})[/dim]")
        return specs
    specs = [get_attack(n, kind) for n in names]
    missing = [s.name for s in specs if s.needs_reference and not has_reference]
    if missing:
        raise LmauditError(f"attack(s) {', '.join(missing)} need a reference model", hint="pass {reference} DIR",
                           options=("reference",))
    missing = [s.name for s in specs if s.needs_shadows and not has_shadows]
    if missing:
        raise LmauditError(f"attack(s) {', '.join(missing)} need shadow models", hint="pass {shadows} DIR",
                           options=("shadows",))
    return specs


def _score_shards(specs, params, n: int, shards, *, whole, prior=()) -> tuple[dict, dict]:
    """Scores of every attack: per-sample attacks one shard at a time, the others on the whole set; and of every
    attack of ``prior`` on the reference's own statistics (the records' :meth:`as_reference`).

    ``shards`` yields ``((start, stop), records)``; ``whole()`` returns the records of
    the whole set and is called only when an attack needs it. Peak memory thus
    follows the shard size, not the set size.
    """
    scores = {s.name: np.empty(n, dtype=np.float64) for s in specs}
    own = {s.name: np.empty(n, dtype=np.float64) for s in prior}
    per_sample = [s for s in specs if s.per_sample]
    if per_sample or any(s.per_sample for s in prior):
        for (a, b), records in shards:
            for spec in per_sample:
                scores[spec.name][a:b] = spec(records, **params[spec.name])
            for spec in (s for s in prior if s.per_sample):
                own[spec.name][a:b] = spec(records.as_reference(), **params[spec.name])
    rest = [s for s in specs if not s.per_sample]
    if rest or any(not s.per_sample for s in prior):
        records = whole()
        for spec in rest:
            scores[spec.name] = spec(records, **params[spec.name])
        for spec in (s for s in prior if not s.per_sample):
            own[spec.name] = spec(records.as_reference(), **params[spec.name])
    return scores, own


def _score(ctx: Probing, specs, params, textset: TextSet, n_members: int):
    """Scores, forwards per sample and report examples of every attack, one probe pass per distinct request, and
    with ``ctx.prior`` the reference's own scores under every reference-free attack (from the same pass: the
    reference is probed beside the target, an AR reference with its own tokenisation, a DLM one on the same
    masks)."""
    groups = group_attacks(specs, params, ctx.config.budget)
    check_requests(ctx, groups)
    scores, forwards, examples, own = {}, {}, {}, {}
    for request, group in groups.items():
        t0 = time.perf_counter()
        shards, whole, fwd, probe = probe_group(ctx, request, group, textset)
        prior = [s for s in group if not s.needs_reference and not s.needs_shadows] if ctx.prior else []
        group_scores, group_own = _score_shards(group, params, len(textset), shards, whole=whole, prior=prior)
        ctx.timings["score"] = ctx.timings.get("score", 0.0) + time.perf_counter() - t0
        scores.update(group_scores)
        own.update(group_own)
        forwards.update(fwd())
        for spec in group:
            if spec.example is not None and probe is not None and (not spec.needs_reference or ctx.reference) \
                    and 0 < n_members < len(textset):
                examples[spec.name] = _typical_examples(spec, textset, scores[spec.name], n_members, probe)
    return scores, forwards, examples, own


def _typical_examples(spec, both: TextSet, score: np.ndarray, n_members: int, probe) -> dict:
    """What ``spec`` sees (its ``example`` values) for the member and the non-member whose scores are the medians.

    The two records are probed again on their own (their masks depend only on their
    content, so their values are those the scores were computed from).
    """
    picks = {}
    for name, idx in (("member", np.arange(n_members)), ("nonmember", np.arange(n_members, len(both)))):
        picks[name] = int(idx[np.argsort(score[idx])[len(idx) // 2]])
    stats = MaskedStats.concat([s for _, s in probe(TextSet([both.records[i] for i in picks.values()],
                                                            source=both.source))])
    out = {}
    for row, (name, i) in enumerate(picks.items()):
        out[name] = np.round(spec.example(stats.take([row])), 5).tolist()
        out[f"{name}_score"] = float(score[i])
    out["values"] = (spec.example.__doc__ or "values").strip().split("\n")[0].rstrip(".")
    return out


def run_mia(
    target: ModelHandle,
    members: TextSet,
    nonmembers: TextSet,
    *,
    reference: ModelHandle | None = None,
    config: RunConfig | None = None,
    shadows=None,
) -> MIAResult:
    """Score members and non-members with every selected attack.

    AR: one probe pass per model serves every attack. DLM: one masked probe per
    distinct mask plan (target and reference on identical masks), each attack
    spending ``config.budget`` forwards per model per sample.
    """
    config = config or RunConfig()
    specs = _select_attacks(config.attacks, target.kind, reference is not None, shadows is not None, config.params)
    unknown = set(config.params) - {s.name for s in specs}
    if unknown:
        raise LmauditError(f"parameters given for attack(s) not run: {', '.join(sorted(unknown))}")
    params = {s.name: {**s.params, **config.params.get(s.name, {})} for s in specs}
    held_out = None
    if "recall" in params:  # its prefix: texts known not to be members, held out of every attack's scoring
        nonmembers, held_out = hold_out_prefix(params["recall"], nonmembers, config.seed)
        if held_out:
            info(f"recall: {held_out['n']} non-members held out as its prefix (not scored by any attack)")
    overlap = check_sets({"members": members, "nonmembers": nonmembers}, [("members", "nonmembers")],
                         allow_overlap=config.allow_overlap)
    overlap["ngrams"] = ngram_overlap(members, nonmembers)  # near-copies: shared runs of words, not whole texts
    given = (members, nonmembers)  # as the user gave them: what the blind baselines read (and the digests)
    chat = use_chat_template(target.tokenizer, TextSet(members.records + nonmembers.records), config.chat_template)
    if chat:  # both sets alike, so that the template itself never tells them apart
        members, nonmembers = chat_records(members, target.tokenizer), chat_records(nonmembers, target.tokenizer)
    both = TextSet(
        [Record(f"m:{r.id}", r.target, r.context) for r in members.records]
        + [Record(f"n:{r.id}", r.target, r.context) for r in nonmembers.records],
        source=f"{members.source} + {nonmembers.source}",
    )
    labels = np.r_[np.ones(len(members), dtype=np.int64), np.zeros(len(nonmembers), dtype=np.int64)]
    timings: dict[str, float] = {}
    long_texts = long_text_counts(target, {"members": members, "nonmembers": nonmembers}, config)
    ctx = Probing(target, reference, shadows, config, cache_dir() if config.use_cache else None, timings,
                  prior=reference is not None and config.reference_prior)
    with warnings.catch_warnings():  # said once for the whole run (above), not once per shard
        warnings.filterwarnings("ignore", message=".*exceed the model context.*")
        scores, forwards, examples, prior = _score(ctx, specs, params, both, len(members))

    blind, blind_p, skipped = (blind_baseline_scores(*given, labels, seed=config.seed, timings=timings)
                               if config.blind else ({}, {}, "blind = False"))
    t0 = time.perf_counter()
    metrics = {}
    # one set of stratified resamples for every attack and blind baseline: AUC and TPR intervals, and paired
    # differences to the best attack and to the best blind baseline
    summary = summarize_attacks(labels, {**{s.name: scores[s.name] for s in specs}, **blind,
                                         **{PRIOR + n: v for n, v in prior.items()}},
                                n_resamples=config.n_bootstrap, seed=config.seed, model_free=tuple(blind),
                                priors={n: PRIOR + n for n in prior})
    check = set_check(summary, blind_p, skipped)
    if prior:
        # attacks calibrated per text by models that never saw it (the reference, OUT shadows)
        check["reference"] = prior_check(summary, prior, labels,
                                         [s.name for s in specs if s.needs_reference or s.needs_shadows])
    for spec in specs:
        metrics[spec.name] = {"params": params[spec.name], "forwards_per_sample": forwards[spec.name],
                              **summary[spec.name]}
        notes = ctx.notes.get(spec.name, []) + degenerate_notes(spec.name, scores[spec.name], len(members),
                                                                 len(nonmembers))
        if notes:
            metrics[spec.name]["notes"] = notes
    timings["metrics"] = time.perf_counter() - t0
    return MIAResult(
        config=config,
        target={**target.facts(), **adapter_record(target)},
        reference=None if reference is None else {**reference.facts(), **adapter_record(reference)},
        n_members=len(members),
        n_nonmembers=len(nonmembers),
        attacks=metrics,
        scores={s.name: scores[s.name] for s in specs},
        labels=labels,
        ids=[r.id for r in members.records] + [r.id for r in nonmembers.records],
        timings_s=timings,
        examples=examples,
        long_texts=long_texts,
        overlap=overlap,
        chat_template=chat,
        set_check=check,
        blind_scores=blind,
        prior_scores=prior,
        held_out=held_out,
        digests=text_digests(*given),
    )


def score_set(target: ModelHandle, textset: TextSet, *, reference: ModelHandle | None = None,
              config: RunConfig | None = None, shadows=None) -> dict[str, np.ndarray]:
    """Attack scores of one unlabelled text set: {attack: (n,) scores, higher = more member-like}.

    The probes are the ones :func:`run_mia` uses (and share its cache).
    """
    config = config or RunConfig()
    specs = _select_attacks(config.attacks, target.kind, reference is not None, shadows is not None, config.params)
    params = {s.name: {**s.params, **config.params.get(s.name, {})} for s in specs}
    ctx = Probing(target, reference, shadows, config, cache_dir() if config.use_cache else None, {})
    scores, _, _, _ = _score(ctx, specs, params, textset, 0)
    return {s.name: np.asarray(scores[s.name], dtype=np.float64) for s in specs}
