"""The data the command line makes: the embedded corpus, synthetic PII records, canaries, and the privacy levels it
checks. Not in ``lmaudit.api``'s ``__all__``: import them as ``from lmaudit.api.data import ...``."""

from __future__ import annotations

from pathlib import Path

from lmaudit.data import corpus as _corpus
from lmaudit.data import pii as _pii
from lmaudit.privacy import canaries as _canaries
from lmaudit.privacy.bounds import check_level as _check_level

CORPUS_SOURCES = _corpus.SOURCES  # the corpora :func:`build_corpus` and :func:`pydoc_corpus` make
CANARY_KINDS = _canaries.KINDS  # the kinds of canary :func:`write_canary_folder` writes


def build_corpus(packages: tuple[str, ...] = _corpus.DEFAULT_PACKAGES, *, force: bool = False):
    """The embedded corpus of ``packages``' docstrings (names or folders), built once and cached."""
    return _corpus.build_corpus(packages, force=force)


def pydoc_corpus():
    """The out-of-domain corpus: prose paragraphs of the Python language reference."""
    return _corpus.pydoc_corpus()


def pii_corpus(corpus, n_train: int, n_unseen: int, *, seed: int = 0):
    """(training, unseen) synthetic e-mails with names, addresses and phone numbers over ``corpus``' passages."""
    return _pii.pii_corpus(corpus, n_train, n_unseen, seed=seed)


def write_jsonl(texts, path: str | Path) -> Path:
    """Write a text set as JSON lines (``id``, ``text`` and its fields), atomically."""
    return _pii.write_jsonl(texts, path)


def write_canary_folder(out: str | Path, n: int, kind: str, *, seed: int = 0) -> dict:
    """Write ``n`` canaries of ``kind`` to ``out`` (half drawn to train on); return the inclusion summary."""
    return _canaries.write_canary_folder(out, n, kind, seed=seed)


def check_level(name: str, value) -> float:
    """``value`` of ``name`` (a δ or a confidence) must lie strictly between 0 and 1."""
    return _check_level(name, value)
