"""The peer attacks (exact memorisation, extraction strength, ReCaLL, DC-PDD): each equals its definition computed
from a plain forward pass here, and scores texts a model was trained on higher."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

from helpers import causal, make_texts
from lmaudit.attacks import get_attack
from lmaudit.data.loaders import TextSet
from lmaudit.metrics import auc
from lmaudit.probes.ar import probe_ar
from lmaudit.probes.records import ARStats

TEXTS = make_texts(12, seed=91, min_words=4, max_words=25)


def plain(model, tokenizer, text: str) -> tuple[float, float]:
    """(exact match, extraction strength) of one text from ``model(ids).logits``: row t predicts token t + 1; the
    greedy continuation of x_≤k reproduces the rest when every later argmax is the text's token."""
    ids = torch.tensor([tokenizer(text)["input_ids"]])
    with torch.no_grad():
        logits = model(ids).logits[0, :-1]
    hits = (logits.argmax(dim=-1) == ids[0, 1:]).numpy()
    n = len(hits)
    k = min((j for j in range(n + 1) if hits[j:].all()), default=n)  # the shortest prefix of scored tokens
    return float(hits.mean()), 1.0 - k / n


@pytest.mark.parametrize("name, column", [("exact_match", 0), ("extraction_strength", 1)])
def test_equal_to_the_definition_on_a_plain_forward(tiny_model, tokenizer, name, column):
    stats = probe_ar(causal(tiny_model, tokenizer), TextSet.from_texts(TEXTS))
    want = np.array([plain(tiny_model, tokenizer, t)[column] for t in TEXTS])
    np.testing.assert_allclose(get_attack(name, "ar")(stats), want, rtol=0, atol=1e-12)


def _stats(hits: list[list[bool]]) -> ARStats:
    """ARStats whose top-1 hits are ``hits`` (a hit: logp equal to top1_logp; a miss: 1 nat below)."""
    flat = np.concatenate([np.asarray(h, dtype=bool) for h in hits])
    top1 = np.full(len(flat), -0.5, dtype=np.float32)
    offsets = np.r_[0, np.cumsum([len(h) for h in hits])].astype(np.int64)
    return ARStats(logp=np.where(flat, top1, top1 - 1).astype(np.float32), top1_logp=top1, mu=top1 - 2,
                   sigma=np.ones_like(top1), entropy=2 - top1, offsets=offsets,
                   zlib_len=np.full(len(hits), 50), sample_keys=np.arange(len(hits), dtype=np.uint64),
                   n_tokens=np.diff(offsets) + 1)


def test_extraction_strength_reads_the_last_miss():
    got = get_attack("extraction_strength", "ar")(_stats([[True] * 4, [False, True, True, True], [True, True, False],
                                                          [False] * 5, [True, False, True, True, True, True]]))
    np.testing.assert_allclose(got, [1.0, 1 - 1 / 4, 0.0, 0.0, 1 - 2 / 6])


def test_direction_on_members_whose_tails_are_reproduced():
    rng = np.random.default_rng(4)
    members = [list(rng.random(20) < 0.5) + [True] * int(rng.integers(1, 10)) for _ in range(30)]
    others = [list(rng.random(20) < 0.3) + [bool(rng.random() < 0.3)] for _ in range(30)]
    labels = np.r_[np.ones(30), np.zeros(30)].astype(int)
    for name in ("exact_match", "extraction_strength"):
        assert auc(labels, get_attack(name, "ar")(_stats(members + others))) > 0.75


def plain_recall(model, tokenizer, text: str, prefix: str) -> float:
    """LL(x | P) / LL(x) from two plain forwards: mean log-probability of x's tokens after x's first token, and of
    the same tokens after the prefix (the prefix's ids, then x's without its special tokens)."""
    def mean_ll(ids: list[int], start: int) -> float:
        t = torch.tensor([ids])
        with torch.no_grad():
            lp = torch.log_softmax(model(t).logits[0, :-1].double(), dim=-1)
        rows = torch.arange(len(ids) - 1)
        return float(lp[rows, t[0, 1:]][start - 1:].mean())

    alone = tokenizer(text)["input_ids"]
    head = tokenizer(prefix)["input_ids"]
    after = head + tokenizer(text, add_special_tokens=False)["input_ids"]
    return mean_ll(after, len(head)) / mean_ll(alone, 1)


