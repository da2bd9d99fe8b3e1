"""The probe groups of a membership-inference run: the AR probe, or one masked probe per mask plan, with the
reference and shadow statistics its attacks read (:func:`lmaudit.runs.mia.run_mia` scores them).

Probe kinds are a registry: a request's type maps to its group function (and to what it checks of the models
before any probe runs), as an attack's name maps to its implementation. A new probe kind is a request type, its
group function registered with :func:`register_probe`, and its test.

The models travel as their handles, whole: a group hands ``ctx.target`` (and ``ctx.reference``) to the probe,
which asks the handle's adapter how to run it; nothing here takes a handle apart or asks what kind it is.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from lmaudit.attacks.recall import warn_scored_shots
from lmaudit.data.loaders import Record, TextSet
from lmaudit.errors import DataError, LmauditError, warn
from lmaudit.models.fingerprint import tokenizer_fingerprint
from lmaudit.models.handle import ModelHandle
from lmaudit.models.shadows import ShadowSet
from lmaudit.probes.ar import ARProbeConfig, probe_ar_shards
from lmaudit.probes.frequencies import smoothed, token_counts
from lmaudit.probes.masked import probe_masked_shards
from lmaudit.probes.masks import MaskPlan
from lmaudit.probes.records import ARStats, MaskedStats, PrefixedStats, SampleStats, TokenStats
from lmaudit.probes.requests import AR_PROBE, ARRequest, FrequencyRequest, PrefixRequest, SampleRequest
from lmaudit.probes.samples import sample_shards
from lmaudit.probes.shadows import shadow_stats as compute_shadow_stats
from lmaudit.probes.tokenize import tokenize_records
from lmaudit.progress import info
from lmaudit.runs.mia_result import RunConfig


@dataclass
class Probing:
    """Everything a probe group needs: the models, the set, the run's settings and its timings."""

    target: ModelHandle
    reference: ModelHandle | None
    shadows: ShadowSet | None
    config: RunConfig  # batch size, token limit, long texts, seed
    cache: Path | None
    timings: dict[str, float]
    prior: bool = False  # also probe the reference for every group: its own scores under reference-free attacks
    notes: dict[str, list[str]] = field(default_factory=dict)  # what a probe says of an attack's scores
    passes: dict = field(default_factory=dict, repr=False)  # the AR passes made in this run (:meth:`once`)

    def once(self, what: str, textset: TextSet, settings, compute: Callable):
        """``compute()`` the first time ``what`` is asked of this very ``textset`` with these ``settings``, the same
        result after that: groups that read the same pass (the plain pass of ReCaLL, DC-PDD or a peer attack beside
        the shared AR probe) share it, with or without a cache. Its time counts once, under ``probe_{what}``."""
        key = (what, id(textset), settings)
        if key not in self.passes:
            t0 = time.perf_counter()
            self.passes[key] = (textset, compute())  # the set is kept: its id names no other set while cached here
            self.timings[f"probe_{what}"] = self.timings.get(f"probe_{what}", 0.0) + time.perf_counter() - t0
        return self.passes[key][1]

    def note(self, group, text: str) -> None:
        """Say ``text`` now and keep it among the notes of every attack of ``group`` (its results' notes)."""
        info(text)
        for spec in group:
            self.notes.setdefault(spec.name, []).append(text)


@dataclass(frozen=True)
class ProbeKind:
    """How the probe of one request type runs: ``group(ctx, request, attacks, textset)`` returns (shard iterator,
    whole-set function, forwards per sample, probe or None); ``check(ctx)`` runs before any probe."""

    group: Callable
    check: Callable[[Probing], None] | None = None


PROBE_KINDS: dict[type, ProbeKind] = {}


def register_probe(request_type: type, *, check: Callable[[Probing], None] | None = None):
    """Register the decorated group function as the probe of ``request_type`` requests."""
    def register(group: Callable) -> Callable:
        PROBE_KINDS[request_type] = ProbeKind(group, check)
        return group
    return register


def probe_kind(request) -> ProbeKind:
    """The registered probe of ``request``'s type (an unregistered type is an error naming it)."""
    kind = PROBE_KINDS.get(type(request))
    if kind is None:
        raise LmauditError(f"no probe is registered for {type(request).__name__} requests",
                           hint=f"register one with register_probe; known: "
                                f"{', '.join(t.__name__ for t in PROBE_KINDS)}")
    return kind


