"""The neighbourhood attack: neighbours and score equal a plain re-implementation from the paper's swap score; a
masked model with another tokenizer is handled (texts), an AR model or a too-short context is refused; the
neighbours' AR pass, continuing from their texts' keys and values, gives the statistics of scoring them whole."""

from __future__ import annotations

import sys

import numpy as np
import pytest
import torch

from helpers import causal, make_texts
from lmaudit.data.loaders import Record, TextSet
from lmaudit.errors import DataError, LmauditError, SettingError
from lmaudit.models.loading import load_model
from lmaudit.probes import neighbour_ar
from lmaudit.probes.ar import ARProbeConfig, probe_ar
from lmaudit.probes.neighbour_ar import neighbour_shards, neighbour_stats, start_batches
from lmaudit.probes.neighbours import ORIGINAL, NeighbourSettings, make_neighbours, neighbour_set
from lmaudit.probes.records import ARStats, NeighbourStats
from lmaudit.probes.tokenize import tokenize_records
from lmaudit.runs.mia import RunConfig, score_set

TEXTS = make_texts(5, seed=98, min_words=3, max_words=12)


def plain_neighbours(dlm, tokenizer, text: str, n: int, top: int) -> list[str]:
    """The n best single swaps of ``text``: at each non-special position, mask it, read q from ``dlm(ids).logits``
    (row i predicts token i), score the top candidates other than the original and special tokens by
    q(c) / (1 − q(x_t))."""
    ids = tokenizer(text)["input_ids"]
    special = set(tokenizer.all_special_ids)
    swaps = []
    for t, token in enumerate(ids):
        if token in special:
            continue
        masked = list(ids)
        masked[t] = tokenizer.mask_token_id
        with torch.no_grad():
            q = torch.softmax(dlm(torch.tensor([masked])).logits[0, t].float(), dim=-1)
        order = [int(c) for c in torch.argsort(q, descending=True) if int(c) != token and int(c) not in special]
        swaps += [(float(q[c] / (1 - q[token])), t, c) for c in order[:top]]
    swaps.sort(key=lambda s: -s[0])
    out = []
    for _, t, c in swaps[:n]:
        new = list(ids)
        new[t] = c
        out.append(tokenizer.decode([x for x in new if x not in special]))
    return out


def mean_loss(model, tokenizer, text: str) -> float:
    ids = torch.tensor([tokenizer(text)["input_ids"]])
    with torch.no_grad():
        return float(torch.nn.functional.cross_entropy(model(ids).logits[0, :-1].float(), ids[0, 1:]))


def test_equal_to_the_paper_with_single_swaps(tiny_model_dir, tiny_model, tiny_dlm_dir, tiny_dlm, tokenizer):
    got = score_set(load_model(tiny_model_dir), TextSet.from_texts(TEXTS), config=RunConfig(
        attacks=["neighbourhood"], params={"neighbourhood": {"model": str(tiny_dlm_dir), "n": 4, "top": 3}}))
    want = []
    for text in TEXTS:
        neighbours = plain_neighbours(tiny_dlm.model, tokenizer, text, 4, 3)
        assert len(neighbours) == 4 and text not in neighbours
        want.append(np.mean([mean_loss(tiny_model, tokenizer, x) for x in neighbours])
                    - mean_loss(tiny_model, tokenizer, text))
    np.testing.assert_allclose(got["neighbourhood"], want, rtol=1e-4, atol=1e-5)


