"""Shared set-up for the benchmarks: a 4k-vocabulary tokenizer and texts from numpy's docstrings."""

from __future__ import annotations

import json
import time
from pathlib import Path

from lmaudit.data.corpus import extract_documents
from lmaudit.data.loaders import TextSet
from lmaudit.models.tokenizer import train_tokenizer
from lmaudit.progress import set_quiet


def bench_texts(n_texts: int, chars: int):
    """(tokenizer, TextSet): a BPE tokenizer (4,096 tokens) and ``n_texts`` docstrings cut to ``chars``."""
    set_quiet(True)
    docs = [d.text for d in extract_documents(("numpy",), min_chars=300)]
    tokenizer = train_tokenizer(docs, vocab_size=4096)
    return tokenizer, TextSet.from_texts([d[:chars] for d in docs[:n_texts]])


def best_of(fn, repeats: int) -> float:
    """The fastest of ``repeats`` timed calls of ``fn``, in seconds."""
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def add_json_option(ap) -> None:
    ap.add_argument("--json", type=Path, default=None, help="also write the measured rows here (for run_all.py)")


def write_rows(path: Path | None, benchmark: str, rows: list[dict]) -> None:
    """Rows of {measure, value, target, unit}: the figures ``run_all.py`` puts in its table."""
    if path is not None:
        path.write_text(json.dumps([{"benchmark": benchmark, **r} for r in rows], indent=1) + "\n")
