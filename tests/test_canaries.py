"""One-run canary audit (Steinke, Nasr, Jagielski 2023): the theorem's bound, canary folders, the commands."""

import json
import math
import re

import numpy as np
import pandas as pd
import pytest
from scipy.optimize import brentq
from scipy.special import expit, logit
from scipy.stats import beta, binom

from helpers import assert_ok, assert_user_error, lmaudit
from lmaudit.errors import LmauditError
from lmaudit.folders import write_manifest
from lmaudit.privacy.canaries import make_canaries, read_canary_folder, write_canary_folder
from lmaudit.privacy.one_run import canary_audit, epsilon_one_run, guess_pairs, p_value

# --- the theorem on hand-set counts --------------------------------------------------------------------------------

def test_bound_matches_the_binomial_tail_solved_directly():
    # r = 100 guesses, 90 correct, δ = 0, 95%: the ε with P[Binomial(100, e^ε/(1+e^ε)) ≥ 90] = 0.05
    solved = brentq(lambda e: binom.sf(89, 100, expit(e)) - 0.05, 0, 20, xtol=1e-12)
    closed = logit(beta.ppf(0.05, 90, 11))  # the same, as the Clopper–Pearson lower bound of 90/100
    eps = epsilon_one_run(1000, 100, 90, delta=0.0, confidence=0.95)
    assert eps == pytest.approx(solved, abs=1e-8) and eps == pytest.approx(closed, abs=1e-8)
    assert eps == pytest.approx(1.6308, abs=1e-4)


def test_more_correct_guesses_give_a_larger_bound_and_chance_gives_zero():
    bounds = [epsilon_one_run(1000, 100, v, delta=1e-5, confidence=0.95) for v in range(40, 101)]
    assert all(b == 0 for b in bounds[:19])  # up to 58 of 100: P[Binomial(100, ½) ≥ 58] = 0.067 > 0.05
    positive = [b for b in bounds if b > 0]
    assert len(positive) >= 40 and bounds[-len(positive):] == positive  # zero, then positive from some v on
    assert np.all(np.diff(positive) > 0)  # strictly increasing in the number correct
    first = 101 - len(positive)  # the fewest correct guesses that refute ε = 0
    assert p_value(1000, 100, first, 0.0, 1e-5) < 0.05 <= p_value(1000, 100, first - 1, 0.0, 1e-5)


def test_all_correct_with_few_guesses_is_bounded():
    # 10 of 10 right: q^10 = 0.05 → ε = logit(0.05^(1/10)) ≈ 1.05, however sure each guess was
    assert epsilon_one_run(10, 10, 10, delta=0.0, confidence=0.95) == pytest.approx(logit(0.05 ** 0.1), abs=1e-8)
    assert epsilon_one_run(10, 10, 10, delta=0.0, confidence=0.95) == pytest.approx(1.0519, abs=1e-4)
    assert epsilon_one_run(10, 0, 0, delta=1e-5, confidence=0.95) == 0.0


def test_the_delta_term_follows_the_paper():
    m, r, v, eps, delta = 50, 20, 16, 0.7, 1e-3
    q = math.exp(eps) / (1 + math.exp(eps))
    tail = sum(math.comb(r, k) * q ** k * (1 - q) ** (r - k) for k in range(v, r + 1))
    alpha = max(sum(math.comb(r, k) * q ** k * (1 - q) ** (r - k) for k in range(v - i, v)) / i
                for i in range(1, v + 1))
    assert p_value(m, r, v, eps, delta) == pytest.approx(tail + 2 * m * delta * alpha, rel=1e-10)
    # a larger δ (or more canaries) lowers the bound; the δ term makes it smaller than the δ = 0 one
    e0, e1, e2 = (epsilon_one_run(mm, 200, 180, delta=d, confidence=0.95) for mm, d in
                  ((1000, 0.0), (1000, 1e-4), (10_000, 1e-4)))
    assert e0 > e1 > e2 > 0


# --- the audit over canary scores ----------------------------------------------------------------------------------

def test_audit_counts_guesses_and_applies_bonferroni():
    m = 100
    included = np.arange(m) % 2 == 0
    scores = np.where(included, 1.0, 0.0) + np.arange(m) * 1e-6  # a perfect separation, no ties
    b = canary_audit(scores, included, delta=1e-5, confidence=0.95)
    pairs = guess_pairs(m)
    assert b.pairs_tried == len(pairs) == 63
    assert b.correct == b.guesses == b.k_plus + b.k_minus  # perfect: every guess right
    assert b.epsilon == pytest.approx(epsilon_one_run(m, b.guesses, b.correct, delta=1e-5,
                                                      confidence=1 - 0.05 / len(pairs)))
    # no uncorrected pair could be worse: the corrected bound is below the best uncorrected one
    assert b.epsilon < epsilon_one_run(m, 100, 100, delta=1e-5, confidence=0.95)
    # reversing the scores turns every guess wrong: nothing refuted
    assert canary_audit(-scores, included).epsilon == 0.0


