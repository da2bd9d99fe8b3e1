"""The blind n-gram baseline on two kinds of shift, beside a plain TF-IDF logistic regression, and its cost.

Four classifiers of the same texts, each scored out of fold on the same 5 stratified seeded folds
(AUC, mean and range over ``--seeds`` draws of the sets):

* ``selected``: a logistic regression of the 200 hashed n-gram columns of highest χ² with the
  fitting texts' labels (``blind_ngrams`` before it read every column);
* ``every column``: a logistic regression of every hashed column (``blind_ngrams`` before that);
* ``blind_ngrams``: every column, and the 200 of highest χ² twice (:mod:`lmaudit.audit.blind`);
* ``plain``: scikit-learn's ``TfidfVectorizer`` of word 1–2-grams and character (``char_wb``)
  3–5-grams, sublinear tf, fitted on the training fold, and a logistic regression (liblinear, C = 1).

Sets: ``planted``: 100 + 100 paragraphs of the Python language reference drawn alike, members
opening with "In 2019, " and non-members with "In 2024, " (one token tells them apart); ``sources``:
150 paragraphs of the language reference against 150 docstrings of the standard library
(:func:`lmaudit.data.shifted.shifted_split`, 200 characters: many words tell them apart);
``wide sources`` (``--wide``): 150 docstrings of numpy against 150 of scipy, every docstring of both
packages, 400 characters; ``alike``: 150 + 150 paragraphs of the language reference drawn alike.

Time: :func:`~lmaudit.audit.blind.scores_and_p` of ``blind_ngrams`` (what every ``lmaudit mia``
runs) on ``--time-texts`` texts (numpy's docstrings against scipy's, 300 characters), with the
selected reading and with the current one, best of ``--repeats``.

Targets: planted ≥ 0.97 and sources ≥ plain − 0.01 for ``blind_ngrams`` (the paired bootstrap standard
error of the difference is printed beside it); the time ratio is reported.

    python benchmarks/bench_blind.py [--seeds 3] [--time-texts 2000] [--repeats 2] [--wide]
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402
from sklearn.feature_extraction.text import TfidfVectorizer  # noqa: E402
from sklearn.feature_selection import SelectKBest, chi2  # noqa: E402
from sklearn.linear_model import LogisticRegression  # noqa: E402
from sklearn.model_selection import StratifiedKFold  # noqa: E402
from sklearn.pipeline import make_pipeline, make_union  # noqa: E402

from common import add_json_option, write_rows  # noqa: E402
from lmaudit.audit import blind  # noqa: E402
from lmaudit.data.corpus import cut_at_word, extract_documents, pydoc_corpus  # noqa: E402
from lmaudit.data.shifted import alike_split, shifted_split  # noqa: E402
from lmaudit.metrics import auc, stratified_bootstrap  # noqa: E402
from lmaudit.progress import set_quiet  # noqa: E402

FOLDS = 5


def fit_selected(x, y, rows):
    """blind_ngrams's fit before it read every column: the 200 columns of highest χ² alone."""
    return make_pipeline(SelectKBest(chi2, k=blind.SELECTED),
                         LogisticRegression(C=1.0, solver="liblinear")).fit(x[rows], y[rows])


def fit_every(x, y, rows):
    """blind_ngrams's fit before the χ² selection: every column, once."""
    return LogisticRegression(C=1.0, solver="liblinear").fit(x[rows], y[rows])


READINGS = {"selected": fit_selected, "every column": fit_every, "blind_ngrams": blind._fit}


def reading_scores(texts, y, seed, fit) -> np.ndarray:
    x = blind._design(texts, "blind_ngrams")
    out = np.empty(len(y))
    for train, test in StratifiedKFold(FOLDS, shuffle=True, random_state=seed).split(np.zeros(len(y)), y):
        out[test] = fit(x, y, train).decision_function(x[test])
    return out


def plain_scores(texts, y, seed) -> np.ndarray:
    out = np.empty(len(y))
    for train, test in StratifiedKFold(FOLDS, shuffle=True, random_state=seed).split(np.zeros(len(y)), y):
        model = make_pipeline(make_union(TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True),
                                         TfidfVectorizer(analyzer="char_wb", ngram_range=(3, 5), sublinear_tf=True)),
                              LogisticRegression(C=1.0, solver="liblinear"))
        model.fit([texts[i] for i in train], y[train])
        out[test] = model.decision_function([texts[i] for i in test])
    return out