def test_recall_equals_the_ratio_of_two_plain_forwards(tmp_path, tiny_model_dir, tiny_model, tokenizer):
    from lmaudit.models.loading import load_model
    from lmaudit.runs.mia import RunConfig, score_set

    shots = make_texts(3, seed=92, min_words=5, max_words=9)
    prefix = "".join(s + "\n\n" for s in shots)
    got = score_set(load_model(tiny_model_dir), TextSet.from_texts(TEXTS),
                    config=RunConfig(attacks=["recall"], params={"recall": {"prefix_texts": shots}}))["recall"]
    want = [plain_recall(tiny_model, tokenizer, t, prefix) for t in TEXTS]
    np.testing.assert_allclose(got, want, rtol=1e-5)


def test_recall_holds_out_non_members_and_reads_members_higher(tmp_path, tiny_model_dir, tiny_dlm_dir):
    """A tiny model fine-tuned on its members: the default prefix is 5 held-out non-members, scored by no attack,
    and the members' ratio is higher."""
    import json

    from helpers import lmaudit, write_jsonl
    from lmaudit.data.loaders import load_texts
    from lmaudit.models.build import finetune

    members = write_jsonl(tmp_path / "m.jsonl", make_texts(40, seed=93, min_words=4, max_words=9))
    nonmembers = write_jsonl(tmp_path / "n.jsonl", make_texts(45, seed=94, min_words=4, max_words=9))
    target = finetune(tiny_model_dir, load_texts(members), tmp_path / "ft", mode="dft", epochs=20, lr=3e-3,
                      block=32, batch_size=8)
    res = lmaudit("mia", "--model", target, "--members", members, "--nonmembers", nonmembers, "--attacks",
                  "loss,recall", "--bootstrap", 200, "--out", tmp_path / "run", "--no-report", "--no-blind")
    assert res.exit_code == 0, res.output
    got = json.loads((tmp_path / "run" / "results.json").read_text())
    assert got["held_out"]["n"] == 5 and got["n_nonmembers"] == 40 and len(got["held_out"]["ids"]) == 5
    assert got["attacks"]["recall"]["forwards_per_sample"] == 2
    print(f"recall AUC {got['attacks']['recall']['auc']:.3f}, loss {got['attacks']['loss']['auc']:.3f}")
    assert got["attacks"]["recall"]["auc"] > 0.6
    corpus = write_jsonl(tmp_path / "corpus.jsonl", make_texts(200, seed=96))
    res = lmaudit("mia", "--model", target, "--members", members, "--nonmembers", nonmembers, "--attacks", "dc_pdd",
                  "--param", f"dc_pdd.corpus={corpus}", "--bootstrap", 0, "--out", tmp_path / "dc", "--no-report",
                  "--no-blind")
    assert res.exit_code == 0, res.output
    found = json.loads((tmp_path / "dc" / "results.json").read_text())["attacks"]["dc_pdd"]["auc"]
    print(f"dc_pdd AUC {found:.3f}")
    assert found > 0.6
    res = lmaudit("mia", "--model", target, "--members", members, "--nonmembers", nonmembers, "--reference",
                  tiny_model_dir, "--attacks", "gradnorm,neighbourhood", "--param",
                  f"neighbourhood.model={tiny_dlm_dir}", "--param", "neighbourhood.n=8", "--bootstrap", 0, "--out",
                  tmp_path / "peers", "--no-report", "--no-blind")
    assert res.exit_code == 0, res.output
    peers = json.loads((tmp_path / "peers" / "results.json").read_text())
    for name in ("gradnorm", "neighbourhood"):
        print(f"{name} AUC {peers['attacks'][name]['auc']:.3f}")
        assert peers["attacks"][name]["auc"] > 0.6
    assert peers["attacks"]["neighbourhood"]["forwards_per_sample"] == 9
    assert any("GradNorm differentiates every parameter of the target: " in n
               for n in peers["attacks"]["gradnorm"]["notes"])
    assert {"gradnorm", "neighbourhood"} <= set(peers["set_check"]["reference"]["attacks"])  # the reference as target
    every = lmaudit("mia", "--model", target, "--members", members, "--nonmembers", nonmembers, "--bootstrap", 0,
                    "--out", tmp_path / "all", "--no-report", "--no-blind")
    assert every.exit_code == 0 and "skipping recall (opt-in" in " ".join(every.output.split())
    assert not {"recall", "gradnorm", "neighbourhood"} \
        & set(json.loads((tmp_path / "all" / "results.json").read_text())["attacks"])  # opt-in


