"""Blind baselines: model-free classifiers of the sets, scored out of fold, and the verdict that reads them."""

from __future__ import annotations

import json

import numpy as np
import pytest

from helpers import assert_user_error, lmaudit, make_texts, write_jsonl
from lmaudit.audit.blind import BASELINES, blind_scores, fold_count, held_out_p, scores_and_p, text_features
from lmaudit.data.shifted import alike_split, shifted_split
from lmaudit.errors import DataError
from lmaudit.metrics import auc, stratified_bootstrap

RNG = np.random.default_rng(7)
PLAIN = make_texts(40, seed=71, min_words=12, max_words=30)
DATED = [f"On {RNG.integers(1, 28)}/{RNG.integers(1, 12)}/{RNG.integers(1990, 2024)} the log in "
         f"{RNG.integers(1990, 2024)} read: {t}" for t in make_texts(40, seed=72, min_words=12, max_words=30)]


@pytest.mark.parametrize("baseline", BASELINES)
def test_a_planted_shift_is_found_without_any_model(baseline):
    labels = np.r_[np.ones(40), np.zeros(40)].astype(int)
    assert auc(labels, blind_scores(DATED + PLAIN, labels, baseline)) > 0.95


def test_scores_are_out_of_fold_so_unique_words_cannot_be_memorised():
    # every text carries a word of its own and the labels are random: a classifier scored on the texts it was
    # fitted on would reach AUC 1 by memorising those words; fitted on the other folds it learns nothing
    texts = [f"{t} tag{i}x{i}" for i, t in enumerate(make_texts(80, seed=73, min_words=10, max_words=20))]
    labels = np.random.default_rng(3).permutation(np.r_[np.ones(40), np.zeros(40)].astype(int))
    oof = auc(labels, blind_scores(texts, labels, "blind_ngrams"))
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression

    x = TfidfVectorizer().fit_transform(texts)
    in_sample = auc(labels, LogisticRegression(C=100, max_iter=1000).fit(x, labels).decision_function(x))
    assert in_sample > 0.99 and abs(oof - 0.5) < 0.2


def test_features_and_fold_counts():
    f = text_features(["In 1999 and 2004, on 12/03/2001: ABC def.", ""])
    assert f.shape == (2, 14) and f[0, 5] == 3 and f[0, 6] == 1 and f[1, 0] == 0  # years, dates, empty text
    # the years' values (earliest, latest, mean), 5 numbers (12/03/2001 holds three) and the largest; a text
    # without a year takes the others' median
    assert list(f[0, 9:]) == [1999, 2004, (1999 + 2004 + 2001) / 3, 5, np.log10(2005)]
    assert list(f[1, 9:12]) == [f[0, 11]] * 3
    assert fold_count(np.r_[np.ones(30), np.zeros(7)].astype(int)) == 3  # 7 non-members: 2 per fold → 3 folds
    with pytest.raises(DataError, match="at least 4 members and 4 non-members .* the smaller set has 3"):
        fold_count(np.r_[np.ones(30), np.zeros(3)].astype(int))


def test_mia_reads_the_blind_baseline_into_its_verdict_and_strict_sets_refuses(tmp_path, tiny_model_dir):
    members, nonmembers = write_jsonl(tmp_path / "m.jsonl", DATED), write_jsonl(tmp_path / "n.jsonl", PLAIN)
    res = lmaudit("mia", "--model", tiny_model_dir, "--members", members, "--nonmembers", nonmembers,
                  "--attacks", "loss,zlib", "--bootstrap", 200, "--out", tmp_path / "out", "--no-report")
    assert res.exit_code == 0, res.output
    got = json.loads((tmp_path / "out" / "results.json").read_text())
    check = got["set_check"]
    assert check["differ"] is True and check["auc_ci95"][0] > 0.5 and set(check["baselines"]) == set(BASELINES)
    assert {"blind", "diff", "ci95", "beyond"} <= set(got["attacks"]["loss"]["vs_blind"])
    said = " ".join(res.output.split())  # the terminal wraps long lines
    assert "Members and non-members differ without the model: the blind baseline blind_" in said
    assert "(no model)" in said
    assert got["exposure_attack"] in ("loss", "zlib")  # a blind baseline is never the exposure attack
    strict = lmaudit("mia", "--model", tiny_model_dir, "--members", members, "--nonmembers", nonmembers,
                     "--attacks", "loss", "--bootstrap", 200, "--out", tmp_path / "strict", "--no-report",
                     "--strict-sets")
    assert_user_error(strict, "--strict-sets: members and non-members differ without the model")
    assert (tmp_path / "strict" / "results.json").is_file()  # the results are kept


