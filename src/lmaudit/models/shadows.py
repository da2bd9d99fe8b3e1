"""Shadow models for LiRA and RMIA: fine-tuned from the target's base on random halves of a population pool.

``lmaudit shadows`` writes ``OUT/shadows.json`` (the manifest: which texts each
shadow trained on, by content hash) and one model folder per shadow; ``lmaudit mia
--shadows OUT`` reads them (their statistics come from :mod:`lmaudit.probes.shadows`).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from lmaudit.data.loaders import TextSet
from lmaudit.errors import LmauditError
from lmaudit.folders import output_folder
from lmaudit.models.build import finetune
from lmaudit.models.train import FinetuneConfig
from lmaudit.settings import check_settings, integer, seed_value, setting
from lmaudit.utils import stable_hash, stable_seed, write_json_atomic

MANIFEST = "shadows.json"


def text_key(record) -> str:
    return stable_hash(record.context, record.target, digest_size=8)


@dataclass
class ShadowSet:
    paths: list[Path]
    trained: list[set[str]]  # text keys each shadow trained on

    def save(self, folder: Path, meta: dict) -> Path:
        shadows = [{"path": str(Path(p).relative_to(folder)) if Path(p).is_relative_to(folder) else str(p),
                    "trained": sorted(t)} for p, t in zip(self.paths, self.trained)]
        write_json_atomic(folder / MANIFEST, {**meta, "k": len(self.paths), "shadows": shadows})
        return folder / MANIFEST

    @classmethod
    def load(cls, folder: str | Path) -> "ShadowSet":
        folder = Path(folder)
        path = folder / MANIFEST
        if not path.exists():
            raise LmauditError(f"{folder}: no {MANIFEST}", hint="train shadows with 'lmaudit shadows --out DIR'")
        data = json.loads(path.read_text())
        return cls([folder / s["path"] for s in data["shadows"]], [set(s["trained"]) for s in data["shadows"]])


@dataclass
class ShadowsConfig:
    """How many shadow models, and the seed of their halves, checked on construction (before any model loads)."""

    k: int = setting(8, check=integer(2, hint="shadows come in complementary pairs: at least 2"))
    seed: int = setting(0, check=seed_value())

    def __post_init__(self) -> None:
        check_settings(self)


def shadow_splits(pool: TextSet, k: int, seed: int = 0) -> list[TextSet]:
    """``k`` random halves of the pool (seeded), in complementary pairs: a sample left out of one half is in the
    other, so every sample is OUT for ⌊k/2⌋ shadows (at least)."""
    ShadowsConfig(k=k, seed=seed)
    if len(pool) < 4:
        raise LmauditError(f"{pool.source}: a shadow pool needs at least 4 texts, got {len(pool)}")
    rng = np.random.default_rng(stable_seed("shadows", seed, pool.fingerprint()))
    halves = []
    for j in range(k):
        if j % 2 == 0:
            perm = rng.permutation(len(pool))
            idx = np.sort(perm[: len(pool) // 2])
        else:
            idx = np.sort(perm[len(pool) // 2 :])
        halves.append(TextSet([pool.records[i] for i in idx], source=f"{pool.source} (shadow {j})"))
    return halves


def train_shadows(base: str | Path, pool: TextSet, out: str | Path, *, k: int = 8, seed: int = 0,
                  **finetune_kwargs) -> Path:
    """Fine-tune ``k`` shadows of ``base`` on random halves of ``pool``; write the manifest; return the set's folder.

    ``finetune_kwargs`` go to :func:`~lmaudit.models.build.finetune`; with ``lora`` each
    shadow is an adapter folder whose base is ``base`` (loaded like a model folder).
    """
    ShadowsConfig(k=k, seed=seed)
    settings = {key: finetune_kwargs[key] for key in ("mode", "epochs", "lr", "block", "batch_size", "mask_ratio")
                if key in finetune_kwargs}
    FinetuneConfig(**settings, seed=seed)  # every shadow's training settings, before any model loads
    out = Path(out)
    with output_folder(out, what="shadows") as tmp:  # the set is written whole: no mix of two trainings
        paths, trained = [], []
        for j, half in enumerate(shadow_splits(pool, k, seed)):
            paths.append(finetune(base, half, tmp / f"shadow{j}", seed=seed + j, **finetune_kwargs))
            trained.append({text_key(r) for r in half.records})
        lora, dp = finetune_kwargs.get("lora"), finetune_kwargs.get("dp")
        settings = {**finetune_kwargs, "lora": None if lora is None else asdict(lora),
                    "dp": None if dp is None else asdict(dp)}
        ShadowSet(paths, trained).save(tmp, {"base": str(base), "pool": pool.source, "seed": seed,
                                             "finetune": settings})
    return out
