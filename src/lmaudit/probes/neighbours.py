"""Neighbours of a text for the neighbourhood attack (Mattern et al., 2023): the text with a few of its tokens
replaced by a masked model's likeliest alternatives.

For every scorable token x_t of a text (its target part; a pair's prompt stays as it is and visible), the masked
model reads the text with that one token masked and gives q_t; the candidates at t are its ``top`` likeliest tokens
other than x_t and the special tokens, each scored q_t(c) / (1 − q_t(x_t)) (the authors' swap score: a likely
replacement where the original was not certain). A neighbour replaces ``m = max(1, round(fraction × L))`` of the
L positions: with m = 1 (``fraction = 0``, the authors' setting) the neighbours are the ``n`` best single swaps;
with m > 1, ``8 n`` sets of m distinct positions are drawn (seeded by the text's content), each position takes its
best candidate, and the ``n`` sets of highest summed score are kept. The authors mask by dropout on one token's
embedding (a BERT trick); a masked diffusion model has a mask token, which is used here.

A neighbour is a text: the swapped tokens decoded, so the audited model reads it with its own tokenizer, which
may differ from the masked model's. A text whose tokens do not decode back to it under the masked model's
tokenizer (a normalising tokenizer, e.g. one that lower-cases) would differ from its neighbours in more than the
swaps: refused, naming it. A text longer than the masked model's context is perturbed within its first tokens
(as many as the context holds; the rest is kept as it is, and the run says how many texts). Cost: one masked
forward of the masked model per token it can perturb, batched (as many rows as its token budget holds); cached per
shard. With the embedded diffusion LM, the neighbours of SmolLM2-135M's benchmark texts (136 masked forwards a
text) took 0.9× the audited model's plain AR probe of them (CPU time, ``python benchmarks/bench_neighbourhood.py``);
the masked model's forwards are 94% of it, the softmax and top-k over its 4,096-token vocabulary under 1%.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

import numpy as np
import torch

from lmaudit.data.loaders import Record, TextSet
from lmaudit.errors import DataError
from lmaudit.models.fingerprint import tokenizer_fingerprint
from lmaudit.models.handle import ModelHandle
from lmaudit.probes.shards import Sharded, run_sharded
from lmaudit.probes.stored import ArrayDict
from lmaudit.probes.tokenize import tokenize_records
from lmaudit.progress import progress
from lmaudit.settings import check_settings, integer, setting
from lmaudit.settings import fraction as share

NEIGHBOUR_VERSION = 1
ORIGINAL = "neighbour_of"  # a neighbour record's field: the target of the text it was made from
DRAWS_PER_NEIGHBOUR = 8  # position sets drawn per neighbour kept, when a neighbour swaps several positions


@dataclass(frozen=True)
class NeighbourSettings:
    """The neighbours of a text: how many, what share of its tokens each replaces, from how many candidates."""

    n: int = setting(25, check=integer(1))  # neighbours per text
    fraction: float = setting(0.0, check=share())  # share of a text's tokens a neighbour replaces (at least one)
    top: int = setting(5, check=integer(1))  # candidates per position

    def __post_init__(self) -> None:
        check_settings(self)


def swap_candidates(adapter, ids: np.ndarray, positions: np.ndarray, top: int, batch_tokens: int,
                    banned: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(candidates (P, top), swap scores (P, top)) at each of ``positions`` of ``ids``, one masked forward each."""
    cands, scores = np.empty((len(positions), top), dtype=np.int64), np.empty((len(positions), top))
    rows = max(1, batch_tokens // len(ids))
    device = adapter.device
    for start in range(0, len(positions), rows):
        pos = positions[start:start + rows]
        batch = torch.from_numpy(np.repeat(ids[None], len(pos), axis=0)).to(device)
        where = torch.from_numpy(pos).to(device)
        arange = torch.arange(len(pos), device=device)
        batch[arange, where] = adapter.mask_token_id
        picked, head = adapter.output_rows(batch, torch.ones_like(batch),
                                           lambda out, a=arange, w=where: out[a, w])  # row i predicts token i
        logits = (picked if head is None else head(picked)).float()  # the masked position's logits only
        q = torch.softmax(logits, dim=-1)
        original = q[arange, torch.from_numpy(ids[pos]).to(device)]
        q[:, torch.from_numpy(banned).to(device)] = -1.0
        q[arange, torch.from_numpy(ids[pos]).to(device)] = -1.0
        best, which = q.topk(top, dim=-1)
        cands[start:start + len(pos)] = which.cpu().numpy()
        scores[start:start + len(pos)] = (best / (1 - original).clamp_min(1e-6)[:, None]).double().cpu().numpy()
    return cands, scores


def choose_swaps(cands: np.ndarray, scores: np.ndarray, settings: NeighbourSettings,
                 rng: np.random.Generator) -> list[list[tuple[int, int]]]:
    """The neighbours of one text as lists of (position index, candidate token)."""
    length = len(cands)
    m = max(1, round(settings.fraction * length))
    if m == 1:
        flat = np.argsort(-scores, axis=None, kind="stable")[: settings.n]
        return [[(int(i // cands.shape[1]), int(cands.flat[i]))] for i in flat]
    m = min(m, length)
    drawn = {tuple(sorted(rng.choice(length, size=m, replace=False).tolist()))
             for _ in range(DRAWS_PER_NEIGHBOUR * settings.n)}
    ranked = sorted(drawn, key=lambda s: (-float(scores[list(s), 0].sum()), s))[: settings.n]
    return [[(i, int(cands[i, 0])) for i in chosen] for chosen in ranked]


@torch.inference_mode()
def _neighbours(handle: ModelHandle, textset: TextSet, settings: NeighbourSettings, max_length: int | None,
                description: str | None) -> ArrayDict:
    adapter, tokenizer = handle.adapter, handle.tokenizer
    limit = max_length or adapter.context_length
    tok = tokenize_records(tokenizer, textset, max_length=sys.maxsize, first_scorable=0, split_special=True)
    banned = np.array(sorted(set(tokenizer.all_special_ids) | {adapter.mask_token_id}), dtype=np.int64)
    batch_tokens = adapter.batch_tokens()
    texts, owner, forwards = [], [], np.zeros(len(textset), dtype=np.int64)
    windowed = np.zeros(len(textset), dtype=bool)
    with progress(description, total=len(textset)) as bar:
        for i, (rec, ids, scored, key) in enumerate(zip(textset.records, tok.ids, tok.scored, tok.sample_keys)):
            positions = np.flatnonzero(scored)
            target = tokenizer.decode(ids[positions])
            if target != rec.target:
                raise DataError(f"neighbourhood: record {rec.id!r} of {textset.source} does not decode back to its "
                                f"text under the masked model's tokenizer ({target[:40]!r}… for {rec.target[:40]!r}…)",
                                hint="use a masked model whose tokenizer keeps the text as it is "
                                     "(--param neighbourhood.model=DIR)")
            usable = positions[positions < limit]  # a longer text is perturbed within the masked model's context
            windowed[i] = len(ids) > limit
            forwards[i] = len(usable)
            if len(usable):
                cands, scores = swap_candidates(adapter, ids[:limit], usable, settings.top, batch_tokens, banned)
                for swaps in choose_swaps(cands, scores, settings, np.random.default_rng(int(key))):
                    new = ids.copy()
                    for at, token in swaps:
                        new[usable[at]] = token
                    texts.append(tokenizer.decode(new[positions]))
                    owner.append(i)
            bar.advance(1)
    return ArrayDict(texts=np.array(texts, dtype=str), owner=np.array(owner, dtype=np.int64), forwards=forwards,
                     windowed=windowed)


@dataclass(frozen=True)
class NeighbourTask:
    """The neighbours of one shard (picklable: it runs in this process or on a Ray worker)."""

    settings: NeighbourSettings
    max_length: int | None

    def __call__(self, handle, shard: TextSet) -> ArrayDict:
        return _neighbours(handle, shard, self.settings, self.max_length, None)


def make_neighbours(mask_model: ModelHandle, textset: TextSet, settings: NeighbourSettings, *,
                    max_length: int | None = None, cache_dir=None) -> Sharded:
    """The neighbours of every text, shard by shard (ArrayDicts: ``texts``, their ``owner`` index within the shard,
    masked ``forwards`` per text); cached under (masked model, tokenizer, the shard's records, settings)."""
    key = None
    if cache_dir is not None and mask_model.fingerprint:
        key = ("neighbours", NEIGHBOUR_VERSION, mask_model.fingerprint, tokenizer_fingerprint(mask_model.tokenizer),
               settings.n, settings.fraction, settings.top, max_length)
    return run_sharded(textset, task=NeighbourTask(settings, max_length), handle=mask_model, key=key,
                       load=ArrayDict.load, cache_dir=cache_dir if key else None,
                       description=f"neighbours ({mask_model.path or 'masked model'})")


def neighbour_set(textset: TextSet, sharded: Sharded) -> tuple[TextSet, np.ndarray, np.ndarray, int]:
    """(the neighbours as records, each one's owner index in ``textset``, masked forwards per text, how many texts
    were longer than the masked model's context and perturbed within it): a neighbour keeps its text's prompt and
    replaces its target, and names that target in ``fields[ORIGINAL]`` (its probe continues from the text's
    tokens: :mod:`lmaudit.probes.neighbour_ar`)."""
    records, owners, forwards, windowed = [], [], [], 0
    for (a, _), part in zip(sharded.bounds, sharded.all()):
        for j, (text, own) in enumerate(zip(part["texts"].tolist(), part["owner"].tolist())):
            rec = textset.records[a + own]
            records.append(Record(f"{rec.id}~{j}", text, rec.context, {ORIGINAL: rec.target}))
            owners.append(a + own)
        forwards.append(part["forwards"])
        windowed += int(part["windowed"].sum()) if "windowed" in part else 0
    return (TextSet(records, source=f"neighbours of {textset.source}"), np.array(owners, dtype=np.int64),
            np.concatenate(forwards), windowed)