def test_audit_is_valid_on_randomized_response_canaries():
    eps, m = 2.0, 1000
    bounds = []
    for seed in range(30):
        rng = np.random.default_rng(seed)
        included = rng.random(m) < 0.5
        flip = rng.random(m) < expit(eps)  # the ε-DP answer "in" w.p. e^ε/(1+e^ε) when in
        scores = np.where(included == flip, 1.0, 0.0) + rng.random(m) * 1e-3
        bounds.append(canary_audit(scores, included, delta=1e-5).epsilon)
    assert max(bounds) <= eps  # 95% each; none of 30 exceeds here
    assert np.mean(bounds) > 0.6 * eps


def test_audit_refuses_bad_input():
    with pytest.raises(LmauditError, match="delta"):
        canary_audit(np.zeros(4), np.ones(4, bool), delta=0)
    with pytest.raises(LmauditError, match="confidence"):
        canary_audit(np.zeros(4), np.ones(4, bool), confidence=1)
    with pytest.raises(LmauditError, match="NaN"):
        canary_audit(np.r_[np.nan, 0.0], np.ones(2, bool))


# --- canary folders ------------------------------------------------------------------------------------------------

def test_canary_folder_files_belong_together(tmp_path):
    info = write_canary_folder(tmp_path / "c", 2000, "random", seed=4)
    rows = [json.loads(line) for line in (tmp_path / "c" / "canaries.jsonl").read_text().splitlines()]
    train = [json.loads(line) for line in (tmp_path / "c" / "train_canaries.jsonl").read_text().splitlines()]
    decoys = [json.loads(line) for line in (tmp_path / "c" / "decoys.jsonl").read_text().splitlines()]
    assert len(rows) == 2000 and all(set(r) == {"id", "text"} for r in rows)  # no labels
    assert [r["id"] for r in train] == info["included"] and len(train) == info["n_included"]
    assert {r["text"] for r in train} <= {r["text"] for r in rows}
    assert 900 <= info["n_included"] <= 1100  # fair coins (±4.5 sd)
    assert len(decoys) == info["n_decoys"] == 1000  # ⌈N/2⌉: about as many as the canaries trained on
    assert not {d["text"] for d in decoys} & {r["text"] for r in rows}
    ids, included = read_canary_folder(tmp_path / "c")
    assert ids == [r["id"] for r in rows] and included.sum() == info["n_included"]
    # seeded: the same texts and coins again; another seed, others
    again = write_canary_folder(tmp_path / "d", 2000, "random", seed=4)
    assert again == info \
        and (tmp_path / "d" / "canaries.jsonl").read_bytes() == (tmp_path / "c" / "canaries.jsonl").read_bytes()
    assert write_canary_folder(tmp_path / "e", 2000, "random", seed=5)["included"] != info["included"]


def test_canary_kinds():
    random, rare, pii = (make_canaries(50, kind, seed=0) for kind in ("random", "rare", "pii"))
    assert all(len(set(texts)) == 50 for texts in (random, rare, pii))
    assert all(re.fullmatch(r"([a-z0-9]{4,9} ){7}[a-z0-9]{4,9}", t) for t in random)
    assert all(t.endswith(".") and len(t.split()) == 10 for t in rare)
    assert all(re.search(r"<[^@\s]+@[^>\s]+>", t) and re.search(r"\d{3}-\d{3}-\d{4}", t) for t in pii)
    with pytest.raises(LmauditError, match="unknown canary kind"):
        make_canaries(5, "words")


# --- the commands --------------------------------------------------------------------------------------------------

def _scored_run(folder, ids, scores):
    """A run folder whose scores.parquet scores the canaries (with a few decoys, as lmaudit mia would)."""
    folder.mkdir()
    frame = pd.DataFrame({"id": list(ids) + ["decoy-0", "decoy-1"], "label": [1] * len(ids) + [0, 0],
                          "loss": list(scores) + [0.0, 0.0]})
    frame.to_parquet(folder / "scores.parquet")
    (folder / "results.json").write_text(json.dumps({"attacks": {"loss": {}}, "target": {}}))
    write_manifest(folder, "run")
    return folder


