"""Probe records in Python: probe a text set once, then score it with any attack and parameters, no forward pass.

:func:`probe_records` runs the probes a membership-inference run would run for the
selected attacks (the same probe cache, so a set ``lmaudit mia`` probed is read back)
and keeps each probe's statistics, grouped by probe request. :func:`score_records`
scores those statistics: an attack whose parameters ask for the same request (every
AR attack, whatever its ``k``; a DLM attack whose mask plan and budget are unchanged)
is scored from the stored values alone; one that needs another probe is an error that
says which.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from lmaudit.attacks import get_attack
from lmaudit.data.loaders import TextSet
from lmaudit.errors import LmauditError
from lmaudit.models.handle import ModelHandle
from lmaudit.runs.mia import RunConfig, chosen_attacks
from lmaudit.runs.mia_groups import Probing, check_requests, group_attacks, probe_group
from lmaudit.utils import cache_dir


@dataclass
class ProbeRecords:
    """The statistics the probes measured on one text set: ``stats`` maps each probe request to its records
    (:class:`~lmaudit.probes.records.ARStats` with the reference's and shadows' companions, or
    :class:`~lmaudit.probes.records.MaskedStats`), in the order of ``ids``."""

    kind: str  # the target's kind, "ar" or "dlm"
    target: dict  # the target's facts (path, fingerprint, ...)
    reference: dict | None
    ids: list[str]
    budget: int  # DLM: the masked forwards per sample the requests were built with
    attacks: list[str]  # the attacks probed for (what score_records scores by default)
    params: dict[str, dict]  # their parameters as probed
    stats: dict = field(repr=False)

    def __len__(self) -> int:
        return len(self.ids)

    def __repr__(self) -> str:
        probes = ", ".join(sorted({type(r).__name__ for r in self.stats}))
        ref = ", with a reference" if self.reference else ""
        return (f"<ProbeRecords of {self.target.get('path')} ({self.kind}): {len(self)} texts, {len(self.stats)} "
                f"probe(s) ({probes}){ref}; attacks {', '.join(self.attacks)}>")


def probe_records(target: ModelHandle, textset: TextSet, *, reference: ModelHandle | None = None, shadows=None,
                  config: RunConfig | None = None) -> ProbeRecords:
    """Probe ``textset`` for ``config.attacks`` (None: every attack of the target's kind that can run) and keep the
    statistics; see the module docstring."""
    config = config or RunConfig()
    chosen = chosen_attacks(config, target, reference, shadows)
    specs, params = chosen.specs, chosen.params
    ctx = Probing(target, reference, shadows, config, cache_dir() if config.use_cache else None, {})
    groups = group_attacks(specs, params, config.budget)
    check_requests(ctx, groups)
    stats = {}
    for request, group in groups.items():
        _, whole, _, _ = probe_group(ctx, request, group, textset)
        stats[request] = whole()
    return ProbeRecords(kind=target.kind, target=target.facts(), reference=None if reference is None else
                        reference.facts(), ids=[r.id for r in textset.records], budget=config.budget,
                        attacks=[s.name for s in specs], params=params, stats=stats)


def score_records(records: ProbeRecords, attacks: list[str] | None = None, *,
                  params: dict[str, dict] | None = None) -> dict[str, np.ndarray]:
    """{attack: (n,) scores, higher = more member-like} of ``attacks`` (None: those the records were probed for)
    with ``params`` over each attack's defaults, computed from the stored statistics alone."""
    params = params or {}
    names = list(attacks) if attacks is not None else list(records.attacks)
    unknown = set(params) - set(names)
    if unknown:
        raise LmauditError(f"params name attack(s) not scored: {', '.join(sorted(unknown))}",
                           hint="list them in attacks, or drop their params")
    out = {}
    for name in names:
        spec = get_attack(name, records.kind)
        p = {**spec.params, **params.get(name, {})}
        spec.check(p)
        request = spec.probe(p, records.budget)
        if request not in records.stats:
            raise LmauditError(f"attack '{name}' with {p} reads a probe these records do not hold ({request})",
                               hint=f"probe again for it: lmaudit.probe(model, texts, config=lmaudit.RunConfig("
                                    f"attacks=['{name}'], params={{'{name}': {params.get(name, {})}}}))")
        out[name] = spec(records.stats[request], **p)
    return out
