"""Model-free ("blind") baselines: how well the members and non-members of a run are told apart by their text alone.

An attack's AUC is evidence of memorisation only beyond what the sets' own differences explain.
Classifiers that never query the model separate the members and non-members of several
published MIA benchmarks better than the published attacks do (Das et al., "Blind Baselines
Beat Membership Inference Attacks for Foundation Models"), because those sets were drawn
differently (other dates, sources or formats). Two baselines, each a logistic regression:

- ``blind_ngrams``: TF-IDF of word 1–2-grams and character 3–5-grams (hashed into 2^16 columns
  each, so memory does not grow with the vocabulary of the set), every column read, and the
  :data:`SELECTED` columns of highest χ² with the fitting texts' labels read twice (their L2
  penalty halved; the held-out texts' labels are never read). Sets can differ in one word or in
  thousands, and each reading alone misses one kind: with every column read once, one word that
  tells the sets apart is drowned by the thousands that do not (a single year in front of every
  paragraph of the language reference: AUC 0.95, against 1.0 with the :data:`SELECTED` columns
  alone, at 100 + 100 texts); with those columns alone, sets from two sources lose much of what
  tells them apart (the language reference against the standard library's docstrings,
  :mod:`lmaudit.data.shifted`: 0.87, against 0.92 with every column, at 150 + 150 texts). Both
  together read 0.995 and 0.924 (a plain TF-IDF regression: 0.957 and 0.923;
  ``benchmarks/bench_blind.py``, means of 3 draws);
- ``blind_features``: simple features, standardised — length in characters and in words, the
  share of digits, of upper-case letters and of punctuation, the number of four-digit years
  (1800–2099) and of dates, the type–token ratio, the mean word length, and the values found: the
  earliest, latest and mean year (as in Blind-MIA's date detection: sets from two eras differ in
  their years' values, not in how many they hold), the count of numbers and the largest (log10).

Scores are out of fold: the texts are split into k stratified, seeded folds and each fold is
scored by a classifier fitted on the others, so no text is scored by a classifier that saw its
label. The score is the classifier's log-odds of "member" (higher = member), like an attack's.
Whether a baseline tells the sets apart is read from a held-out test (:func:`held_out_p`): a
bootstrap interval of pooled out-of-fold scores ignores the variance of the fitting and calls
5–10% of sets drawn alike "different".
"""

from __future__ import annotations

import re

import numpy as np
from scipy.sparse import hstack, vstack
from scipy.stats import mannwhitneyu
from sklearn.feature_extraction.text import HashingVectorizer
from sklearn.feature_selection import SelectKBest, chi2
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import StratifiedKFold
from sklearn.preprocessing import StandardScaler, normalize

from lmaudit.errors import DataError, LmauditError

BASELINES = ("blind_ngrams", "blind_features")
MIN_PER_FOLD = 2  # texts of each class in every fold
DEFAULT_FOLDS = 5
_YEAR = re.compile(r"\b(1[89]\d\d|20\d\d)\b")
_DATE = re.compile(r"\b\d{1,4}[-/.]\d{1,2}[-/.]\d{1,4}\b|"
                   r"\b\d{1,2} (Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)\w*",
                   re.IGNORECASE)
_WORD = re.compile(r"\w+")
_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")
FEATURES = ("characters", "words", "digit share", "upper-case share", "punctuation share", "years", "dates",
            "type-token ratio", "mean word length", "earliest year", "latest year", "mean year", "numbers",
            "largest number (log10)")
N_HASHED = 2**16  # hashed n-gram columns per analyzer
CHUNK = 2048  # texts hashed per block (blind_ngrams)
SELECTED = 200  # blind_ngrams: columns of highest χ² with the fitting texts' labels, read twice by each fit