@register_probe(ARRequest)
def ar_group(ctx: Probing, request: ARRequest, group, textset: TextSet, *, reuse_prefix: bool = False):
    """(shard iterator, whole-set function, forwards per sample, None) of the AR probe for ``group`` (``reuse_prefix``:
    the texts share a prefix, computed once per shard)."""
    probe_cfg = ARProbeConfig(max_length=ctx.config.max_length, batch_size=ctx.config.batch_size,
                              max_batch_tokens=ctx.config.max_batch_tokens, long_texts=ctx.config.long_texts,
                              reuse_prefix=reuse_prefix)
    tar = ctx.once("target", textset, probe_cfg, lambda: probe_ar_shards(
        ctx.target, textset, probe_cfg, cache_dir=ctx.cache, description="probe target"))
    ref = None
    if ctx.reference is not None and (ctx.prior or any(s.needs_reference for s in group)):
        ref = ctx.once("reference", textset, probe_cfg, lambda: probe_ar_shards(
            ctx.reference, textset, probe_cfg, cache_dir=ctx.cache, description="probe reference"))
    shadow = None
    if ctx.shadows is not None and any(s.needs_shadows for s in group):
        shadow = ctx.once("shadows", textset, None, lambda: compute_shadow_stats(ctx.shadows, textset))

    def shards():
        for i, (a, b) in enumerate(tar.bounds):
            yield (a, b), tar.get(i).with_companions(
                reference=None if ref is None else ref.get(i),
                shadows=None if shadow is None else shadow.take(np.arange(a, b)))

    def whole():
        return ARStats.concat(tar.all()).with_companions(
            reference=None if ref is None else ARStats.concat(ref.all()), shadows=shadow)

    forwards = {s.name: 1 + (len(ctx.shadows.paths) if s.needs_shadows else 0) for s in group}
    return shards(), whole, lambda: forwards, None


SHOT_SEPARATOR = "\n\n"


MIN_PREFIX_TOKENS = 16  # the shortest cut of a shot that still conditions the text on something


def _prefixed(textset: TextSet, prefix: str, what: str) -> TextSet:
    return TextSet([Record(r.id, r.target, prefix + r.context) for r in textset.records],
                   source=f"{textset.source} after {what}")


def _longest(tokenizer, textset: TextSet) -> int:
    return max(len(ids) for ids in tokenize_records(tokenizer, textset, max_length=sys.maxsize).ids)


def fit_shots(tokenizer, shots: tuple[str, ...], textset: TextSet, limit: int) -> tuple[TextSet, int, int | None]:
    """(the records with the prefix before them, shots kept, tokens the last shot was cut to or None): the most of
    the last shots with which every prefixed record, tokenised as the AR probe tokenises it, fits in ``limit``
    tokens (as ReCaLL's authors drop the shots that do not fit); when not even the last one fits, its end, cut to
    the room the longest record leaves. Less room than :data:`MIN_PREFIX_TOKENS` is an error."""
    for kept in range(len(shots), 0, -1):
        prefixed = _prefixed(textset, "".join(shot + SHOT_SEPARATOR for shot in shots[-kept:]), f"{kept} shot(s)")
        if _longest(tokenizer, prefixed) <= limit:
            return prefixed, kept, None
    alone = _longest(tokenizer, textset)
    ids = tokenizer(shots[-1], add_special_tokens=False)["input_ids"]
    room = limit - alone - len(tokenizer(SHOT_SEPARATOR, add_special_tokens=False)["input_ids"])
    while room >= MIN_PREFIX_TOKENS:
        prefixed = _prefixed(textset, tokenizer.decode(ids[-room:]) + SHOT_SEPARATOR,
                             f"the last {room} tokens of a shot")
        if _longest(tokenizer, prefixed) <= limit:
            return prefixed, 1, room
        room -= 1  # a cut that tokenises longer once joined: one token less
    raise DataError(f"no ReCaLL prefix fits in the context of {limit} tokens: the longest record has {alone} tokens, "
                    f"which leaves fewer than {MIN_PREFIX_TOKENS} for a prefix",
                    hint="score shorter texts, or raise --max-tokens up to the model's context")