def test_canaries_command_and_epsilon_with_canaries(tmp_path):
    assert_ok(out := lmaudit("corpus", "canaries", "--n", "400", "--kind", "rare", "--out", tmp_path / "c"))
    assert "train_canaries.jsonl" in out.stdout and "included.json" in out.stdout
    ids, included = read_canary_folder(tmp_path / "c")
    rng = np.random.default_rng(0)
    run = _scored_run(tmp_path / "run", ids, included * 1.0 + rng.normal(size=400) * 0.3)
    out = lmaudit("epsilon", run, "--canaries", tmp_path / "c")
    assert_ok(out)
    res = json.loads((run / "epsilon.json").read_text())
    direct = canary_audit(pd.read_parquet(run / "scores.parquet").set_index("id").loc[ids, "loss"], included)
    assert res["mode"] == "canaries" and res["attacks"]["loss"] == pytest.approx(direct.to_dict())
    assert direct.epsilon > 1.0
    for needle in ("k+", "correct", f"{direct.epsilon:.3f}", "Bonferroni", "one run"):
        assert needle in out.stdout


def test_epsilon_with_canaries_refuses_mismatched_or_missing_files(tmp_path):
    write_canary_folder(tmp_path / "a", 50, "random", seed=0)
    write_canary_folder(tmp_path / "b", 50, "random", seed=1)
    ids, _ = read_canary_folder(tmp_path / "a")
    run = _scored_run(tmp_path / "run", ids, np.zeros(50))
    # an inclusion list from another canary file
    (tmp_path / "a" / "included.json").write_bytes((tmp_path / "b" / "included.json").read_bytes())
    assert_user_error(lmaudit("epsilon", run, "--canaries", tmp_path / "a"), "included.json does not belong to",
                      "SHA-256")
    (tmp_path / "a" / "included.json").unlink()
    assert_user_error(lmaudit("epsilon", run, "--canaries", tmp_path / "a"), "included.json: missing")
    # canaries the run did not score
    run2 = _scored_run(tmp_path / "run2", ids[:45], np.zeros(45))
    assert_user_error(lmaudit("epsilon", run2, "--canaries", tmp_path / "b"), "5 of 50 canaries have no score",
                      "canary-45", "--members")


def test_one_run_audit_end_to_end_with_a_model(tmp_path, tiny_model_dir):
    """The documented commands: canaries → (training: none here) → mia on them → epsilon --canaries."""
    assert_ok(lmaudit("corpus", "canaries", "--n", "40", "--out", tmp_path / "c"))
    assert_ok(lmaudit("mia", "--model", tiny_model_dir, "--members", tmp_path / "c" / "canaries.jsonl",
                      "--nonmembers", tmp_path / "c" / "decoys.jsonl", "--attacks", "loss", "--bootstrap", "10",
                      "--out", tmp_path / "run", "--no-report", "--no-cache"))
    scored = set(pd.read_parquet(tmp_path / "run" / "scores.parquet")["id"])
    assert set(read_canary_folder(tmp_path / "c")[0]) <= scored  # ids travel from canaries.jsonl
    out = lmaudit("epsilon", tmp_path / "run", "--canaries", tmp_path / "c")
    assert_ok(out)
    # a model that never saw the canaries: its scores do not depend on the coins
    assert json.loads((tmp_path / "run" / "epsilon.json").read_text())["attacks"]["loss"]["epsilon"] < 0.5


def test_the_counts_of_a_canary_folder_add_up_as_the_command_says(tmp_path):
    """--n N: N canaries, each trained on with probability 1/2, the rest never; and ⌈N/2⌉ decoys besides."""
    out = lmaudit("corpus", "canaries", "--n", "40", "--out", tmp_path / "c")
    assert_ok(out)
    lines = {name: (tmp_path / "c" / name).read_text().splitlines()
             for name in ("canaries.jsonl", "train_canaries.jsonl", "decoys.jsonl")}
    info = json.loads((tmp_path / "c" / "included.json").read_text())
    trained = len(lines["train_canaries.jsonl"])
    assert len(lines["canaries.jsonl"]) == 40 and trained == info["n_included"] == 16
    assert len(lines["decoys.jsonl"]) == info["n_decoys"] == 20
    said = " ".join(out.stdout.split())
    assert "40 random canaries" in said and "16 to train on" in said and "the other 24 are never trained on" in said
    assert "20 decoys, no canary and never trained on" in said
    shown = lmaudit("corpus", "canaries", "--help").stdout
    assert "ceil(N/2) decoys" in " ".join(shown.replace("│", " ").split())
    assert write_canary_folder(tmp_path / "odd", 7, "random")["n_decoys"] == 4


def test_canaries_command_refuses_bad_options(tmp_path):
    assert_user_error(lmaudit("corpus", "canaries", "--n", "1", "--out", tmp_path / "x"), "--n must be an integer")
    assert_user_error(lmaudit("corpus", "canaries", "--kind", "emoji", "--out", tmp_path / "x"),
                      "unknown canary kind 'emoji'")
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep")
    assert_user_error(lmaudit("corpus", "canaries", "--out", tmp_path / "mine"), "lmaudit did not write")