def test_several_swaps_another_tokenizer_and_refusals(tmp_path, tiny_model_dir, tiny_dlm_dir):
    from lmaudit.models.presets import Preset, build_ar_model
    from lmaudit.models.tokenizer import train_tokenizer
    from lmaudit.probes.neighbours import NeighbourSettings, make_neighbours, neighbour_set
    from test_gradnorm import TEXTS as LONGER

    texts = TextSet.from_texts(LONGER)
    dlm = load_model(tiny_dlm_dir)
    made, owner, forwards, windowed = neighbour_set(texts, make_neighbours(dlm, texts, NeighbourSettings(n=3,
                                                                                                    fraction=0.3)))
    assert windowed == 0
    assert np.array_equal(np.bincount(owner), [3] * len(texts))
    tok = dlm.tokenizer
    for rec, i in zip(made.records, owner):
        theirs, mine = tok(rec.target)["input_ids"], tok(LONGER[i])["input_ids"]
        if len(theirs) == len(mine):  # a swap that re-tokenises alike changes round(0.3 L) tokens
            assert sum(a != b for a, b in zip(theirs, mine)) == max(1, round(0.3 * int(forwards[i])))
    other_tok = train_tokenizer(make_texts(500, seed=7), vocab_size=300)  # the target's own, another one
    folder = tmp_path / "other"
    build_ar_model(Preset("t", hidden=32, layers=1, heads=2, intermediate=64, context=128, pretrain_tokens=1,
                          block=32, batch=1, lr=1e-3), other_tok).save_pretrained(folder)
    other_tok.save_pretrained(folder)
    result = score_set(load_model(folder), TextSet.from_texts(TEXTS), config=RunConfig(
        attacks=["neighbourhood"], params={"neighbourhood": {"model": str(tiny_dlm_dir), "n": 2}}))
    assert np.isfinite(result["neighbourhood"]).all()

    def run(**params):
        return score_set(load_model(tiny_model_dir), TextSet.from_texts(TEXTS),
                         config=RunConfig(attacks=["neighbourhood"], params={"neighbourhood": params}))

    with pytest.raises(DataError, match="loads as an AR model; its neighbours need a masked model"):
        run(model=str(tiny_model_dir))
    with pytest.raises(SettingError, match=r"^neighbourhood\.n must be an integer ≥ 1, got 0"):  # declared check
        run(model=str(tiny_dlm_dir), n=0)
    long = TextSet.from_texts([" ".join(make_texts(40, seed=9))])  # beyond the masked model's 128 tokens
    assert len(dlm.tokenizer(long.texts[0])["input_ids"]) > 200
    made, _, forwards, windowed = neighbour_set(long, make_neighbours(dlm, long, NeighbourSettings(n=4)))
    assert windowed == 1 and forwards[0] < 128 and len(made) == 4
    tail = long.texts[0][-200:]
    assert all(rec.target.endswith(tail) and rec.target != long.texts[0] for rec in made.records)  # swaps up front


# The neighbours' AR pass continuing from their texts' keys and values (lmaudit.probes.neighbour_ar) against every
# neighbour scored whole by the AR probe: the same positions, and statistics equal to float32 rounding, stated as
# |Δ| ≤ 2e-5 + 1e-5·|whole| (what batching alone moves them by is about 1e-6).
ATOL, RTOL = 2e-5, 1e-5


def _neighbour(rec: Record, target: str, j: int) -> Record:
    return Record(f"{rec.id}~{j}", target, rec.context, {ORIGINAL: rec.target})


