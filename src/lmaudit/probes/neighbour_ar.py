"""The AR probe of a text's neighbours, continuing from the text's own keys and values.

A neighbour (:mod:`lmaudit.probes.neighbours`) is its text with a few tokens replaced. Read with the audited model's
tokenizer, it shares a leading run of token ids with its text, up to ``d``, the first position where the ids differ
(0 when the first token differs; a swap the tokenizer merges with the tokens beside it moves ``d`` back). Before
``d`` a neighbour's statistics are its text's: the token at p < d is the same, predicted from the same tokens. So:

1. each text runs once, over its first D tokens (D = the largest ``d`` of its neighbours), in padded batches of
   texts: its statistics at the positions before D, and the keys and values of those positions;
2. a neighbour's statistics before its ``d`` are copied from its text's; from ``d`` on they are computed: the rows
   from ``d − 1`` on (row ``d − 1`` predicts the first new token) run attending the text's cached keys and values
   before them. Neighbours run in batches of close starts (:func:`start_batches`): a batch continues from the
   smallest start of its rows, C, on the cache of each row's own text cut to its first C positions, and every row
   feeds its tokens from C on (right-padded, as the AR probe pads).

The statistics equal those of scoring every neighbour whole with :mod:`lmaudit.probes.ar` (the same tokenisation,
truncation and scored positions), to float32 rounding; a neighbour that differs from its first token runs whole,
and one whose ids equal its text's (a swap past the truncation) runs nothing. A model whose cache cannot be cut
(sliding-window or recurrent layers) runs each neighbour whole from position 0 on, still copying what comes before
``d``; a served model, or ``long_texts = "window"``, scores every neighbour whole as the AR probe does.

A neighbour record names its text in ``fields[ORIGINAL]`` (:func:`~lmaudit.probes.neighbours.neighbour_set`); the
text is the record's context followed by that target. Shards of neighbours are cached under their own key
(``"ar-neighbours"``), with the texts in the shard's fingerprint.

The neighbourhood attack also needs each text's own statistics: it puts each text among its neighbours as a
neighbour of itself (:func:`with_texts`; its ids are its text's, so it runs nothing and copies every position), and
the texts then run whole in this probe, which gives the plain pass too.

Cost: each text once up to its neighbours' last first difference (whole, with :func:`with_texts`), and each
neighbour from the token before its first difference on, with some padding and one forward per batch. With single
swaps a neighbour feeds about half its tokens: on SmolLM2-135M, 8 numpy docstrings of 500 characters and 25
neighbours each, 13,413 tokens instead of 23,681 (the texts' 949 included), and the neighbours' pass ran 1.55×
faster than scoring them whole (CPU time, one thread; max |Δ logp| 1.6e-5, max |Δ score| 2.6e-8; ``python
benchmarks/bench_neighbourhood.py``).
"""

from __future__ import annotations

import warnings
from dataclasses import asdict, dataclass

import numpy as np
import torch

from lmaudit.data.loaders import Record, TextSet
from lmaudit.errors import LmauditError
from lmaudit.models.fingerprint import tokenizer_fingerprint
from lmaudit.models.handle import ModelHandle
from lmaudit.probes.ar import ARProbeConfig, ARProbeTask
from lmaudit.probes.batching import run_batches
from lmaudit.probes.neighbours import ORIGINAL
from lmaudit.probes.records import ARStats
from lmaudit.probes.shards import Sharded, run_sharded
from lmaudit.probes.stats import rows_stats
from lmaudit.probes.tokenize import model_batches, tokenize_records
from lmaudit.progress import progress
from lmaudit.utils import stable_hash

NEIGHBOUR_PROBE_VERSION = 2  # 2: each text's tokens before any cut


def original_of(record: Record) -> str:
    """The target of the text ``record`` is a neighbour of (its context is the record's own)."""
    try:
        return record.fields[ORIGINAL]
    except KeyError:
        raise LmauditError(f"record {record.id!r} names no text it is a neighbour of",
                           hint="make the neighbour records with lmaudit.probes.neighbours.neighbour_set") from None


def with_texts(textset: TextSet, neighbours: TextSet, owner: np.ndarray) -> tuple[TextSet, np.ndarray, np.ndarray]:
    """(the records to probe, where the texts are among them, where the neighbours are): each text as a neighbour
    of itself, just before its own neighbours. Its ids equal its text's, so its statistics are all copied from the
    text's own pass, which then runs the text whole: one probe gives the texts' statistics (the plain pass the
    neighbourhood attack reads) and their neighbours'."""
    order = np.argsort(owner, kind="stable")
    bounds = np.searchsorted(owner[order], np.arange(len(textset) + 1))
    records, texts_at, neighbours_at = [], np.empty(len(textset), dtype=np.int64), np.empty(len(owner), np.int64)
    for i, rec in enumerate(textset.records):
        texts_at[i] = len(records)
        records.append(Record(rec.id, rec.target, rec.context, {**rec.fields, ORIGINAL: rec.target}))
        for j in order[bounds[i]: bounds[i + 1]]:
            neighbours_at[j] = len(records)
            records.append(neighbours.records[j])
    return TextSet(records, source=f"{textset.source} and its neighbours"), texts_at, neighbours_at


