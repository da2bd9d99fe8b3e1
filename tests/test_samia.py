"""SaMIA: ROUGE-1 by hand, the score of a model that reproduces a text's remainder or writes something else, draws
seeded by a text's content (not its place in the set or shard), its listing, and a whole run on the tiny AR model."""

from __future__ import annotations

import json
import zlib

import numpy as np
import pytest

import lmaudit
from helpers import assert_ok, causal, make_texts
from helpers import lmaudit as cli
from lmaudit.attacks import get_attack
from lmaudit.attacks.samia import rouge_1
from lmaudit.attacks.selection import by_access, select_attacks
from lmaudit.data.loaders import TextSet
from lmaudit.errors import LmauditError
from lmaudit.metrics import auc
from lmaudit.models.adapters import ARAdapter
from lmaudit.probes.records import SampleStats
from lmaudit.probes.requests import SampleRequest
from lmaudit.probes.samples import draw_samples, sample_shards

SAMIA = get_attack("samia", "ar")
MEMBERS, NONMEMBERS = make_texts(8, seed=31), make_texts(8, seed=32)


def records(truth: list[str], samples: list[list[str]]) -> SampleStats:
    n = len(truth)
    return SampleStats(truth=np.array(truth, dtype=str), samples=np.array(samples, dtype=str),
                       prefix=np.ones(n, dtype=np.int64), remainder=np.ones(n, dtype=np.int64),
                       sample_keys=np.arange(n, dtype=np.uint64), n_tokens=np.full(n, 2, dtype=np.int64))


def test_rouge_1_by_hand():
    # candidate: the ×3, cat; reference: the, cat, sat. Clipped overlap: min(3, 1) + 1 = 2 (unclipped it would be 4)
    assert rouge_1("the the the cat", "the cat sat") == pytest.approx(2 / 3)  # recall: 2 of the reference's 3 words
    assert rouge_1("the the the cat", "the cat sat", "f1") == pytest.approx(4 / 7)  # P = 2/4, R = 2/3: 2PR/(P+R)
    assert rouge_1("mat the on sat cat the", "the cat sat on the mat") == 1.0  # order does not count: unigrams
    assert rouge_1("sat on", "the cat sat on the mat") == pytest.approx(2 / 6)  # short: recall low, precision 1
    assert rouge_1("sat on", "the cat sat on the mat", "f1") == pytest.approx(2 * 1 * (1 / 3) / (1 + 1 / 3))
    assert rouge_1("The Cat", "the cat") == 0.0  # case is kept
    assert rouge_1("a  b\n c", "c b a") == 1.0  # words split on any whitespace
    assert rouge_1("", "the cat") == 0.0 and rouge_1("the cat", "   ") == 0.0  # no word on a side: 0


def test_the_score_is_the_mean_over_samples_with_the_zlib_weight():
    stats = records(["the cat sat", "x y"], [["the the the cat", "dog"], ["y x", "x q"]])
    np.testing.assert_allclose(SAMIA(stats), [(2 / 3 + 0) / 2, (1 + 1 / 2) / 2], rtol=1e-12)
    np.testing.assert_allclose(SAMIA(stats, measure="f1"), [(4 / 7 + 0) / 2, (1 + 1 / 2) / 2], rtol=1e-12)
    size = [len(zlib.compress(t.encode())) for t in ("the the the cat", "y x", "x q")]
    np.testing.assert_allclose(SAMIA(stats, zlib_weight=True), [2 / 3 * size[0] / 2, (size[1] + size[2] / 2) / 2],
                               rtol=1e-12)


def test_parameters_are_checked():
    for bad in ({"prefix": 0.0}, {"prefix": 1.0}, {"n": 0}, {"temperature": -1.0}, {"measure": "precision"}):
        with pytest.raises(LmauditError, match=f"samia.{next(iter(bad))}"):
            SAMIA.check(bad)
    # the probe request holds what changes the draws only: the measure and the weight rescore the same samples
    assert SAMIA.probe({**SAMIA.params, "measure": "f1", "zlib_weight": True}, 16) == SampleRequest()
    assert SAMIA.probe({**SAMIA.params, "n": 3, "prefix": 0.25}, 16) == SampleRequest(n=3, prefix=0.25)