def neighbour_cases(dlm) -> tuple[TextSet, np.ndarray]:
    """Neighbours of texts of different lengths (one longer than the tiny model's 128 tokens, one a pair with a
    prompt) made by the masked model, and by hand: a swap of the first word (no shared run after the start token),
    a swap that changes the length, one past the truncation (the same ids as the text's) and one near its end."""
    words = make_texts(60, seed=5, min_words=12, max_words=12)
    texts = TextSet([Record("short", "Rain fell on the quiet town."), Record("mid", TEXTS[2]),
                     Record("pair", "It was sold at the market by noon.", "Q: where did the bread go?\nA: "),
                     Record("long", " ".join(words))], source="cases")
    made, owner, _, _ = neighbour_set(texts, make_neighbours(dlm, texts, NeighbourSettings(n=5)))
    by_hand = [("short", "Snow fell on the quiet town."), ("short", "Rain fell on the extraordinarily quiet town."),
               ("mid", "Zebra " + TEXTS[2].split(" ", 1)[1]), ("mid", TEXTS[2][:-1] + " again."),
               ("pair", "It was sold at the market by dawn."), ("long", " ".join(words[:-1]) + " The end."),
               ("long", "Yet " + " ".join(words)), ("long", " ".join(words[:2]) + " Zebra " + " ".join(words[3:]))]
    index = {r.id: i for i, r in enumerate(texts.records)}
    extra = [_neighbour(texts.records[index[i]], target, 100 + j) for j, (i, target) in enumerate(by_hand)]
    return (TextSet(made.records + extra, source="neighbours"),
            np.concatenate([owner, [index[i] for i, _ in by_hand]]), texts)


@pytest.mark.parametrize("config", [ARProbeConfig(), ARProbeConfig(batch_size=3), ARProbeConfig(max_batch_tokens=64),
                                    ARProbeConfig(fused_head=False)], ids=["default", "batch3", "tokens64", "logits"])
def test_neighbours_continuing_from_their_text_get_the_whole_statistics(tiny_model, tokenizer, tiny_dlm, config,
                                                                       monkeypatch):
    from lmaudit.attacks.neighbourhood import neighbourhood

    dlm = tiny_dlm.handle()
    made, owner, texts = neighbour_cases(dlm)
    handle = causal(tiny_model, tokenizer)
    ids = tokenize_records(tokenizer, made, max_length=sys.maxsize).ids
    assert any(len(x) > 128 for x in ids)  # truncated, as the AR probe truncates
    cuts = []
    cut = handle.adapter.select_cache
    monkeypatch.setattr(handle.adapter, "select_cache", lambda c, rows, n: cuts.append(n) or cut(c, rows, n))
    with pytest.warns(UserWarning, match="truncated"):
        whole = probe_ar(handle, made, config)
        reused = neighbour_stats(handle, made, config)
        plain = probe_ar(handle, texts, config)
    assert cuts  # batches continued from their texts' caches (the swaps of a first word, d = 1, ran whole, and
    # the swap past the truncation, d = 128, ran nothing)
    assert np.array_equal(whole.offsets, reused.offsets)
    for field in ("logp", "top1_logp", "mu", "sigma", "entropy"):
        np.testing.assert_allclose(getattr(reused, field), getattr(whole, field), atol=ATOL, rtol=RTOL)
    np.testing.assert_allclose(neighbourhood(NeighbourStats(plain, reused, owner)),
                               neighbourhood(NeighbourStats(plain, whole, owner)), atol=1e-5)


def test_every_neighbour_runs_whole_when_the_cache_cannot_be_cut(tiny_model, tokenizer, tiny_dlm, monkeypatch):
    made, _, _ = neighbour_cases(tiny_dlm.handle())
    handle = causal(tiny_model, tokenizer)
    monkeypatch.setattr(handle.adapter, "cache_selectable", lambda cache: False)  # a sliding-window model's
    monkeypatch.setattr(handle.adapter, "select_cache", lambda *a: pytest.fail("the cache was cut"))
    with pytest.warns(UserWarning, match="truncated"):
        whole, reused = probe_ar(handle, made), neighbour_stats(handle, made)
    np.testing.assert_allclose(reused.logp, whole.logp, atol=ATOL, rtol=RTOL)


def test_reusing_the_text_past_the_first_differing_token_is_caught(tiny_model, tokenizer, monkeypatch):
    """The comparison above fails when a neighbour reads its text's cache or statistics one token too far."""
    texts = TextSet.from_texts(TEXTS[:3])
    made = TextSet([_neighbour(r, r.target.replace(" ", " zebra ", 1), 0) for r in texts.records])
    handle = causal(tiny_model, tokenizer)
    whole = probe_ar(handle, made)
    np.testing.assert_allclose(neighbour_stats(handle, made).logp, whole.logp, atol=ATOL, rtol=RTOL)
    right = neighbour_ar.first_difference
    monkeypatch.setattr(neighbour_ar, "first_difference", lambda a, b: min(right(a, b) + 1, len(a)))
    assert np.abs(neighbour_stats(handle, made).logp - whole.logp).max() > 0.1