def test_the_verdict_judges_exposure_on_what_attacks_add_beyond_the_blind_baseline():
    from lmaudit.report.summary import mia_summary

    def attack(value, beyond, diff=0.0):
        return {"auc": value, "auc_ci95": [value - 0.05, value + 0.05], "tpr@1%fpr": None,
                "vs_blind": {"blind": "blind_ngrams", "diff": diff, "ci95": [diff - 0.1, diff + 0.1],
                             "beyond": beyond}}

    check = {"baselines": {}, "best": "blind_ngrams", "auc": 0.84, "auc_ci95": [0.80, 0.88], "differ": True}
    res = {"attacks": {"loss": attack(0.93, False)}, "n_members": 200, "n_nonmembers": 200, "set_check": check}
    summary = mia_summary([("", res)])
    assert summary.headline.startswith("Exposure: cannot tell (the sets differ without the model")
    assert summary.level is None
    assert summary.points[0].startswith("Members and non-members differ without the model: the blind baseline "
                                        "blind_ngrams tells them apart with AUC 0.840 (95% interval 0.800–0.880)")
    # the level is read from what an attack adds beyond the baseline, at the lower end of its interval: 0.5 + 0.11
    # is 0.61, moderate; its raw AUC of 0.95 would say severe
    res["attacks"]["min_k"] = attack(0.95, True, diff=0.21)
    summary = mia_summary([("", res)])
    assert summary.headline.startswith("Exposure: moderate (beyond a blind baseline")
    assert "min_k adds +0.210 AUC (95% interval +0.110 to +0.310) beyond the blind baseline" in summary.points[1]
    res["attacks"]["min_k"] = attack(0.96, True, diff=0.51)
    assert mia_summary([("", res)]).headline.startswith("Exposure: severe (beyond a blind baseline")
    assert mia_summary([("", {**res, "set_check": {**check, "differ": False}})]).headline == "Exposure: severe"


@pytest.mark.slow
def test_on_sets_drawn_alike_the_check_is_wrong_at_most_at_its_level():
    """40 seeded pairs of same-distribution sets at 12, 50 and 100 texts each: the check calls them different at a
    rate within α = 0.05 plus two binomial standard errors (run with -m slow)."""
    from lmaudit.metrics import summarize_attacks
    from lmaudit.runs.set_check import ALPHA, set_check

    trials = 40
    for n in (12, 50, 100):
        wrong = 0
        for t in range(trials):
            texts = make_texts(n, seed=1000 + t) + make_texts(n, seed=5000 + t)
            y = np.r_[np.ones(n), np.zeros(n)].astype(int)
            both = {b: scores_and_p(texts, y, b, seed=t) for b in BASELINES}
            summary = summarize_attacks(y, {b: s for b, (s, _) in both.items()}, n_resamples=200, seed=t)
            wrong += set_check(summary, {b: p for b, (_, p) in both.items()})["differ"]
        print(f"{n} texts each: called different {wrong}/{trials}")
        assert wrong / trials <= ALPHA + 2 * np.sqrt(ALPHA * (1 - ALPHA) / trials)


def test_scores_and_p_equal_the_two_functions_that_build_the_matrix_apart():
    labels = np.r_[np.ones(40), np.zeros(40)].astype(int)
    scores, p = scores_and_p(DATED + PLAIN, labels, "blind_ngrams", seed=4)
    np.testing.assert_array_equal(scores, blind_scores(DATED + PLAIN, labels, "blind_ngrams", seed=4))
    assert p == held_out_p(DATED + PLAIN, labels, "blind_ngrams", seed=4) and p < 1e-4  # a planted shift


def test_ngram_matrix_built_in_blocks_equals_scikit_learns_tfidf_of_the_whole_set(monkeypatch):
    """blind_ngrams hashes the texts a block at a time (memory) and applies one idf over all of them: the matrix is
    scikit-learn's sublinear TF-IDF of the whole set, side by side for the two analyzers, bit for bit — with blocks
    of 3 texts, a last short block, and an n-gram found in one block only (its idf must count every text)."""
    from scipy.sparse import hstack
    from sklearn.feature_extraction.text import HashingVectorizer, TfidfTransformer

    from lmaudit.audit import blind

    texts = make_texts(11, seed=4) + ["zebra quagga okapi", "zebra"]
    whole = hstack([TfidfTransformer(sublinear_tf=True).fit_transform(
        HashingVectorizer(n_features=2**16, alternate_sign=False, norm=None, **how).transform(texts))
        for how in ({"analyzer": "word", "ngram_range": (1, 2)}, {"analyzer": "char_wb", "ngram_range": (3, 5)})]
    ).tocsr()
    monkeypatch.setattr(blind, "CHUNK", 3)
    blocks = blind._design(texts, "blind_ngrams")
    assert blocks.shape == whole.shape == (13, 2 * 2**16)
    assert np.array_equal(blocks.indptr, whole.indptr) and np.array_equal(blocks.indices, whole.indices)
    assert np.array_equal(blocks.data, whole.data)


# --- blind_ngrams on one planted token and on a shift of many words, beside a plain TF-IDF regression ----------------


