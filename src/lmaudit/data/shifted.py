"""Real texts from two sources of prose, for checking the blind baselines without any network or model.

Sets drawn from two sources differ in many words at once: the kind of difference a membership
benchmark gets when its members and non-members come from different places. Both sources here
ship with Python: the prose paragraphs of the language reference
(:func:`~lmaudit.data.corpus.pydoc_corpus`) and the docstrings of the standard library's modules
(its top-level files). Each text is whitespace-joined (so line breaks tell nothing) and cut to its
opening characters. :func:`shifted_split` draws members from one source and non-members from the
other; :func:`alike_split` draws both from one source, so that nothing but chance tells them apart.
"""

from __future__ import annotations

import ast
import functools
import sysconfig
import warnings
from pathlib import Path

import numpy as np

from lmaudit.data.corpus import clean_docstring, cut_at_word, pydoc_corpus
from lmaudit.errors import LmauditError

SOURCES = ("reference", "stdlib")
CHARS = 200  # the opening of each text kept, cut back to a word boundary
MIN_CHARS = 300  # the standard library's docstrings shorter than this are left out (as in the docstring corpus)


@functools.cache
def _stdlib_docstrings() -> tuple[str, ...]:
    """The cleaned docstrings (module, class and function; at least :data:`MIN_CHARS`) of the standard library's
    top-level modules, in file order, repeats dropped. Read once per process."""
    seen: set[str] = set()
    out = []
    for path in sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py")):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # old escape sequences in a module's source
                tree = ast.parse(path.read_bytes(), filename=str(path))
        except (SyntaxError, ValueError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                doc = clean_docstring(ast.get_docstring(node, clean=True) or "")
                if len(doc) >= MIN_CHARS and (key := " ".join(doc.split()).lower()) not in seen:
                    seen.add(key)
                    out.append(doc)
    return tuple(out)


def source_texts(source: str, *, chars: int = CHARS) -> list[str]:
    """The texts of ``source`` (one of :data:`SOURCES`), whitespace-joined and cut to their first ``chars``
    characters, in a fixed order."""
    if source == "reference":
        texts = [d.text for d in pydoc_corpus().documents]
    elif source == "stdlib":
        texts = list(_stdlib_docstrings())
    else:
        raise LmauditError(f"no text source '{source}'", hint=f"one of {', '.join(SOURCES)}")
    return [cut_at_word(" ".join(t.split()), chars) for t in texts]


def _labels(n: int) -> np.ndarray:
    return np.r_[np.ones(n), np.zeros(n)].astype(np.int64)


def shifted_split(n: int, *, seed: int = 0, chars: int = CHARS) -> tuple[list[str], np.ndarray]:
    """(texts, labels): ``n`` paragraphs of the language reference (label 1, members) then ``n`` docstrings of the
    standard library (label 0), each set drawn without replacement with ``seed``."""
    rng = np.random.default_rng(seed)
    members = rng.choice(source_texts("reference", chars=chars), n, replace=False)
    nonmembers = rng.choice(source_texts("stdlib", chars=chars), n, replace=False)
    return [str(t) for t in (*members, *nonmembers)], _labels(n)


def alike_split(n: int, *, source: str = "reference", seed: int = 0,
                chars: int = CHARS) -> tuple[list[str], np.ndarray]:
    """(texts, labels): ``2n`` texts of one ``source`` drawn without replacement with ``seed``, the first ``n``
    labelled 1 and the rest 0: two sets drawn alike."""
    drawn = np.random.default_rng(seed).choice(source_texts(source, chars=chars), 2 * n, replace=False)
    return [str(t) for t in drawn], _labels(n)
