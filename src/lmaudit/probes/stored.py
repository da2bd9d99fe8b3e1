"""How probe records are kept on disk: uncompressed ``.npz`` / ``.npy`` files written atomically, no pickled
objects; a record's companions (statistics of other models it carries in memory) are never saved with it."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path

import numpy as np

from lmaudit.utils import atomic_path


def saved_fields(cls) -> list:
    """The array fields of a record (companions such as a reference's statistics are not saved with it)."""
    return [f for f in fields(cls) if not f.metadata.get("companion")]


def companion():
    """A field that travels with a record in memory (reference or shadow statistics) but is never saved with it."""
    return field(default=None, repr=False, compare=False, metadata={"companion": True})


class NpzRecord:
    """Save/load for dataclass records of numpy arrays: one uncompressed ``.npz``, written atomically."""

    def save(self, path: str | Path) -> None:
        with atomic_path(path) as tmp:
            with open(tmp, "wb") as fh:
                np.savez(fh, **{f.name: getattr(self, f.name) for f in saved_fields(self)})

    @classmethod
    def load(cls, path: str | Path):
        with np.load(path, allow_pickle=False) as z:
            return cls(**{f.name: z[f.name] for f in saved_fields(cls)})

    @classmethod
    def concat(cls, parts: list):
        """The records of ``parts`` in order, every saved array joined (companions are not carried); a record with
        offsets into flat arrays joins them its own way."""
        return cls(**{f.name: np.concatenate([getattr(p, f.name) for p in parts]) for f in saved_fields(cls)})


@dataclass
class ArrayRecord:
    """One numpy array, saved as an uncompressed ``.npy`` atomically (a shard of features or statistics)."""

    array: np.ndarray

    def save(self, path: str | Path) -> None:
        with atomic_path(path) as tmp:
            with open(tmp, "wb") as fh:
                np.save(fh, self.array)

    @classmethod
    def load(cls, path: str | Path) -> "ArrayRecord":
        with open(path, "rb") as fh:
            return cls(np.load(fh, allow_pickle=False))


class ArrayDict(dict):
    """Named numpy arrays, saved as one uncompressed ``.npz`` atomically (no pickled objects)."""

    def save(self, path: str | Path) -> None:
        with atomic_path(path) as tmp:
            with open(tmp, "wb") as fh:
                np.savez(fh, **self)

    @classmethod
    def load(cls, path: str | Path) -> "ArrayDict":
        with np.load(path, allow_pickle=False) as z:
            return cls({k: z[k] for k in z.files})
