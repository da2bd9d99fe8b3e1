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

import numpy as np

from lmaudit.attacks.recall import hold_out_prefix
from lmaudit.attacks.selection import Selection, select_attacks
from lmaudit.data.given import labelled_set
from lmaudit.data.loaders import TextSet
from lmaudit.data.overlap import check_sets, ngram_overlap
from lmaudit.metrics import summarize_attacks
from lmaudit.models.chat import chat_records, use_chat_template
from lmaudit.models.handle import ModelHandle
from lmaudit.probes.records import MaskedStats
from lmaudit.probes.tokenize import long_text_counts
from lmaudit.progress import info
from lmaudit.report.build import mia_report
from lmaudit.runs import peer_groups  # noqa: F401  (registers the gradient and neighbour probes)
from lmaudit.runs.common import Job, register_job
from lmaudit.runs.mia_groups import Probing, check_requests, group_attacks, probe_group
from lmaudit.runs.mia_notes import degenerate_notes
from lmaudit.runs.mia_result import MIAResult, RunConfig, text_digests
from lmaudit.runs.set_check import PRIOR, blind_baseline_scores, prior_check, set_check
from lmaudit.utils import cache_dir


def chosen_attacks(config: RunConfig, target: ModelHandle, reference: ModelHandle | None, shadows) -> Selection:
    """The attacks ``config`` names (or every default one that can run) on ``target``, with their parameters."""
    return select_attacks(config.attacks, target.kind, access=target.access, has_reference=reference is not None,
                          has_shadows=shadows is not None, params=config.params)


def _score_shards(specs, params, n: int, shards, *, whole, prior=()) -> tuple[dict, dict, np.ndarray]:
    """Scores of every attack: per-sample attacks one shard at a time, the others on the whole set; of every
    attack of ``prior`` on the reference's own statistics (the records' :meth:`as_reference`); and each text's
    tokens before any cut, as the records carry them.

    ``shards`` yields ``((start, stop), records)``; ``whole()`` returns the records of
    the whole set and is called only when an attack needs it. Peak memory thus
    follows the shard size, not the set size.
    """
    scores = {s.name: np.empty(n, dtype=np.float64) for s in specs}
    own = {s.name: np.empty(n, dtype=np.float64) for s in prior}
    n_tokens = np.empty(n, dtype=np.int64)
    per_sample = [s for s in specs if s.per_sample]
    if per_sample or any(s.per_sample for s in prior):
        for (a, b), records in shards:
            n_tokens[a:b] = records.n_tokens
            for spec in per_sample:
                scores[spec.name][a:b] = spec(records, **params[spec.name])
            for spec in (s for s in prior if s.per_sample):
                own[spec.name][a:b] = spec(records.as_reference(), **params[spec.name])
    rest = [s for s in specs if not s.per_sample]
    if rest or any(not s.per_sample for s in prior):
        records = whole()
        n_tokens[:] = records.n_tokens
        for spec in rest:
            scores[spec.name] = spec(records, **params[spec.name])
        for spec in (s for s in prior if not s.per_sample):
            own[spec.name] = spec(records.as_reference(), **params[spec.name])
    return scores, own, n_tokens


def _score(ctx: Probing, specs, params, textset: TextSet, n_members: int):
    """Scores, forwards per sample and report examples of every attack, one probe pass per distinct request; with
    ``ctx.prior`` the reference's own scores under every reference-free attack (from the same pass: the
    reference is probed beside the target, an AR reference with its own tokenisation, a DLM one on the same
    masks); and each text's tokens before any cut, from the probes' records (every group tokenises as the target
    does, so the first group's)."""
    groups = group_attacks(specs, params, ctx.config.budget)
    check_requests(ctx, groups)
    scores, forwards, examples, own, n_tokens = {}, {}, {}, {}, None
    for request, group in groups.items():
        t0 = time.perf_counter()
        shards, whole, fwd, probe = probe_group(ctx, request, group, textset)
        prior = [s for s in group if not s.needs_reference and not s.needs_shadows] if ctx.prior else []
        group_scores, group_own, tokens = _score_shards(group, params, len(textset), shards, whole=whole, prior=prior)
        n_tokens = tokens if n_tokens is None else n_tokens
        ctx.timings["score"] = ctx.timings.get("score", 0.0) + time.perf_counter() - t0
        scores.update(group_scores)
        own.update(group_own)
        forwards.update(fwd())
        for spec in group:
            shown = spec.example is not None and probe is not None and (not spec.needs_reference or ctx.reference)
            if shown and 0 < n_members < len(textset):
                examples[spec.name] = _typical_examples(spec, textset, scores[spec.name], n_members, probe)
    return scores, forwards, examples, own, n_tokens


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
    chosen = chosen_attacks(config, target, reference, shadows)
    specs, params = chosen.specs, chosen.params
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
    both = labelled_set(members, nonmembers)
    labels = np.r_[np.ones(len(members), dtype=np.int64), np.zeros(len(nonmembers), dtype=np.int64)]
    timings: dict[str, float] = {}
    ctx = Probing(target, reference, shadows, config, cache_dir() if config.use_cache else None, timings,
                  prior=reference is not None and config.reference_prior)
    with warnings.catch_warnings():  # said once for the whole run (below), not once per shard
        warnings.filterwarnings("ignore", message=".*exceed the model context.*")
        scores, forwards, examples, prior, n_tokens = _score(ctx, specs, params, both, len(members))
    long_texts = long_text_counts(target, n_tokens, len(members), config)  # from the probes: no tokenising again

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
        if spec.name in chosen.approximate:
            notes.append(f"approximate: the mean and spread of log p over the vocabulary come from the top "
                         f"{target.adapter.top_k} log-probabilities the server returned, the mass they leave spread "
                         "evenly over the other tokens")
        if notes:
            metrics[spec.name]["notes"] = notes
    timings["metrics"] = time.perf_counter() - t0
    return MIAResult(
        config=config,
        target=target.facts(),
        reference=None if reference is None else reference.facts(),
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
        skipped=chosen.skipped,
    )


def score_set(target: ModelHandle, textset: TextSet, *, reference: ModelHandle | None = None,
              config: RunConfig | None = None, shadows=None) -> dict[str, np.ndarray]:
    """Attack scores of one unlabelled text set: {attack: (n,) scores, higher = more member-like}.

    The probes are the ones :func:`run_mia` uses (and share its cache).
    """
    config = config or RunConfig()
    chosen = chosen_attacks(config, target, reference, shadows)
    specs, params = chosen.specs, chosen.params
    ctx = Probing(target, reference, shadows, config, cache_dir() if config.use_cache else None, {})
    scores, _, _, _, _ = _score(ctx, specs, params, textset, 0)
    return {s.name: np.asarray(scores[s.name], dtype=np.float64) for s in specs}


JOB = register_job(Job("mia", "mia", "mia", MIAResult, run_mia, RunConfig, mia_report, also=("demo",)))  # the demo's
# AR part is a membership run, written as ``demo`` (lmaudit.experiments.demo)
