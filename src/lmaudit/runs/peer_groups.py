"""Probe groups of the white-box and perturbation peers of MIMIR's attack list: the gradient probe (GradNorm) and
the neighbour probe (the neighbourhood attack), registered as probe kinds beside those of
:mod:`lmaudit.runs.mia_groups`."""

from __future__ import annotations

import time
from dataclasses import replace

import numpy as np

from lmaudit.data.loaders import TextSet
from lmaudit.models.build import masked_model
from lmaudit.models.fingerprint import tokenizer_fingerprint
from lmaudit.probes.ar import ARProbeConfig
from lmaudit.probes.gradients import describe_subset, probe_gradients
from lmaudit.probes.neighbour_ar import neighbour_shards, with_texts
from lmaudit.probes.neighbours import NeighbourSettings, make_neighbours, neighbour_set
from lmaudit.probes.records import ARStats, GradientStats, NeighbourStats
from lmaudit.probes.requests import GradientRequest, NeighbourRequest
from lmaudit.runs.mia_groups import Probing, register_probe, truncated_only

SUBSET_WORDS = {"all": "every parameter", "embeddings": "the input embedding", "adapter": "the adapter (LoRA) weights"}


@register_probe(GradientRequest, check=truncated_only("gradnorm", "each text's loss"))
def gradient_group(ctx: Probing, request: GradientRequest, group, textset: TextSet):
    """(shard iterator, whole-set function, forwards per sample, None) of the gradient probe (the reference's too,
    when its own scores are asked for). What is differentiated goes into the run's notes."""
    models = {"target": ctx.target} | ({"reference": ctx.reference} if ctx.reference is not None and ctx.prior else {})
    sharded = {}
    for role, handle in models.items():
        what = describe_subset(handle.model, request.subset)
        said = (f"GradNorm differentiates {SUBSET_WORDS.get(what['parameters'], what['parameters'])} of the {role}: "
                f"{what['tensors']} tensors, {what['values']:,} values ({what['frozen_in_model']} of the tensors "
                "frozen in the model, differentiated anyway and left as they were).")
        ctx.note(group, said)
        t0 = time.perf_counter()
        sharded[role] = probe_gradients(handle, textset, request.subset, max_length=ctx.config.max_length,
                                        cache_dir=ctx.cache, description=f"gradients ({role})")
        ctx.timings[f"probe_gradients_{role}"] = time.perf_counter() - t0

    def stats(i: int | None) -> GradientStats:
        part = {role: GradientStats.concat(s.all()) if i is None else s.get(i) for role, s in sharded.items()}
        return replace(part["target"], reference=part.get("reference"))

    def shards():
        for i, bounds in enumerate(sharded["target"].bounds):
            yield bounds, stats(i)

    forwards = {s.name: 1 for s in group}  # one forward and one backward pass per text
    return shards(), lambda: stats(None), lambda: forwards, None


def _neighbour_pass(ctx: Probing, group, neighbours: TextSet):
    """The whole-set function of the neighbours' AR pass (the reference's too, when it is probed), each neighbour
    continuing from its text's keys and values (:mod:`lmaudit.probes.neighbour_ar`); the texts among them
    (:func:`~lmaudit.probes.neighbour_ar.with_texts`) run whole."""
    config = ARProbeConfig(max_length=ctx.config.max_length, batch_size=ctx.config.batch_size,
                           max_batch_tokens=ctx.config.max_batch_tokens, long_texts=ctx.config.long_texts)
    models = {"target": ctx.target}
    if ctx.reference is not None and (ctx.prior or any(s.needs_reference for s in group)):
        models["reference"] = ctx.reference
    sharded = {}
    for role, handle in models.items():
        t0 = time.perf_counter()
        sharded[role] = neighbour_shards(handle, neighbours, config, cache_dir=ctx.cache,
                                         description=f"probe {role}: neighbours")
        ctx.timings[f"probe_neighbours_{role}"] = time.perf_counter() - t0

    def whole() -> ARStats:
        ref = sharded.get("reference")
        return ARStats.concat(sharded["target"].all()).with_companions(
            reference=None if ref is None else ARStats.concat(ref.all()))

    return whole


@register_probe(NeighbourRequest, check=truncated_only("neighbourhood", "each text and its neighbours"))
def neighbour_group(ctx: Probing, request: NeighbourRequest, group, textset: TextSet):
    """(whole set as one shard, whole-set function, forwards per sample, None): the AR pass of the texts and of
    their neighbours (target's, and the reference's when it is probed); a neighbour runs from where it first
    differs from its text, on its text's keys and values (:mod:`lmaudit.probes.neighbour_ar`: the statistics of
    scoring it whole). The neighbours and the masked forwards they cost go into the run's notes; forwards per
    sample count the texts scored, 1 + n."""
    mask = masked_model(request.model)
    t0 = time.perf_counter()
    sharded = make_neighbours(mask, textset, NeighbourSettings(request.n, request.fraction, request.top),
                              cache_dir=ctx.cache)
    neighbours, owner, masked, windowed = neighbour_set(textset, sharded)
    ctx.timings["neighbours"] = time.perf_counter() - t0
    # the texts' own pass is the one the neighbours continue from: one probe, the texts run whole in it (not again
    # in a plain pass; an attack that reads the plain pass beside this one keeps its own, so its scores never
    # depend on which attacks ran with it)
    probed, texts_at, neighbours_at = with_texts(textset, neighbours, owner)
    both = _neighbour_pass(ctx, group, probed)
    counts = np.bincount(owner, minlength=len(textset))
    same = tokenizer_fingerprint(mask.tokenizer) == tokenizer_fingerprint(ctx.target.tokenizer)
    ctx.note(group, f"Neighbours from {mask.path} ({'the' if same else 'another'} tokenizer {'as' if same else 'than'} "
                    f"the target's; they are scored as text): {counts.mean():.1f} per text, made with "
                    f"{masked.mean():.1f} masked forwards of it per text"
                    + (f"; {windowed} text(s) longer than its context were perturbed within their first "
                       f"{mask.adapter.context_length} tokens." if windowed else "."))

    def whole() -> NeighbourStats:
        stats = both()
        p, q = stats.take(texts_at), stats.take(neighbours_at)
        ref = None if p.reference is None else NeighbourStats(p.reference, q.reference, owner)
        return NeighbourStats(p, q, owner, ref)

    def shards():
        yield (0, len(textset)), whole()

    forwards = {s.name: 1 + float(counts.mean()) for s in group}
    return shards(), whole, lambda: forwards, None
