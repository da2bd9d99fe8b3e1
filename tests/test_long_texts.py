"""Long texts: one token limit, truncation counted per set, or every token scored in overlapping windows (AR)."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
import torch

from helpers import assert_ok, assert_user_error, causal, lmaudit, make_texts, write_jsonl
from lmaudit.data.loaders import TextSet
from lmaudit.probes.ar import ARProbeConfig, probe_ar
from lmaudit.probes.tokenize import TokenizedSet, windows

LIMIT = 16


def test_windows_score_every_token_once_with_left_context():
    ids = np.arange(10)
    scored = np.r_[False, np.ones(9, dtype=bool)]
    keys = np.zeros(2, dtype=np.uint64)
    tok = TokenizedSet([ids, ids[:3]], [scored, scored[:3]], np.zeros(2), keys, np.array([10, 3]))
    w_ids, w_scored, owner = windows(tok, length=4, stride=2)
    assert [w.tolist() for w in w_ids] == [[0, 1, 2, 3], [2, 3, 4, 5], [4, 5, 6, 7], [6, 7, 8, 9], [0, 1, 2]]
    assert [np.flatnonzero(s).tolist() for s in w_scored] == [[1, 2, 3], [2, 3], [2, 3], [2, 3], [1, 2]]
    assert owner.tolist() == [0, 0, 0, 0, 1]
    scored_tokens = np.concatenate([w[s] for w, s in zip(w_ids[:4], w_scored[:4])])
    assert scored_tokens.tolist() == list(range(1, 10))  # each token of sample 0 once, in order


def test_window_mode_scores_every_token_as_a_forward_on_its_window(tiny_model, tokenizer):
    text = " ".join(make_texts(3, seed=4, min_words=30, max_words=30))
    ids = tokenizer(text)["input_ids"]
    assert len(ids) > 2 * LIMIT
    ts = TextSet.from_texts([text])
    cut = probe_ar(causal(tiny_model, tokenizer), ts, ARProbeConfig(max_length=LIMIT))
    whole = probe_ar(causal(tiny_model, tokenizer), ts, ARProbeConfig(max_length=LIMIT, long_texts="window"))
    assert cut.lengths[0] == LIMIT - 1 and whole.lengths[0] == len(ids) - 1  # truncated vs every token after <bos>
    np.testing.assert_allclose(whole.logp[: LIMIT - 1], cut.logp, atol=1e-6)  # the first window is the truncation
    start = ((len(ids) - LIMIT) // (LIMIT // 2) + 1) * (LIMIT // 2) if len(ids) > LIMIT else 0  # the last window
    window = torch.tensor([ids[start:start + LIMIT]])
    with torch.no_grad():
        lp = torch.log_softmax(tiny_model(window).logits[0, :-1].double(), dim=-1)
    want = lp[torch.arange(window.shape[1] - 1), window[0, 1:]].numpy()
    new = len(ids) - max(start + LIMIT // 2, LIMIT)  # the tokens only the last window scores
    np.testing.assert_allclose(whole.logp[-new:], want[-new:], atol=1e-5)


@pytest.fixture
def long_sets(tmp_path, tokenizer):
    short = make_texts(6, seed=1, min_words=3, max_words=5)
    long = [" ".join(make_texts(2, seed=i, min_words=25, max_words=25)) for i in range(4)]
    write_jsonl(tmp_path / "m.jsonl", short[:3] + long[:3])  # 3 long members
    write_jsonl(tmp_path / "n.jsonl", short[3:] + long[3:])  # 1 long non-member
    assert all(len(tokenizer(t)["input_ids"]) > LIMIT for t in long)
    assert all(len(tokenizer(t)["input_ids"]) <= LIMIT for t in short)
    return tmp_path


@pytest.mark.parametrize("mode", ["truncate", "window"])
def test_mia_counts_long_texts_per_set_and_says_it_once(long_sets, tiny_model_dir, mode, monkeypatch):
    out = long_sets / mode
    monkeypatch.setenv("LMAUDIT_SHARD_SIZE", "2")  # several shards: still one line
    with pytest.warns(UserWarning) as caught:
        assert_ok(lmaudit("mia", "--model", str(tiny_model_dir), "--members", str(long_sets / "m.jsonl"),
                          "--nonmembers", str(long_sets / "n.jsonl"), "--out", str(out), "--attacks", "loss",
                          "--bootstrap", "10", "--max-tokens", str(LIMIT), "--long-texts", mode))
    res = json.loads((out / "results.json").read_text())
    assert res["long_texts"] == {"limit": LIMIT, "mode": mode, "members": 3, "nonmembers": 1}
    said = [str(w.message) for w in caught if "exceed" in str(w.message)]
    assert said == [f"3 member(s) and 1 non-member(s) exceed {LIMIT} tokens and were "
                    + ("scored in overlapping windows of that length" if mode == "window"
                       else "truncated to their first tokens (--long-texts window scores them whole)")]
    assert "3 member(s) and 1 non-member(s) over 16 tokens" in (out / "report.html").read_text()


def _one_attack_per_probe_kind() -> dict:
    """{request type: (model kind, attack)} for every registered probe kind, from the attack registry: the first
    attack of each kind that needs neither a reference nor shadows."""
    from lmaudit.attacks import list_attacks
    from lmaudit.runs.mia import peer_groups  # noqa: F401  (registers every probe kind)
    from lmaudit.runs.mia_groups import PROBE_KINDS

    picks = {}
    for kind in ("ar", "dlm"):
        for spec in list_attacks(kind):
            if not (spec.needs_reference or spec.needs_shadows):
                request = spec.probe({**spec.params, "prefix_texts": ("a shot",)}, 4)  # ReCaLL's prefix, given
                picks.setdefault(type(request), (kind, spec.name))
    assert set(picks) == set(PROBE_KINDS)  # a probe kind no attack asks for would go untested here
    return picks


PICKS = _one_attack_per_probe_kind()


@pytest.mark.parametrize("kind,attack", PICKS.values(), ids=[t.__name__ for t in PICKS])
def test_every_probe_kind_counts_the_long_texts_it_scored(long_sets, tiny_model_dir, tiny_dlm_dir, tmp_path,
                                                        kind, attack):
    """The counts are read from each probe kind's records (not from a tokenisation of their own): every kind that
    scores a text over the limit gives the counts the texts have (3 members, 1 non-member); ReCaLL, whose prefix
    needs room beside the longest text, refuses them before any probe."""
    shots = write_jsonl(tmp_path / "shots.jsonl", make_texts(2, seed=9, min_words=3, max_words=4))
    params = {"neighbourhood": [f"neighbourhood.model={tiny_dlm_dir}", "neighbourhood.n=2"],
              "samia": ["samia.n=2"], "dc_pdd": [f"dc_pdd.corpus={long_sets / 'm.jsonl'}"],
              "recall": [f"recall.prefix_file={shots}"]}.get(attack, [])
    out = tmp_path / attack
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ran = lmaudit("mia", "--model", str(tiny_dlm_dir if kind == "dlm" else tiny_model_dir),
                      "--members", str(long_sets / "m.jsonl"), "--nonmembers", str(long_sets / "n.jsonl"),
                      "--out", str(out), "--attacks", attack, "--bootstrap", "0", "--no-report", "--no-blind",
                      "--max-tokens", str(LIMIT), *[x for p in params for x in ("--param", p)])
    if attack == "recall":  # a ReCaLL prefix needs room beside the longest text: a text over the limit is refused
        assert_user_error(ran, f"no ReCaLL prefix fits in the context of {LIMIT} tokens")
        return
    assert_ok(ran)
    res = json.loads((out / "results.json").read_text())
    assert res["long_texts"] == {"limit": LIMIT, "mode": "truncate", "members": 3, "nonmembers": 1}
    assert [str(w.message) for w in caught if "exceed" in str(w.message)] == [
        f"3 member(s) and 1 non-member(s) exceed {LIMIT} tokens and were truncated to their first tokens "
        + ("(windows apply to AR models only)" if kind == "dlm" else "(--long-texts window scores them whole)")]


def test_a_run_served_from_the_probe_cache_counts_the_long_texts_without_tokenising(long_sets, tiny_model_dir,
                                                                                    monkeypatch):
    """The second run reads every probe from the cache: its counts come from the cached records, and no text is
    tokenised (the count used to tokenise every text once more, outside the probe)."""
    from transformers import PreTrainedTokenizerBase

    def run(out):
        assert_ok(lmaudit("mia", "--model", str(tiny_model_dir), "--members", str(long_sets / "m.jsonl"),
                          "--nonmembers", str(long_sets / "n.jsonl"), "--out", str(long_sets / out), "--attacks",
                          "loss,zlib", "--bootstrap", "0", "--no-report", "--no-blind", "--max-tokens", str(LIMIT)))
        return json.loads((long_sets / out / "results.json").read_text())["long_texts"]

    first = run("first")
    calls = []
    real = PreTrainedTokenizerBase.__call__
    monkeypatch.setattr(PreTrainedTokenizerBase, "__call__",
                        lambda self, *a, **k: calls.append(a) or real(self, *a, **k))
    assert run("again") == first == {"limit": LIMIT, "mode": "truncate", "members": 3, "nonmembers": 1}
    assert calls == []