def first_difference(a: np.ndarray, b: np.ndarray) -> int:
    """The first position where the ids ``a`` and ``b`` differ; the shorter's length when one starts the other."""
    n = min(len(a), len(b))
    diff = np.flatnonzero(a[:n] != b[:n])
    return int(diff[0]) if len(diff) else n


# what a forward costs beyond the tokens it feeds (reading every weight, launching every layer), in tokens: a
# SmolLM2-135M forward on one CPU thread costs about 35 tokens' time more than its tokens (0.14 s for 3 tokens,
# 3.6 s for 938); on an accelerator more, but there a block of texts holds so many neighbours that rows of equal
# starts fill its batches
FORWARD_TOKENS = 64


END_SLACK = 8  # neighbours whose ends differ by more than this many tokens run in different batches


def _partition(starts: np.ndarray, ends: np.ndarray, budget: int | None, batch_size: int | None,
               span: int | None, forward_cost: int) -> list[np.ndarray]:
    """The cheapest cut of rows sorted latest start first into runs of consecutive rows, a run costing
    ``forward_cost`` + rows × (longest end − its last start) tokens, within the limits (dynamic programming)."""
    n = len(starts)
    most = min(x for x in (n, batch_size, budget, span) if x is not None)  # rows a batch can hold (a token each)
    best, cut = np.zeros(n + 1), np.zeros(n + 1, dtype=np.int64)
    for b in range(n):
        lo = max(0, b + 1 - most)
        rows = np.arange(b + 1 - lo, 0, -1)  # a batch of rows a..b, for every lo ≤ a ≤ b
        top = np.maximum.accumulate(ends[b:lo - 1 if lo else None:-1])[::-1]  # the longest end of rows a..b
        fed = rows * (top - starts[b])
        cost = best[lo: b + 1] + forward_cost + fed
        over = np.zeros(len(rows), dtype=bool)
        if batch_size is not None:
            over |= rows > batch_size
        if budget is not None:
            over |= fed > budget
        if span is not None:
            over |= rows * top > span
        over[-1] = False  # a row alone always runs
        cost[over] = np.inf
        cut[b + 1] = lo + int(np.argmin(cost))
        best[b + 1] = cost[cut[b + 1] - lo]
    runs, b = [], n
    while b:
        runs.append(np.arange(cut[b], b))
        b = cut[b]
    return runs[::-1]


def start_batches(starts: np.ndarray, lengths: np.ndarray, budget: int | None, batch_size: int | None, *,
                  span: int | None = None, forward_cost: int = 0) -> list[np.ndarray]:
    """Indices of rows in batches. A batch feeds every row from the smallest start among them to the longest end
    (right-padded), and holds at most ``budget`` fed tokens (rows × (longest end − smallest start)), ``span``
    positions, cached ones included (rows × longest end), and ``batch_size`` rows (None: no limit); a row over the
    limits alone is a batch of its own.

    Rows whose ends are within :data:`END_SLACK` tokens form a class (the neighbours of texts of about one length);
    a class, sorted latest start first, is cut into the batches that feed the fewest tokens, each forward counted
    as ``forward_cost`` tokens more (:func:`_partition`): rows of close starts share a forward, and a row that
    starts much earlier than the others runs apart."""
    batches, by_end = [], np.argsort(-lengths, kind="stable")
    bounds = np.flatnonzero(np.diff(lengths[by_end]) < 0) + 1 if len(by_end) else np.array([], dtype=np.int64)
    classes, first = [], 0
    for at in [*bounds.tolist(), len(by_end)]:  # a class ends where the next end is too far below its longest
        if at == len(by_end) or lengths[by_end[at]] < lengths[by_end[first]] - END_SLACK:
            classes.append(by_end[first:at])
            first = at
    for rows in classes:
        rows = rows[np.lexsort((-lengths[rows], -starts[rows]))]  # latest start first
        batches += [rows[run] for run in _partition(starts[rows], lengths[rows], budget, batch_size, span,
                                                    forward_cost)]
    return batches


def _finite(stats: torch.Tensor, source: str) -> np.ndarray:
    if not torch.isfinite(stats).all():
        raise LmauditError(f"the model produced NaN or inf logits on {source}",
                           hint="check the model weights and dtype (try float32)")
    return stats.cpu().numpy()


