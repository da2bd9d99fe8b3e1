"""The data the command line makes: the embedded corpus, synthetic PII records, canaries, and the privacy levels it
checks, re-exported as their modules define them (``build_corpus``, ``pool_textset``, ``pydoc_corpus``, ``pii_corpus``,
``write_jsonl``, ``write_canary_folder``, ``check_level``). Not in ``lmaudit.api``'s ``__all__``: import them as
``from lmaudit.api.data import ...``."""

from __future__ import annotations

from lmaudit.data import corpus as _corpus
from lmaudit.data.corpus import build_corpus as build_corpus
from lmaudit.data.corpus import pool_textset as pool_textset
from lmaudit.data.corpus import pydoc_corpus as pydoc_corpus
from lmaudit.privacy import canaries as _canaries
from lmaudit.privacy.canaries import write_canary_folder as write_canary_folder
from lmaudit.utils import deferred

# imported when first called (synthetic PII needs Faker, the privacy levels the privacy stack)
pii_corpus = deferred("lmaudit.data.pii", "pii_corpus")
write_jsonl = deferred("lmaudit.data.pii", "write_jsonl")
check_level = deferred("lmaudit.privacy.bounds", "check_level")

CORPUS_SOURCES = _corpus.SOURCES  # the corpora build_corpus and pydoc_corpus make
CANARY_KINDS = _canaries.KINDS  # the kinds of canary write_canary_folder writes