def plain_tfidf_scores(texts: list[str], y: np.ndarray, seed: int) -> np.ndarray:
    """Out-of-fold log-odds of a plain TF-IDF logistic regression (word 1–2-grams and character 3–5-grams, sublinear
    tf, vocabulary and idf fitted on the training folds), on the folds blind_scores uses for the same seed."""
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import StratifiedKFold
    from sklearn.pipeline import make_pipeline, make_union

    out = np.empty(len(y))
    for train, test in StratifiedKFold(n_splits=5, shuffle=True, random_state=seed).split(np.zeros(len(y)), y):
        model = make_pipeline(make_union(TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True),
                                         TfidfVectorizer(analyzer="char_wb", ngram_range=(3, 5), sublinear_tf=True)),
                              LogisticRegression(C=1.0, solver="liblinear"))
        out[test] = model.fit([texts[i] for i in train], y[train]).decision_function([texts[i] for i in test])
    return out


def paired_se(y: np.ndarray, a: np.ndarray, b: np.ndarray) -> float:
    """The bootstrap standard error of AUC(a) − AUC(b) on the same stratified resamples."""
    replicates = stratified_bootstrap(y, [a, b], n_resamples=1000, seed=0).auc  # (1000, 2)
    return float(np.std(replicates[:, 0] - replicates[:, 1], ddof=1))


def test_blind_ngrams_reads_one_planted_token_and_a_shift_of_many_words():
    """Two kinds of shift. One token: 100 + 100 paragraphs of the language reference drawn alike, members opening
    with "In 2019, ", non-members with "In 2024, ". Many words: 150 paragraphs of the language reference against 150
    docstrings of the standard library (200 characters each). Seed 0, AUC of out-of-fold scores:

    ==================================  ==========  ============
    reading                             one token   many words
    ==================================  ==========  ============
    200 columns of highest χ² alone     1.000       0.883
    every column once                   0.945       0.931
    plain TF-IDF (this test's)          0.950       0.931
    blind_ngrams (both)                 0.994       0.934
    ==================================  ==========  ============

    The plain regression is the bar on the many-word shift, less twice the bootstrap standard error of the paired
    difference (0.003 here): blind_ngrams must not read a real shift as weaker than a plain classifier does."""
    texts, y = alike_split(100, seed=0, chars=100_000)  # whole paragraphs
    planted = [("In 2019, " if member else "In 2024, ") + t for t, member in zip(texts, y)]
    assert auc(y, blind_scores(planted, y, "blind_ngrams", seed=0)) >= 0.97

    texts, y = shifted_split(150, seed=0)
    ours, plain = blind_scores(texts, y, "blind_ngrams", seed=0), plain_tfidf_scores(texts, y, seed=0)
    se = paired_se(y, ours, plain)
    assert 0 < se < 0.01
    assert auc(y, ours) >= auc(y, plain) - 2 * se > 0.9, (auc(y, ours), auc(y, plain), se)


def test_blind_ngrams_stays_near_chance_on_one_source_drawn_alike():
    """300 paragraphs of the language reference drawn alike, split at random: AUC 0.477 (the plain TF-IDF regression
    0.475). The interval, 0.5 ± 0.1, is three standard deviations of a chance AUC at 150 + 150 texts
    (√((n₁ + n₂ + 1) / (12 n₁ n₂)) = 0.033); blind_ngrams reads no more than the plain regression (within twice the
    paired standard error), and its held-out test does not call the sets different."""
    texts, y = alike_split(150, seed=0)
    ours, plain = blind_scores(texts, y, "blind_ngrams", seed=0), plain_tfidf_scores(texts, y, seed=0)
    assert abs(auc(y, ours) - 0.5) <= 0.1
    assert auc(y, ours) <= auc(y, plain) + 2 * paired_se(y, ours, plain)
    assert held_out_p(texts, y, "blind_ngrams", seed=0) > 0.05


def test_the_selected_columns_are_read_twice_from_the_fitting_texts_alone():
    """blind_ngrams's fit scales its χ²-selected columns by √2: the same decision function as a regression of every
    column set beside a copy of the selected ones. The selection reads the fitting texts' labels only (changing the
    others' changes nothing), and the matrix is left as it was."""
    from scipy.sparse import hstack
    from sklearn.feature_selection import SelectKBest, chi2
    from sklearn.linear_model import LogisticRegression

    from lmaudit.audit import blind

    texts = DATED + PLAIN
    y = np.r_[np.ones(40), np.zeros(40)].astype(int)
    x = blind._design(texts, "blind_ngrams")
    before = x.copy()
    rows, held = np.arange(0, 80, 2), np.arange(1, 80, 2)
    model = blind._fit(x, y, rows)
    assert (x != before).nnz == 0
    selected = SelectKBest(chi2, k=blind.SELECTED).fit(x[rows], y[rows])
    stacked = LogisticRegression(C=1.0, solver="liblinear").fit(hstack([x[rows], selected.transform(x[rows])]), y[rows])
    np.testing.assert_allclose(model.decision_function(x[held]),
                               stacked.decision_function(hstack([x[held], selected.transform(x[held])])), atol=1e-6)
    flipped = y.copy()
    flipped[held] = 1 - flipped[held]
    np.testing.assert_array_equal(blind._fit(x, flipped, rows).coef_, model.coef_)
