"""Probe groups of the white-box and perturbation peers of MIMIR's attack list: the gradient probe (GradNorm) and
the neighbour probe (the neighbourhood attack), registered as probe kinds beside those of
:mod:`lmaudit.runs.mia_groups`."""

from __future__ import annotations

import time

import numpy as np

from lmaudit.data.loaders import TextSet
from lmaudit.probes.gradients import describe_subset, probe_gradients
from lmaudit.probes.records import GradientStats
from lmaudit.probes.requests import GradientRequest
from lmaudit.progress import info
from lmaudit.runs.mia_groups import Probing, register_probe, truncated_only


@register_probe(GradientRequest, check=truncated_only("gradnorm", "each text's loss"))
def gradient_group(ctx: Probing, request: GradientRequest, group, textset: TextSet):
    """(shard iterator, whole-set function, forwards per sample, None) of the gradient probe (the reference's too,
    when its own scores are asked for). What is differentiated goes into the run's notes."""
    models = {"target": ctx.target} | ({"reference": ctx.reference} if ctx.reference is not None and ctx.prior else {})
    sharded = {}
    for role, handle in models.items():
        what = describe_subset(handle.model, request.subset)
        said = (f"differentiates the {role}'s {what['parameters']} parameters: {what['tensors']} tensors, "
                f"{what['values']:,} values ({what['frozen_in_model']} of the tensors frozen in the model, "
                "differentiated anyway and left as they were)")
        info(f"gradnorm {said}")
        for spec in group:
            ctx.notes.setdefault(spec.name, []).append(said[0].upper() + said[1:] + ".")
        t0 = time.perf_counter()
        sharded[role] = probe_gradients(handle, textset, request.subset, max_length=ctx.config.max_length,
                                        cache_dir=ctx.cache, description=f"gradients ({role})")
        ctx.timings[f"probe_gradients_{role}"] = time.perf_counter() - t0

    def stats(i: int | None) -> GradientStats:
        part = {role: (np.concatenate([r.array for r in s.all()]) if i is None else s.get(i).array)
                for role, s in sharded.items()}
        ref = GradientStats(part["reference"]) if "reference" in part else None
        return GradientStats(part["target"], ref)

    def shards():
        for i, bounds in enumerate(sharded["target"].bounds):
            yield bounds, stats(i)

    forwards = {s.name: 1 for s in group}  # one forward and one backward pass per text
    return shards(), lambda: stats(None), lambda: forwards, None