def _split(stats: np.ndarray, mask: np.ndarray) -> list[np.ndarray]:
    """The (n, 4) statistics of a batch cut into its rows' own, ``mask`` (B, T-1) saying which rows they came from."""
    bounds = np.concatenate([[0], np.cumsum(mask.sum(axis=1))])
    return [stats[bounds[row]: bounds[row + 1]] for row in range(len(mask))]


@torch.inference_mode()
def _run_neighbour_probe(handle: ModelHandle, shard: TextSet, config: ARProbeConfig,
                         description: str | None) -> ARStats:
    adapter = handle.adapter
    if config.long_texts == "window" or not hasattr(adapter, "select_cache"):  # a served model has no cache
        return ARProbeTask(config)(handle, shard)  # every neighbour whole, as the AR probe scores it
    max_length = config.max_length or adapter.context_length
    tok = tokenize_records(adapter.tokenizer, shard, max_length=max_length)
    texts: dict[tuple[str, str], int] = {}
    owner = np.array([texts.setdefault((r.context, original_of(r)), len(texts)) for r in shard.records],
                     dtype=np.int64)
    with warnings.catch_warnings():  # the neighbours' own tokenisation has said how many were truncated
        warnings.simplefilter("ignore")
        own = tokenize_records(adapter.tokenizer, TextSet([Record(f"t{i}", target, context)
                                                           for (context, target), i in texts.items()]),
                               max_length=max_length)
    ids, scored, n = tok.ids, tok.scored, len(shard)
    lengths = np.array([len(x) for x in ids], dtype=np.int64)
    first = np.array([first_difference(x, own.ids[o]) for x, o in zip(ids, owner)], dtype=np.int64)  # d
    run = np.zeros(len(texts), dtype=np.int64)  # D: the tokens of each text that run (its neighbours' largest d)
    np.maximum.at(run, owner, first)
    starts = np.maximum(first - 1, 0)  # row d − 1 predicts the first new token
    computed = [m & (np.arange(len(m)) >= d) for m, d in zip(scored, first)]  # before d: the text's statistics
    needs = np.array([m.any() for m in computed])
    own_stats: list[np.ndarray | None] = [None] * len(texts)  # (D, 4) per text: row p = position p, NaN unscored
    per_sample: list[np.ndarray | None] = [None] * n
    device = adapter.device
    budget = None if config.batch_size is not None and config.max_batch_tokens is None else \
        (config.max_batch_tokens or adapter.batch_tokens())
    # a batch keeps the keys and values of every position it attends, and a block of texts its own while their
    # neighbours run: on a CPU the budget sizes the tokens fed (memory is not what binds), on an accelerator the
    # cached positions count against it too
    on_cpu = device.type == "cpu"
    span = None if budget is None or on_cpu else max(1, budget // 2)
    block_tokens = None if budget is None else max(1, budget // (1 if on_cpu else 4))

    def neighbours(rows_of: dict[int, int], cache, bar) -> None:
        """Score the neighbours of the texts ``rows_of`` maps to their rows in ``cache`` (None: from position 0)."""
        members = np.flatnonzero(needs & np.isin(owner, list(rows_of)))
        begin = starts[members] if cache is not None else np.zeros(len(members), dtype=np.int64)

        def compute(local: np.ndarray) -> None:
            cut, js = int(begin[local].min()), members[local]
            input_ids, attn, mask = adapter.pad([ids[j][cut:] for j in js], [computed[j][cut:] for j in js])
            ids_t = torch.from_numpy(input_ids).to(device)
            attn_t = torch.from_numpy(attn).to(device)
            sel = torch.from_numpy(mask[:, 1:]).to(device)  # (B, T-1): position t+1 predicted from row t
            extra = {}
            if cut:  # each row continues after its text's first `cut` tokens: attended, not fed
                attn_t = torch.cat([torch.ones((len(js), cut), dtype=attn_t.dtype, device=device), attn_t], 1)
                extra["past"] = adapter.select_cache(
                    cache, torch.tensor([rows_of[int(owner[j])] for j in js], device=device), cut)
            rows, head = adapter.output_rows(ids_t, attn_t, lambda out, sel=sel: out[:, :-1][sel],
                                             fuse=config.fused_head, **extra)
            stats = _finite(rows_stats(rows, head, ids_t[:, 1:][sel], row_chunk=config.row_chunk), shard.source)
            for j, part in zip(js, _split(stats, mask[:, 1:])):
                per_sample[j] = part
            bar.advance(len(js))

        if len(members):
            run_batches(start_batches(begin, lengths[members], budget, config.batch_size, span=span,
                                      forward_cost=FORWARD_TOKENS), compute,
                        lengths=lengths[members] - begin)

    with progress(description, total=n) as bar:
        ran = np.flatnonzero(run > 1)  # a text whose neighbours all differ by position 1 has nothing to copy

        def texts_block(index: np.ndarray) -> None:
            at = ran[index]
            input_ids, attn, mask = adapter.pad([own.ids[o][: run[o]] for o in at],
                                                [own.scored[o][: run[o]] for o in at])
            ids_t = torch.from_numpy(input_ids).to(device)
            sel = torch.from_numpy(mask[:, 1:]).to(device)
            cache, rows, head = adapter.prefix_cache(ids_t, torch.from_numpy(attn).to(device),
                                                     lambda out, sel=sel: out[:, :-1][sel], fuse=config.fused_head)
            stats = _finite(rows_stats(rows, head, ids_t[:, 1:][sel], row_chunk=config.row_chunk), shard.source)
            for row, (o, part) in enumerate(zip(at, _split(stats, mask[:, 1:]))):
                dense = np.full((run[o], 4), np.nan, dtype=np.float32)
                dense[1:][mask[row, 1: run[o]]] = part
                own_stats[o] = dense
            neighbours({int(o): row for row, o in enumerate(at)}, cache if adapter.cache_selectable(cache) else None,
                       bar)

        if len(ran):
            run_batches(model_batches(run[ran], adapter, config.batch_size, block_tokens), texts_block,
                        lengths=run[ran])
        neighbours({int(o): -1 for o in np.flatnonzero(run <= 1)}, None, bar)
        bar.advance(int((~needs).sum()))
    empty = np.empty((0, 4), dtype=np.float32)
    for j in range(n):
        d, o = int(first[j]), int(owner[j])
        copied = empty if own_stats[o] is None else own_stats[o][np.flatnonzero(scored[j][:d])]
        per_sample[j] = np.concatenate([copied, empty if per_sample[j] is None else per_sample[j]])
    flat = np.concatenate(per_sample)
    if not np.isfinite(flat).all():  # a copied position its text did not score: the runs did not line up
        raise LmauditError(f"neighbours of {shard.source}: a copied statistic is missing")
    offsets = np.concatenate([[0], np.cumsum([len(p) for p in per_sample])]).astype(np.int64)
    return ARStats(logp=flat[:, 0].copy(), top1_logp=flat[:, 1].copy(), mu=flat[:, 2].copy(),
                   sigma=flat[:, 3].copy(), entropy=(-flat[:, 2]).copy(), offsets=offsets, zlib_len=tok.zlib_len,
                   sample_keys=tok.sample_keys, n_tokens=tok.n_tokens)


@dataclass(frozen=True)
class NeighbourProbeTask:
    """The AR probe of one shard of neighbours (picklable: it runs in this process or on a Ray worker)."""

    config: ARProbeConfig

    def __call__(self, handle: ModelHandle, shard: TextSet) -> ARStats:
        return _run_neighbour_probe(handle, shard, self.config, None)


def _fingerprint(shard: TextSet) -> str:
    """A shard of neighbours, with the texts they continue from (which set the rows that run)."""
    return stable_hash([(r.context, r.target, original_of(r)) for r in shard.records])


def neighbour_shards(handle: ModelHandle, neighbours: TextSet, config: ARProbeConfig = ARProbeConfig(), *,
                     cache_dir=None, description: str = "AR probe of the neighbours",
                     shard_size: int | None = None) -> Sharded:
    """The AR statistics of ``neighbours`` (records of :func:`~lmaudit.probes.neighbours.neighbour_set`) under the
    model of ``handle``, shard by shard: a :class:`~lmaudit.probes.shards.Sharded` of ARStats, each neighbour's
    equal to :func:`~lmaudit.probes.ar.probe_ar_shards`' of it to float32 rounding. Cached as ``probe_ar_shards``
    caches, under its own key."""
    key = None
    if cache_dir is not None and handle.fingerprint:
        settings = {k: v for k, v in asdict(config).items() if k != "reuse_prefix"}  # not read: texts share no prefix
        key = ("ar-neighbours", NEIGHBOUR_PROBE_VERSION, handle.fingerprint, tokenizer_fingerprint(handle.tokenizer),
               settings)
    return run_sharded(neighbours, task=NeighbourProbeTask(config), handle=handle, key=key, load=ARStats.load,
                       cache_dir=cache_dir, description=description, shard_size=shard_size, fingerprint=_fingerprint)


def neighbour_stats(handle: ModelHandle, neighbours: TextSet, config: ARProbeConfig = ARProbeConfig(),
                    **kwargs) -> ARStats:
    """The :class:`ARStats` of ``neighbours`` (keyword arguments as :func:`neighbour_shards`)."""
    return ARStats.concat(neighbour_shards(handle, neighbours, config, **kwargs).all())