def planted(seed: int):
    docs = [d.text for d in pydoc_corpus().documents]
    alike = list(np.random.default_rng(seed).choice(docs, 200, replace=False))
    texts = [f"In 2019, {t}" for t in alike[:100]] + [f"In 2024, {t}" for t in alike[100:]]
    return texts, np.r_[np.ones(100), np.zeros(100)].astype(int)


def wide(seed: int, n: int = 150, chars: int = 400):
    a, b = ([cut_at_word(d.text, chars) for d in extract_documents((p,), workers=1)] for p in ("numpy", "scipy"))
    rng = np.random.default_rng(seed)
    texts = [str(t) for t in (*rng.choice(a, n, replace=False), *rng.choice(b, n, replace=False))]
    return texts, np.r_[np.ones(n), np.zeros(n)].astype(int)


def compare(name: str, make, seeds: int) -> dict:
    """{classifier: [AUC per seed]}, and the paired bootstrap SE of blind_ngrams − plain per seed."""
    got = {k: [] for k in (*READINGS, "plain")}
    got["se"] = []
    for seed in range(seeds):
        texts, y = make(seed)
        scores = {k: reading_scores(texts, y, seed, fit) for k, fit in READINGS.items()}
        scores["plain"] = plain_scores(texts, y, seed)
        for k, s in scores.items():
            got[k].append(auc(y, s))
        boot = stratified_bootstrap(y, [scores["blind_ngrams"], scores["plain"]], n_resamples=1000, seed=seed).auc
        got["se"].append(float(np.std(boot[:, 0] - boot[:, 1], ddof=1)))
    cells = "  ".join(f"{k} {np.mean(v):.3f} [{min(v):.3f}, {max(v):.3f}]" for k, v in got.items() if k != "se")
    print(f"{name:>12}: {cells}  (SE of blind_ngrams - plain {np.mean(got['se']):.3f})", flush=True)
    return got


def timed(texts, y, fit, repeats: int) -> float:
    original, blind._fit = blind._fit, fit
    try:
        best = np.inf
        for _ in range(repeats):
            t0 = time.perf_counter()
            blind.scores_and_p(texts, y, "blind_ngrams")
            best = min(best, time.perf_counter() - t0)
        return best
    finally:
        blind._fit = original


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--time-texts", type=int, default=2000)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--wide", action="store_true", help="also the split from every docstring of numpy and scipy")
    add_json_option(ap)
    args = ap.parse_args()
    set_quiet(True)
    sets = {"planted": planted, "sources": lambda s: shifted_split(150, seed=s),
            "alike": lambda s: alike_split(150, seed=s)}
    if args.wide:
        sets["wide sources"] = wide
    got = {name: compare(name, make, args.seeds) for name, make in sets.items()}

    half = args.time_texts // 2
    a, b = ([cut_at_word(d.text, 300) for d in extract_documents((p,), workers=1)] for p in ("numpy", "scipy"))
    rng = np.random.default_rng(0)
    texts = [str(t) for t in (*rng.choice(a, half, replace=len(a) < half), *rng.choice(b, half, replace=False))]
    y = np.r_[np.ones(half), np.zeros(half)].astype(int)
    before, now = timed(texts, y, fit_selected, args.repeats), timed(texts, y, blind._fit, args.repeats)
    print(f"scores_and_p(blind_ngrams) on {2 * half} texts: selected {before:.2f} s, blind_ngrams {now:.2f} s "
          f"(x{now / before:.2f})")

    new, gap = got["planted"]["blind_ngrams"], np.subtract(got["sources"]["blind_ngrams"], got["sources"]["plain"])
    rows = [
        {"measure": "blind_ngrams AUC, one planted year (lowest seed)", "value": min(new), "target": "≥ 0.97",
         "met": bool(min(new) >= 0.97)},
        {"measure": "blind_ngrams − plain TF-IDF AUC, language reference vs stdlib docstrings (lowest seed)",
         "value": float(gap.min()), "target": "≥ −0.01", "met": bool(gap.min() >= -0.01)},
        {"measure": "blind_ngrams AUC, sets drawn alike (mean)", "value": float(np.mean(got["alike"]["blind_ngrams"])),
         "target": "reported (≈ 0.5)"},
        {"measure": f"scores_and_p(blind_ngrams) on {2 * half} texts (s)", "value": now, "target": "reported"},
        {"measure": "its time ÷ the selected reading's", "value": now / before, "target": "reported"},
    ]
    write_rows(args.json, "bench_blind", rows)


if __name__ == "__main__":
    main()
