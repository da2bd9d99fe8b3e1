"""On-disk cache of probe records, keyed by a fingerprint; atomic writes."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, TypeVar

from lmaudit.utils import stable_hash

T = TypeVar("T")


def cached(cache_dir: str | Path, key: Any, *, compute: Callable[[], T], load: Callable[[Path], T], suffix: str = ".npz") -> T:
    """Return ``load(path)`` if the record for ``key`` exists, else compute and save it.

    The object returned by ``compute`` must have ``save(path)`` writing atomically, so
    a killed run leaves either no file or a whole one.
    """
    path = Path(cache_dir) / "probes" / f"{stable_hash(key)}{suffix}"
    if path.exists():
        return load(path)
    value = compute()
    value.save(path)
    return value