def fold_count(labels: np.ndarray, folds: int = DEFAULT_FOLDS) -> int:
    """The folds a cross-fit can use: at most ``folds``, with at least :data:`MIN_PER_FOLD` texts of each class in
    every fold. Too few texts for two folds is a :class:`~lmaudit.errors.DataError` naming the minimum."""
    smallest = int(min((labels == 1).sum(), (labels == 0).sum()))
    k = min(folds, smallest // MIN_PER_FOLD)
    if k < 2:
        raise DataError(f"a blind baseline needs at least {2 * MIN_PER_FOLD} members and {2 * MIN_PER_FOLD} "
                        f"non-members to cross-fit ({MIN_PER_FOLD} of each in each of 2 folds); the smaller set has "
                        f"{smallest}")
    return k


def _largest(numbers: list[str]) -> float:
    """log10(1 + the largest of ``numbers``), separators dropped; 0 without any."""
    values = [min(1e300, float(n.replace(",", "").replace(".", "", max(0, n.count(".") - 1)))) for n in numbers]
    return float(np.log10(1.0 + max(values))) if values else 0.0  # capped: a number of 400 digits is not inf


def text_features(texts: list[str]) -> np.ndarray:
    """(n, 14) float64: the :data:`FEATURES` of each text.

    A text without a year takes, for its year values, the median of the other texts' mean years (0 when no text
    holds one): a value read from the texts alone, never from their labels, that its year count already marks.
    """
    rows, years = [], []
    for t in texts:
        n = max(1, len(t))
        words = _WORD.findall(t)
        found = [int(y) for y in _YEAR.findall(t)]
        numbers = _NUMBER.findall(t)
        years.append([min(found), max(found), float(np.mean(found))] if found else None)
        rows.append([len(t), len(words), sum(c.isdigit() for c in t) / n, sum(c.isupper() for c in t) / n,
                     sum(not c.isalnum() and not c.isspace() for c in t) / n, len(found),
                     len(_DATE.findall(t)), len({w.lower() for w in words}) / max(1, len(words)),
                     float(np.mean([len(w) for w in words])) if words else 0.0, 0.0, 0.0, 0.0, len(numbers),
                     _largest(numbers)])
    known = [y[2] for y in years if y is not None]
    fill = float(np.median(known)) if known else 0.0
    for row, found in zip(rows, years):
        row[9:12] = found if found is not None else [fill] * 3
    return np.asarray(rows, dtype=np.float64).reshape(len(rows), len(FEATURES))


def _tfidf_chunks(texts: list[str], how: dict) -> list:
    """The sublinear TF-IDF of hashed n-grams of ``texts`` (l2-normalised rows), as CSR blocks of :data:`CHUNK`
    texts: scikit-learn's ``TfidfTransformer(sublinear_tf=True)`` fitted on every text (smooth idf,
    ln((1 + n) / (1 + df)) + 1, the same operations in the same order: tests/test_blind.py checks equality), built a
    block at a time so the peak memory of 20,000 texts is the matrix, not several copies of it."""
    hashing = HashingVectorizer(n_features=N_HASHED, alternate_sign=False, norm=None, **how)
    blocks = [hashing.transform(texts[a:a + CHUNK]) for a in range(0, len(texts), CHUNK)]
    df = np.zeros(N_HASHED)
    for block in blocks:
        df += np.bincount(block.indices, minlength=N_HASHED)
    df += 1.0
    idf = np.full_like(df, fill_value=len(texts) + 1)
    idf /= df
    np.log(idf, out=idf)
    idf += 1.0
    for block in blocks:
        np.log(block.data, block.data)
        block.data += 1.0
        block.data *= idf[block.indices]
        normalize(block, copy=False)
    return blocks


def _design(texts: list[str], baseline: str):
    """The baseline's feature matrix of ``texts``, built without their labels (hashed TF-IDF, or standardised
    :func:`text_features`): fitting it on every text tells the classifiers nothing about membership."""
    if baseline == "blind_features":
        return StandardScaler().fit_transform(text_features(texts))
    if baseline == "blind_ngrams":
        parts = [_tfidf_chunks(texts, how) for how in ({"analyzer": "word", "ngram_range": (1, 2)},
                                                       {"analyzer": "char_wb", "ngram_range": (3, 5)})]
        rows = []
        for i in range(len(parts[0])):  # each block side by side, its parts let go at once: one copy at a time
            rows.append(hstack([part[i] for part in parts], format="csr"))
            for part in parts:
                part[i] = None
        return vstack(rows, format="csr")
    raise LmauditError(f"unknown blind baseline '{baseline}'", hint=f"one of {', '.join(BASELINES)}")


def _fit(x, y: np.ndarray, rows: np.ndarray) -> LogisticRegression:
    """A logistic regression fitted on the texts ``rows`` of ``x`` (liblinear: quick on sparse, small sets).

    On more than :data:`SELECTED` columns (the n-grams) it reads every column, and the :data:`SELECTED` of highest χ²
    with these texts' labels twice: those columns are scaled by √2 for the fit, which halves their L2 penalty — the
    fit of every column set beside a copy of the selected ones, without the copy — and the scale is folded back into
    the coefficients, so the model reads the unscaled matrix. Only the fitting texts' labels are read."""
    xs, ys = x[rows], y[rows]  # a copy of these rows: scaled in place below
    model = LogisticRegression(C=1.0, solver="liblinear")
    if x.shape[1] <= SELECTED:
        return model.fit(xs, ys)
    scale = np.ones(x.shape[1])
    scale[SelectKBest(chi2, k=SELECTED).fit(xs, ys).get_support(indices=True)] = np.sqrt(2.0)
    xs.data *= scale[xs.indices]
    model.fit(xs, ys)
    model.coef_ *= scale  # (1, columns): the same decision function on the unscaled columns
    return model


def _out_of_fold(x, y: np.ndarray, k: int, seed: int) -> np.ndarray:
    out = np.empty(len(y), dtype=np.float64)
    for train, test in StratifiedKFold(n_splits=k, shuffle=True, random_state=seed).split(np.zeros(len(y)), y):
        out[test] = _fit(x, y, train).decision_function(x[test])
    return out


def blind_scores(texts: list[str], labels, baseline: str, *, folds: int = DEFAULT_FOLDS, seed: int = 0) -> np.ndarray:
    """Out-of-fold log-odds of "member" for every text under ``baseline`` (one of :data:`BASELINES`). → (n,) float64.

    Examples
    --------
    >>> texts = [f"In {1990 + i} the archive logged entry {i}." for i in range(8)] + \\
    ...         [f"the river bends below the hill {w}" for w in "abcdefgh"]
    >>> s = blind_scores(texts, [1] * 8 + [0] * 8, "blind_features", folds=2)
    >>> bool(s[:8].min() > s[8:].max())  # years and digits tell these sets apart without any model
    True
    """
    y = np.asarray(labels, dtype=np.int64)
    if len(texts) != len(y):
        raise LmauditError(f"{len(texts)} texts but {len(y)} labels")
    return _out_of_fold(_design(list(texts), baseline), y, fold_count(y, folds), seed)


def held_out_p(texts: list[str], labels, baseline: str, *, seed: int = 0) -> float:
    """A p-value for "this baseline tells the sets apart", valid on sets of any size: the texts are split in two
    stratified halves; a classifier fitted on each half scores the other, and a one-sided Mann–Whitney test asks
    whether the held-out members score higher. Scores of a half come from a model that never saw its labels, so
    each test is exact under the null; the smaller of the two p-values is doubled (Bonferroni)."""
    y = np.asarray(labels, dtype=np.int64)
    fold_count(y, 2)
    return _held_out_p(_design(list(texts), baseline), y, seed)


def scores_and_p(texts: list[str], labels, baseline: str, *, folds: int = DEFAULT_FOLDS,
                 seed: int = 0) -> tuple[np.ndarray, float]:
    """(:func:`blind_scores`, :func:`held_out_p`) of ``baseline``, its feature matrix built once."""
    y = np.asarray(labels, dtype=np.int64)
    x = _design(list(texts), baseline)
    return _out_of_fold(x, y, fold_count(y, folds), seed), _held_out_p(x, y, seed)


def _held_out_p(x, y: np.ndarray, seed: int) -> float:
    ps = []
    for train, test in StratifiedKFold(n_splits=2, shuffle=True, random_state=seed).split(np.zeros(len(y)), y):
        s = _fit(x, y, train).decision_function(x[test])
        ps.append(float(mannwhitneyu(s[y[test] == 1], s[y[test] == 0], alternative="greater").pvalue))
    return min(1.0, 2 * min(ps))