def test_batches_of_neighbours_by_where_they_start():
    starts, lengths = np.array([0, 30, 28, 5, 29, 31, 27]), np.array([40, 40, 41, 40, 40, 39, 40])

    def batches(**limits):
        found = start_batches(starts, lengths, limits.get("budget"), limits.get("size"), span=limits.get("span"),
                              forward_cost=limits.get("cost", 20))
        assert sorted(np.concatenate(found).tolist()) == list(range(len(starts)))
        for b in found:  # within every limit given
            assert len(b) == 1 or (len(b) <= limits.get("size", 7)
                                   and len(b) * (lengths[b].max() - starts[b].min()) <= limits.get("budget", 1e9)
                                   and len(b) * lengths[b].max() <= limits.get("span", 1e9))
        return [b.tolist() for b in found]

    # a forward costs 20 tokens: the late starts share one, the early ones another (joining the late ones would feed
    # 6 × (41 − 5) = 216 tokens, more than 5 × 14 + 35 + 20 apart); the cheapest cut within the limits
    assert batches() == [[5, 1, 4, 2, 6], [3, 0]]
    assert batches(cost=0) == [[i] for i in (5, 1, 4, 2, 6, 3, 0)]  # free forwards: no row feeds a token too many
    assert batches(budget=40) == [[5, 1, 4], [2, 6], [3], [0]]  # 4 × (41 − 28) > 40, and 2 × (40 − 0) > 40
    assert batches(size=3) == [[5, 1, 4], [2, 6], [3, 0]]
    assert batches(span=100) == [[5], [1, 4], [2, 6], [3, 0]]  # cached positions too: 2 × 41 ≤ 100 < 3 × 40
    # neighbours of a long text and of a short one, their starts interleaved: each text's run apart
    starts, lengths = np.array([60, 50, 58, 40, 55, 45]), np.array([81, 134, 80, 134, 81, 133])
    assert batches() == [[1, 5, 3], [0, 2, 4]]


def test_a_record_without_its_text_is_refused(tiny_model, tokenizer):
    with pytest.raises(LmauditError, match="names no text it is a neighbour of"):
        neighbour_stats(causal(tiny_model, tokenizer), TextSet.from_texts(TEXTS[:2]))


def test_shards_that_split_a_texts_neighbours_and_their_cache(tiny_model, tokenizer, tmp_path, monkeypatch):
    texts = TextSet.from_texts(TEXTS[:3])
    made = TextSet([_neighbour(r, r.target.replace(" ", word, 1), j) for j, word in enumerate((" zebra ", " red "))
                    for r in texts.records][::-1])  # each text's neighbours apart, in shards of 4
    handle = causal(tiny_model, tokenizer, "tiny")
    whole = probe_ar(handle, made)
    first = ARStats.concat(neighbour_shards(handle, made, cache_dir=tmp_path, shard_size=4).all())
    np.testing.assert_allclose(first.logp, whole.logp, atol=ATOL, rtol=RTOL)
    monkeypatch.setattr(neighbour_ar, "_run_neighbour_probe", lambda *a: pytest.fail("computed again"))
    again = ARStats.concat(neighbour_shards(handle, made, cache_dir=tmp_path, shard_size=4).all())
    assert np.array_equal(again.logp, first.logp)  # read back from the cache
    other = TextSet([Record(r.id, r.target, r.context, {ORIGINAL: r.fields[ORIGINAL] + " More."})
                     for r in made.records])
    with pytest.raises(pytest.fail.Exception, match="computed again"):  # their texts are part of the key
        neighbour_shards(handle, other, cache_dir=tmp_path, shard_size=4)