@register_probe(PrefixRequest)
def prefixed_group(ctx: Probing, request: PrefixRequest, group, textset: TextSet):
    """(shard iterator, whole-set function, forwards per sample, None) of the plain and the prefixed AR passes.

    The prefix goes before each record's own context (a pair's prompt). The prefixed pass scores the record's tokens
    after the prefix; with a tokenizer that adds no start token it also scores the first one, which the plain pass
    cannot (ReCaLL reads the same tokens of both: :func:`~lmaudit.attacks.recall.recall`).
    """
    limit = ctx.config.max_length or ctx.target.adapter.context_length
    warn_scored_shots(request.shots, textset)
    prefixed, kept, cut = fit_shots(ctx.target.tokenizer, request.shots, textset, limit)
    if cut is not None:
        warn(f"recall: no whole prefix shot fits in the context of {limit} tokens beside the longest text; "
                      f"the prefix is the last {cut} tokens of the last shot")
    elif kept < len(request.shots):
        warn(f"recall: {kept} of {len(request.shots)} prefix shots fit in the context of {limit} tokens "
                      "beside the longest text; the earlier ones were dropped")
    plain_shards, plain_whole, _, _ = ar_group(ctx, AR_PROBE, group, textset)
    pre_shards, pre_whole, _, _ = ar_group(ctx, AR_PROBE, group, prefixed, reuse_prefix=True)

    def shards():
        for ((a, b), plain), (_, pre) in zip(plain_shards, pre_shards):
            yield (a, b), PrefixedStats(plain, pre, kept)

    def whole():
        return PrefixedStats(plain_whole(), pre_whole(), kept)

    forwards = {s.name: 2 for s in group}
    return shards(), whole, lambda: forwards, None


def scored_ids(tokenizer, textset: TextSet, limit: int) -> list[np.ndarray]:
    """Each text's scored token ids, in the order the AR probe scores them (the same tokenisation and limit)."""
    tok = tokenize_records(tokenizer, textset, max_length=limit)
    return [ids[scored] for ids, scored in zip(tok.ids, tok.scored)]


def truncated_only(attack: str, reads: str) -> Callable[[Probing], None]:
    """A probe check refusing long_texts = window for an attack that reads each text as the AR probe truncates it."""
    def check(ctx: Probing) -> None:
        if ctx.config.long_texts == "window":
            raise LmauditError(f"{attack} reads {reads} as the AR probe truncates the text: it does not run with "
                               "long_texts = window", hint=f"drop {attack} or use long_texts = truncate")
    return check


@register_probe(FrequencyRequest, check=truncated_only("dc_pdd", "each scored token's id"))
def frequency_group(ctx: Probing, request: FrequencyRequest, group, textset: TextSet):
    """(shard iterator, whole-set function, forwards per sample, None) of the AR pass with token ids and corpus
    frequencies (the reference's under its own tokenizer, when it is probed)."""
    shards, whole, forwards, _ = ar_group(ctx, AR_PROBE, group, textset)
    models = {"target": ctx.target} | ({"reference": ctx.reference} if ctx.reference is not None and ctx.prior else {})
    ids, freq = {}, {}
    for role, handle in models.items():
        ids[role] = scored_ids(handle.tokenizer, textset, ctx.config.max_length or handle.adapter.context_length)
        freq[role] = smoothed(token_counts(handle.tokenizer, request.corpus))

    def wrap(stats: ARStats, a: int, b: int) -> TokenStats:
        found = {role: np.concatenate(ids[role][a:b]) for role in models}
        ref = None
        if "reference" in models and stats.reference is not None:
            ref = TokenStats(stats.reference, found["reference"], freq["reference"])
        return TokenStats(stats, found["target"], freq["target"], ref)

    def tokens_shards():
        for (a, b), stats in shards:
            yield (a, b), wrap(stats, a, b)

    return tokens_shards(), lambda: wrap(whole(), 0, len(textset)), forwards, None


