"""Real membership-inference folders for the release gate and the model card (tests/test_gate.py, tests/test_card.py).

Not a test module: both build their folders here, once per module, with ``lmaudit.mia`` on the tiny test model.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import lmaudit
from helpers import make_texts, write_jsonl

ATTACKS = ["loss", "min_k"]


def mia_run(folder: Path, model: Path, members: list[str], nonmembers: list[str], *, reference: Path | None = None,
            n_bootstrap: int = 100) -> Path:
    """``lmaudit.mia`` on two data files (``m.jsonl``, ``n.jsonl`` beside ``folder``), written to ``folder``."""
    data = folder.parent
    m = write_jsonl(data / f"{folder.name}-m.jsonl", members)
    n = write_jsonl(data / f"{folder.name}-n.jsonl", nonmembers)
    cache = data / f"{folder.name}-cache"
    with pytest.MonkeyPatch.context() as mp:  # a module's folders are built before any test's own cache is set
        mp.setenv("LMAUDIT_CACHE", str(cache))
        cfg = lmaudit.RunConfig(attacks=ATTACKS, n_bootstrap=n_bootstrap, use_cache=False)
        lmaudit.mia(model, m, n, reference=reference, config=cfg).write(folder)
    return folder


def plain_run(root: Path, model: Path) -> Path:
    """100 members and 100 non-members drawn alike (the sets do not differ without the model), the model as its own
    reference: TPR at 1% FPR is measured, at 0.1% it is not."""
    return mia_run(root / "plain", model, make_texts(100, seed=61), make_texts(100, seed=62), reference=model)


def shifted_run(root: Path, model: Path) -> Path:
    """Members of 12–24 words against non-members of 30–40: a blind baseline tells them apart by length alone."""
    return mia_run(root / "shifted", model, make_texts(60, seed=63),
                   make_texts(60, seed=64, min_words=30, max_words=40))