def plain_dc_pdd(model, tokenizer, text: str, counts: np.ndarray, a: float = 0.01) -> float:
    """Mean over the text's distinct scored tokens (first occurrences) of min(p · log(1/f), a), f the
    Laplace-smoothed corpus frequency, p from a plain forward."""
    ids = tokenizer(text)["input_ids"]
    with torch.no_grad():
        probs = torch.softmax(model(torch.tensor([ids])).logits[0, :-1].double(), dim=-1)
    freq = (1 + counts) / (counts.sum() + len(counts))
    seen, alphas = set(), []
    for t, token in enumerate(ids[1:]):
        if token in seen:
            continue
        seen.add(token)
        alphas.append(min(float(probs[t, token]) * np.log(1 / freq[token]), a))
    return float(np.mean(alphas))


def test_dc_pdd_equals_the_definition_with_counts_of_a_corpus_file(tmp_path, tiny_model_dir, tiny_model, tokenizer):
    from helpers import write_jsonl
    from lmaudit.models.loading import load_model
    from lmaudit.runs.mia import RunConfig, score_set

    corpus = make_texts(200, seed=95)
    path = write_jsonl(tmp_path / "corpus.jsonl", corpus)
    counts = np.zeros(len(tokenizer), dtype=np.int64)
    for text in corpus:
        np.add.at(counts, tokenizer(text, truncation=True, max_length=1024)["input_ids"], 1)
    got = score_set(load_model(tiny_model_dir), TextSet.from_texts(TEXTS),
                    config=RunConfig(attacks=["dc_pdd"], params={"dc_pdd": {"corpus": str(path)}}))["dc_pdd"]
    np.testing.assert_allclose(got, [plain_dc_pdd(tiny_model, tokenizer, t, counts) for t in TEXTS], rtol=1e-5)
    np.save(tmp_path / "counts.npy", counts[:-1])
    with pytest.raises(Exception, match="counts for a vocabulary of .* this tokenizer has"):
        score_set(load_model(tiny_model_dir), TextSet.from_texts(TEXTS),
                  config=RunConfig(attacks=["dc_pdd"], params={"dc_pdd": {"corpus": str(tmp_path / "counts.npy")}}))


def test_recall_and_dc_pdd_refuse_what_they_cannot_use(tmp_path, tiny_model_dir):
    from helpers import write_jsonl
    from lmaudit.errors import DataError
    from lmaudit.models.loading import load_model
    from lmaudit.runs.mia import RunConfig, score_set

    model, texts = load_model(tiny_model_dir), TextSet.from_texts(TEXTS)

    def run(attack, **params):
        return score_set(model, texts, config=RunConfig(attacks=[attack], params={attack: params}))

    blank = tmp_path / "blank.jsonl"
    blank.write_text('{"text": " "}\n{"text": "\\t"}\n')
    with pytest.raises(DataError, match="blank.jsonl: line 1: field 'text' is empty"):  # the loader names it
        run("recall", prefix_file=str(blank))
    long = write_jsonl(tmp_path / "long.jsonl", [" ".join(f"word{i}" for i in range(400))])
    with pytest.warns(UserWarning, match=r"no whole prefix shot fits .* the prefix is the last (\d+) tokens") as said:
        cut = run("recall", prefix_file=str(long))["recall"]
    room = int(re.search(r"last (\d+) tokens", str(said[-1].message)).group(1))
    longest = max(len(model.tokenizer(t)["input_ids"]) for t in TEXTS)
    assert 16 <= room <= 128 - longest and np.isfinite(cut).all()  # the shot's end, cut to the room left
    nearly_full = TextSet.from_texts([" ".join(["word"] * 120)])
    with pytest.raises(DataError, match="which leaves fewer than 16 for a prefix"):
        score_set(model, nearly_full, config=RunConfig(attacks=["recall"], params={"recall": {
            "prefix_file": str(long)}}))
    with pytest.raises(DataError, match="blank.jsonl: line 1: field 'text' is empty"):
        run("dc_pdd", corpus=str(blank))