@register_probe(SampleRequest, check=truncated_only("samia", "each text's remainder"))
def sample_group(ctx: Probing, request: SampleRequest, group, textset: TextSet):
    """(shard iterator, whole-set function, generations per sample, None) of sampled continuations
    (:mod:`lmaudit.probes.samples`; the reference's too, when its own scores are asked for). What was sampled goes
    into the run's notes."""
    models = {"target": ctx.target} | ({"reference": ctx.reference} if ctx.reference is not None and ctx.prior else {})
    sharded = {}
    for role, handle in models.items():
        t0 = time.perf_counter()
        sharded[role] = sample_shards(handle, textset, request, seed=ctx.config.seed, max_length=ctx.config.max_length,
                                      cache_dir=ctx.cache, description=f"samples ({role})")
        ctx.timings[f"probe_samples_{role}"] = time.perf_counter() - t0

    def stats(i: int | None) -> SampleStats:
        part = {role: SampleStats.concat(s.all()) if i is None else s.get(i) for role, s in sharded.items()}
        return replace(part["target"], reference=part.get("reference"))

    def shards():
        for i, bounds in enumerate(sharded["target"].bounds):
            yield bounds, stats(i)

    target = sharded["target"]
    lengths = np.concatenate([target.get(i).remainder for i in range(len(target))])
    ctx.note(group, f"{request.n} continuation(s) of each text sampled at temperature {request.temperature:g} "
                    f"after the first {request.prefix:.0%} of its target tokens: {lengths.mean():.1f} tokens each on "
                    f"average, {request.n * lengths.mean():.1f} generated tokens per text.")
    forwards = {s.name: float(request.n) for s in group}  # one generation of the remainder per draw
    return shards(), lambda: stats(None), lambda: forwards, None


def _check_masked(ctx: Probing) -> None:
    check_dlm_reference(ctx.target, ctx.reference)


@register_probe(MaskPlan, check=_check_masked)
def masked_group(ctx: Probing, plan: MaskPlan, group, textset: TextSet):
    """(shard iterator, whole-set function, forwards per sample, probe) of the masked probe under ``plan``.

    Forwards per sample are the mean number of mask patterns, known once the shards were read.
    """
    use_ref = ctx.reference is not None and (ctx.prior or any(s.needs_reference for s in group))

    def probe(ts: TextSet):
        return probe_masked_shards(ctx.target, ts, plan, reference=ctx.reference if use_ref else None,
                                   seed=ctx.config.seed, batch_size=ctx.config.batch_size,
                                   max_batch_tokens=ctx.config.max_batch_tokens, max_length=ctx.config.max_length,
                                   cache_dir=ctx.cache)

    n_patterns = np.zeros(len(textset))

    def shards():
        t0 = time.perf_counter()
        for (a, b), stats in probe(textset):
            n_patterns[a:b] = stats.n_patterns
            yield (a, b), stats
        ctx.timings[f"probe_{plan.kind}"] = ctx.timings.get(f"probe_{plan.kind}", 0.0) + time.perf_counter() - t0

    def whole():
        return MaskedStats.concat([s for _, s in probe(textset)])

    return shards(), whole, lambda: {s.name: float(n_patterns.mean()) for s in group}, probe


def group_attacks(specs, params: dict[str, dict], budget: int) -> dict:
    """{probe request: the attacks that read it}: attacks asking for equal requests share one probe pass. An unknown
    parameter or variant is said here, before any probe runs."""
    groups: dict = {}
    for spec in specs:
        spec.check(params[spec.name])
        groups.setdefault(spec.probe(params[spec.name], budget), []).append(spec)
    return groups


def probe_group(ctx: Probing, request, group, textset: TextSet):
    """The probe group of ``request``, by its registered kind (:func:`masked_group` for a mask plan,
    :func:`ar_group` for the AR probe)."""
    return probe_kind(request).group(ctx, request, group, textset)


def check_requests(ctx: Probing, requests) -> None:
    """What the requests need of the models, checked before any probe runs (a masked probe's reference)."""
    for kind in dict.fromkeys(probe_kind(r) for r in requests):
        if kind.check is not None:
            kind.check(ctx)


def check_dlm_reference(target: ModelHandle, reference: ModelHandle | None) -> None:
    if reference is None:
        return
    if not target.same_kind(reference):
        raise LmauditError(f"the reference '{reference.path}' is a {reference.kind.upper()} model; a "
                           f"{target.kind.upper()} target needs a {target.kind.upper()} reference")
    if tokenizer_fingerprint(reference.tokenizer) != tokenizer_fingerprint(target.tokenizer):
        raise LmauditError(
            f"the reference '{reference.path}' uses another tokenizer than the target",
            hint="masked probes feed both models the same token ids: use a reference with the target's tokenizer",
        )