def test_a_special_tokens_text_inside_a_record_is_text(tiny_dlm_dir):
    """Docstrings say ``defaults to "<pad>"``: the masked model reads that as the characters it is, so the text decodes
    back to itself and every neighbour keeps it (read as the token, the text could not be rebuilt and was refused)."""
    dlm = load_model(tiny_dlm_dir)
    pad, mask = dlm.tokenizer.pad_token, dlm.tokenizer.mask_token
    texts = TextSet.from_texts([f'The padding token, defaults to "{pad}", fills short rows in the batch.',
                                f"Replace a word by {mask} and ask the model to fill it back in."])
    made, owner, forwards, _ = neighbour_set(texts, make_neighbours(dlm, texts, NeighbourSettings(n=3)))
    assert np.array_equal(np.bincount(owner), [3, 3])
    for rec, i in zip(made.records, owner):
        assert (pad if i == 0 else mask) in rec.target and rec.target != texts.texts[i]
    plain = tokenize_records(dlm.tokenizer, texts, max_length=sys.maxsize, first_scorable=0)
    split = tokenize_records(dlm.tokenizer, texts, max_length=sys.maxsize, first_scorable=0, split_special=True)
    assert all(len(b) > len(a) for a, b in zip(plain.ids, split.ids))  # the tag is several plain pieces


def test_the_texts_run_in_their_neighbours_probe_and_nowhere_else(tiny_model_dir, tiny_dlm_dir, monkeypatch):
    """The neighbourhood attack alone makes no plain pass: its texts run whole in the neighbours' probe, each just
    before its own neighbours, with the statistics of the plain pass; beside ``loss`` the loss scores are those of
    ``loss`` alone, bit for bit (the plain pass stays its own)."""
    import lmaudit.runs.mia_groups as groups
    import lmaudit.runs.peer_groups as peers

    plain, probed = [], []
    real_plain, real_neighbours = groups.probe_ar_shards, peers.neighbour_shards
    monkeypatch.setattr(groups, "probe_ar_shards",
                        lambda h, ts, *a, **k: plain.append(ts) or real_plain(h, ts, *a, **k))
    monkeypatch.setattr(peers, "neighbour_shards",
                        lambda h, ts, *a, **k: probed.append(ts) or real_neighbours(h, ts, *a, **k))
    handle, texts = load_model(tiny_model_dir), TextSet.from_texts(TEXTS, source="texts")
    params = {"neighbourhood": {"model": str(tiny_dlm_dir), "n": 3, "top": 2}}
    alone = score_set(handle, texts, config=RunConfig(attacks=["neighbourhood"], params=params, use_cache=False))
    assert plain == [] and len(probed) == 1
    records = probed[0].records
    assert len(records) == len(TEXTS) * 4 and [records[4 * i].target for i in range(len(TEXTS))] == TEXTS
    assert all(r.fields[ORIGINAL] == TEXTS[i // 4] for i, r in enumerate(records))  # each text, then its own
    stats = neighbour_stats(handle, probed[0])
    own = stats.take(np.arange(0, len(records), 4))
    want = probe_ar(handle, texts)
    assert np.array_equal(own.offsets, want.offsets)
    np.testing.assert_allclose(own.logp, want.logp, atol=ATOL, rtol=RTOL)
    both = score_set(handle, texts, config=RunConfig(attacks=["neighbourhood", "loss"], params=params,
                                                     use_cache=False))
    assert [ts.source for ts in plain] == ["texts"]
    np.testing.assert_array_equal(both["neighbourhood"], alone["neighbourhood"])
    loss = score_set(handle, texts, config=RunConfig(attacks=["loss"], use_cache=False))["loss"]
    np.testing.assert_array_equal(both["loss"], loss)