def test_recall_reads_the_same_tokens_of_both_passes():
    """A tokenizer without a start token scores one more token after a prefix: the prefixed pass's extra first
    token is left out; a prefixed text that lost tokens is refused."""
    from lmaudit.attacks.recall import same_tokens_mean
    from lmaudit.errors import DataError
    from lmaudit.probes.records import PrefixedStats

    plain = _stats([[True, False], [True, True, True]])
    prefixed = _stats([[False, True, False], [True, False, True, True]])  # one extra first token each
    prefixed.logp[:] = np.arange(7, dtype=np.float32)
    np.testing.assert_allclose(same_tokens_mean(PrefixedStats(plain, prefixed, 1)), [(1 + 2) / 2, (4 + 5 + 6) / 3])
    with pytest.raises(DataError, match="text 2 has 2 scored tokens after the prefix, 3 without it"):
        same_tokens_mean(PrefixedStats(plain, _stats([[True, True], [True, True]]), 1))


def test_dc_pdd_counts_the_embedded_corpus_by_default(monkeypatch, tokenizer):
    """With no corpus named, the counts are those of the embedded corpus' pretraining pool under the tokenizer."""
    from pathlib import Path

    import scipy

    from lmaudit.data.corpus import build_corpus
    from lmaudit.probes import frequencies

    small = build_corpus([str(Path(scipy.__file__).parent / "optimize")])
    monkeypatch.setattr(frequencies, "build_corpus", lambda *args, **kwargs: small)
    want = np.zeros(len(tokenizer), dtype=np.int64)
    for doc in small.pool("pretrain"):
        np.add.at(want, tokenizer(doc.text, truncation=True, max_length=1024)["input_ids"], 1)
    np.testing.assert_array_equal(frequencies.token_counts(tokenizer), want)
    assert want.sum() > 1000


@pytest.mark.parametrize("cached", [False, True])
def test_groups_that_read_the_plain_pass_share_one(tmp_path, monkeypatch, tiny_model_dir, cached):
    """loss, ReCaLL and DC-PDD all read the plain AR pass of the scored set: it runs once (with or without a cache),
    the prefixed one once more, and the scores equal those of each attack run alone."""
    import lmaudit.runs.mia_groups as groups
    from lmaudit.models.loading import load_model
    from lmaudit.runs.mia import RunConfig, score_set

    seen = []
    real = groups.probe_ar_shards

    def counted(handle, textset, config, **kwargs):
        seen.append((textset.source, config.reuse_prefix))
        return real(handle, textset, config, **kwargs)

    monkeypatch.setattr(groups, "probe_ar_shards", counted)
    from helpers import write_jsonl
    corpus = write_jsonl(tmp_path / "corpus.jsonl", make_texts(30, seed=97))
    params = {"recall": {"prefix_texts": make_texts(2, seed=98, min_words=5, max_words=9)},
              "dc_pdd": {"corpus": str(corpus)}}
    handle, texts = load_model(tiny_model_dir), TextSet.from_texts(TEXTS, source="texts")
    both = score_set(handle, texts, config=RunConfig(attacks=["loss", "recall", "dc_pdd"], params=params,
                                                     use_cache=cached))
    assert sorted(seen) == [("texts", False), ("texts after 2 shot(s)", True)]
    for name in ("loss", "recall", "dc_pdd"):
        own = {name: params[name]} if name in params else {}  # parameters of an attack not run are refused
        alone = score_set(handle, texts, config=RunConfig(attacks=[name], params=own, use_cache=False))[name]
        np.testing.assert_array_equal(both[name], alone)