def _truth(self, ids, masked, *, samples, seed=0, **_):
    return np.tile(np.asarray(ids)[masked], (samples, 1))


def _elsewhere(tokenizer):
    """A fill that writes other words (none of the texts'), as many tokens as asked."""
    other = tokenizer(" zebra quartz" * 40, add_special_tokens=False)["input_ids"]

    def fill(self, ids, masked, *, samples, seed=0, **_):
        return np.tile(np.asarray(other[: len(masked)]), (samples, 1))
    return fill


def test_a_model_that_reproduces_the_remainder_scores_one_and_one_that_does_not_scores_zero(tiny_model, tokenizer,
                                                                                            monkeypatch):
    handle = causal(tiny_model, tokenizer)
    texts = TextSet.from_texts(MEMBERS)
    calls = []

    def spy(self, ids, masked, **kw):
        calls.append((np.asarray(ids).copy(), np.asarray(masked).copy()))
        return _truth(self, ids, masked, **kw)

    monkeypatch.setattr(ARAdapter, "fill", spy)
    stats = draw_samples(handle, texts, SampleRequest(n=4, prefix=0.5))
    assert stats.samples.shape == (len(MEMBERS), 4)
    np.testing.assert_array_equal(SAMIA(stats), 1.0)
    for text, (ids, masked), truth in zip(MEMBERS, calls, stats.truth):
        n_target = len(ids) - 1  # after <bos>
        assert masked.tolist() == list(range(1 + n_target // 2, len(ids)))  # the remainder: the last ⌈L/2⌉ tokens
        assert tokenizer.decode(ids[1:masked[0]]) + truth == text  # the prefix, then the remainder: the text

    monkeypatch.setattr(ARAdapter, "fill", _elsewhere(tokenizer))
    np.testing.assert_array_equal(SAMIA(draw_samples(handle, texts, SampleRequest(n=4, prefix=0.5))), 0.0)


def test_draws_are_seeded_by_the_text_not_its_place(tiny_model, tokenizer):
    handle = causal(tiny_model, tokenizer)
    texts = MEMBERS + NONMEMBERS
    request = SampleRequest(n=3, prefix=0.5)
    whole = draw_samples(handle, TextSet.from_texts(texts), request, seed=5)
    perm = np.random.default_rng(1).permutation(len(texts))
    shuffled = draw_samples(handle, TextSet.from_texts([texts[i] for i in perm]), request, seed=5)
    np.testing.assert_array_equal(shuffled.samples, whole.samples[perm])
    np.testing.assert_array_equal(SAMIA(shuffled), SAMIA(whole)[perm])
    sharded = sample_shards(handle, TextSet.from_texts(texts), request, seed=5, shard_size=3)
    np.testing.assert_array_equal(SampleStats.concat(sharded.all()).samples, whole.samples)
    # the draws are random (so the checks above could fail): another run seed draws other continuations
    other = draw_samples(handle, TextSet.from_texts(texts), request, seed=6)
    assert (other.samples != whole.samples).mean() > 0.5


def test_listed_with_generation_access_and_opt_in():
    result = cli("attacks", "--json", "--kind", "ar")
    assert_ok(result)
    listed = {s["name"]: s for s in json.loads(result.output)}
    assert listed["samia"]["access"] == "generation"
    assert listed["samia"]["params"] == {"n": 10, "prefix": 0.5, "temperature": 1.0, "measure": "recall",
                                         "zlib_weight": False}
    assert "samia" not in [s.name for s in select_attacks(None, "ar").specs]  # costly: only when asked for
    assert "samia" in [s.name for s in select_attacks(None, "ar", params={"samia": {"n": 2}}).specs]
    runs, skipped, _ = by_access([SAMIA, get_attack("loss", "ar")], "generation", named=False)
    assert [s.name for s in runs] == ["samia"] and list(skipped) == ["loss"]  # sampled text is all it needs


def run(model_dir, **params):
    return lmaudit.mia(model_dir, MEMBERS, NONMEMBERS, config=lmaudit.RunConfig(
        attacks=["samia", "loss"], params={"samia": {"n": 3, **params}}, n_bootstrap=20, blind=False))


@pytest.mark.filterwarnings("ignore:.*(fewer than 20 per class|tied at|the same score).*")
def test_mia_on_the_tiny_model(tiny_model_dir, tiny_model, tokenizer, monkeypatch):
    result = run(tiny_model_dir)
    metrics = result.attacks["samia"]
    assert metrics["forwards_per_sample"] == 3.0 and metrics["params"]["n"] == 3
    assert any("3 continuation(s) of each text" in note for note in metrics["notes"])
    scores = result.scores["samia"]
    assert scores.shape == (16,) and np.all((scores >= 0) & (scores <= 1))

    def fails(*args, **kwargs):
        raise AssertionError("sampled again")

    monkeypatch.setattr(ARAdapter, "fill", fails)  # a second run reads the cached draws
    np.testing.assert_array_equal(run(tiny_model_dir).scores["samia"], result.scores["samia"])
    both = TextSet.from_texts(MEMBERS + NONMEMBERS)
    probed = lmaudit.probe(tiny_model_dir, both, config=lmaudit.RunConfig(attacks=["samia"],
                                                                        params={"samia": {"n": 3}}))
    drawn = probed.stats[SampleRequest(n=3)]
    np.testing.assert_array_equal(SAMIA(drawn), result.scores["samia"])  # the run's scores are those of its draws
    f1 = lmaudit.score(probed, ["samia"], params={"samia": {"n": 3, "measure": "f1"}})["samia"]  # no new draw
    np.testing.assert_array_equal(f1, SAMIA(drawn, measure="f1"))
    with pytest.raises(AssertionError, match="sampled again"):  # other settings draw anew
        run(tiny_model_dir, prefix=0.25)
    monkeypatch.undo()
    want = draw_samples(causal(tiny_model, tokenizer), both, SampleRequest(n=3))
    np.testing.assert_array_equal(drawn.samples, want.samples)  # the model on disk drew what the probe draws here
    np.testing.assert_array_equal(drawn.truth, want.truth)

    # a model that reproduces the remainder of the members only: members score 1, the others 0
    def memorised(self, ids, masked, **kw):
        text = self.tokenizer.decode(np.asarray(ids), skip_special_tokens=True)
        return (_truth if text in MEMBERS else _elsewhere(self.tokenizer))(self, ids, masked, **kw)

    monkeypatch.setattr(ARAdapter, "fill", memorised)
    found = run(tiny_model_dir, n=2)
    np.testing.assert_array_equal(found.scores["samia"], np.r_[np.ones(8), np.zeros(8)])
    assert auc(found.labels, found.scores["samia"]) == 1.0


@pytest.mark.filterwarnings("ignore:.*(fewer than 20 per class|tied at|the same score).*")
def test_a_served_model_runs_it_from_sampled_text(tiny_model, tokenizer, tiny_model_dir):
    from test_served import FakeServer

    ids = tokenizer(MEMBERS[0])["input_ids"]
    remainder = tokenizer.decode(ids[1 + (len(ids) - 1) // 2:])
    server = FakeServer(tiny_model, tokenizer, bos=2, completion=remainder)  # every continuation: text 0's remainder
    try:
        result = lmaudit.mia(server.url, MEMBERS, NONMEMBERS, tokenizer=tiny_model_dir, config=lmaudit.RunConfig(
            attacks=["samia"], params={"samia": {"n": 2}}, n_bootstrap=0, blind=False))
    finally:
        server.close()
    scores = result.scores["samia"]
    assert result.skipped == {} and result.attacks["samia"]["forwards_per_sample"] == 2.0
    assert scores[0] > 0.8 and scores[0] > scores[1:].max()  # the text whose remainder came back, the others less
