"""Sharded, resumable probe work: every shard of a set is computed once and cached on its own.

A set of records is cut into consecutive shards of ``shard_size`` records. Each
shard's result is cached under a key of (what is computed, with which model and
settings, the shard's own content), written atomically: a run killed at any moment
leaves whole shard files or none, and the same command started again computes only
the shards that are missing. Because the key holds the shard's content and not the
whole set's, changing one record invalidates one shard; probing a new model leaves
every other model's shards valid. The batching settings (batch size, token budget)
are part of the key: a text's float32 statistics change in their last bits with the
texts padded beside it, so two batch sizes give two (equally valid) caches and a rerun
of one command reads back exactly what it computed. The backend is not: each worker
batches a shard as this process would.

A manifest per (work, set) in ``CACHE/probes/manifests/`` lists the shards, their
record ranges, files and whether each is done; it is rewritten (atomically) after
every shard and says how far a run got.

Shards run on the current backend (:mod:`lmaudit.probes.backends`): in this process or
on Ray actors; the results come back here and are written here.
"""

from __future__ import annotations

import os
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from lmaudit.data.loaders import TextSet
from lmaudit.errors import LmauditError
from lmaudit.folders import disk_error
from lmaudit.probes.backends import current_backend
from lmaudit.progress import info, progress
from lmaudit.utils import atomic_path, fault_point, stable_hash, write_json_atomic

DEFAULT_SHARD_SIZE = 256
DEVICE_SHARD_SIZE = 4096  # on an accelerator: fewer, longer runs of batches (a shard's stats come back at once)
# a served model: one request a text, a few texts a minute, and its endpoint caches every answer, so a shard is only
# the step in which progress is reported (a 120-text set reports at 27%, 53%, 80% and the end, not only at the end)
SERVED_SHARD_SIZE = 32


def shard_size_default(device: str | None = None) -> int:
    """Records per shard: ``$LMAUDIT_SHARD_SIZE``, else 256 on a CPU, :data:`DEVICE_SHARD_SIZE` on an accelerator
    and :data:`SERVED_SHARD_SIZE` for a served model (``device``: the model's, ``"remote"`` when served; a shard is
    one run of batches, whose statistics come back to the host once)."""
    raw = os.environ.get("LMAUDIT_SHARD_SIZE", "")
    fallback = {None: DEFAULT_SHARD_SIZE, "cpu": DEFAULT_SHARD_SIZE, "remote": SERVED_SHARD_SIZE}.get(
        device, DEVICE_SHARD_SIZE)
    try:
        size = int(raw) if raw else fallback
    except ValueError:
        size = 0
    if size < 1:
        raise LmauditError(f"LMAUDIT_SHARD_SIZE must be a positive integer, got '{raw}'")
    return size


def shard_bounds(n: int, size: int) -> list[tuple[int, int]]:
    """[(start, stop), ...] covering 0..n in consecutive pieces of ``size`` (the last may be shorter)."""
    return [(a, min(a + size, n)) for a in range(0, n, size)]


@dataclass
class Sharded:
    """The shards of one piece of work over one set: their ranges and results (in memory or on disk)."""

    bounds: list[tuple[int, int]]
    load: Callable[[Path], Any]
    paths: list[Path | None] = field(default_factory=list)
    values: list[Any] = field(default_factory=list)  # in-memory results (no cache)
    recompute: Callable[[int], Any] | None = None  # computes (and caches again) shard i

    def __len__(self) -> int:
        return len(self.bounds)

    def get(self, i: int):
        """The result of shard ``i``; a cached file that cannot be read, for any reason, is computed again.

        A file deleted since the run checked it, a flipped bit that fails a CRC, a
        header that no longer matches: each is reported (naming the file) and the shard
        is recomputed and cached anew; the statistics never come from a damaged file.
        """
        if self.values and self.values[i] is not None:
            return self.values[i]
        try:
            return self.load(self.paths[i])
        except PermissionError:  # not damage: the user must see it
            raise
        except Exception as exc:
            if self.recompute is None:
                raise
            warnings.warn(f"probe cache file {self.paths[i]} could not be read ({type(exc).__name__}: {exc}); "
                          "recomputing that shard", stacklevel=2)
            self.paths[i].unlink(missing_ok=True)
            return self.recompute(i)

    def __iter__(self) -> Iterator[tuple[tuple[int, int], Any]]:
        for i, b in enumerate(self.bounds):
            yield b, self.get(i)

    def all(self) -> list:
        return [self.get(i) for i in range(len(self))]


def _check_readable(path: Path) -> None:
    """Open a shard's structure without reading its arrays: a truncated file fails here.

    ``.npz``: the zip directory (at the end of the file); ``.npy``: the header, and the
    file must be long enough for the shape it declares (a memory map checks that).
    """
    if path.suffix == ".npz":
        with np.load(path, allow_pickle=False) as z:
            z.files  # noqa: B018
    else:
        np.load(path, mmap_mode="r", allow_pickle=False)


def _present(path: Path) -> bool:
    """Whether the shard at ``path`` is there and whole (an unreadable file is removed)."""
    if not path.exists():
        return False
    try:
        _check_readable(path)
    except PermissionError:  # not damage: the user must see it
        raise
    except Exception as exc:  # a damaged file: the atomic writes never leave one, but disks and people can
        warnings.warn(f"probe cache file {path} is unreadable ({type(exc).__name__}: {exc}); recomputing it",
                      stacklevel=3)
        path.unlink(missing_ok=True)
        return False
    return True


STALE_TMP_S = 24 * 3600


def _remove_stale_temporaries(folder: Path) -> None:
    """Temporary files a killed run left behind (a day old: no live writer still owns them)."""
    now = time.time()
    for tmp in folder.glob(".*.tmp"):
        try:
            if now - tmp.stat().st_mtime > STALE_TMP_S:
                tmp.unlink()
        except OSError:
            pass


def run_sharded(
    textset: TextSet,
    *,
    task,
    handle,
    key: tuple | None,
    load: Callable[[Path], Any],
    cache_dir=None,
    description: str = "probe",
    shard_size: int | None = None,
    suffix: str = ".npz",
    fingerprint: Callable[[TextSet], Any] = TextSet.fingerprint,
) -> Sharded:
    """Compute ``task(handle, shard)`` for every shard of ``textset`` not already cached.

    ``key`` names the work (model fingerprint, settings, version) without the data;
    with ``cache_dir`` and ``key`` every shard is written to and read from
    ``CACHE/probes/shards/``, unless the handle's adapter keeps no probes (a served model: its endpoint keeps
    the answers). Without them the results stay in memory. Results must
    have ``save(path)``. ``fingerprint(shard)`` is everything of a shard the result
    depends on (default: its records' texts; a shard's ``meta["shard_start"]`` is its
    first record's index in the set).
    """

    size = shard_size or shard_size_default(handle.device)
    bounds = shard_bounds(len(textset), size)
    shards = [TextSet(textset.records[a:b], source=textset.source, meta={**textset.meta, "shard_start": a})
              for a, b in bounds]
    result = Sharded(bounds, load)
    cached = cache_dir is not None and key is not None and handle.adapter.keeps_probes
    if cached:
        root = Path(cache_dir) / "probes"
        shard_keys = [stable_hash("shard", key, fingerprint(s)) for s in shards]
        result.paths = [root / "shards" / f"{k}{suffix}" for k in shard_keys]
        manifest_path = root / "manifests" / f"{stable_hash('manifest', key, shard_keys, size)}.json"
        if (root / "shards").is_dir():
            _remove_stale_temporaries(root / "shards")
        done = [_present(p) for p in result.paths]
    else:
        result.values = [None] * len(bounds)
        done = [False] * len(bounds)

    def write_manifest() -> None:
        write_json_atomic(manifest_path, {
            "work": repr(key), "source": textset.source, "n_records": len(textset), "shard_size": size,
            "n_done": sum(done),
            "shards": [{"start": a, "stop": b, "file": p.name, "done": d}
                       for (a, b), p, d in zip(bounds, result.paths, done)],
        })

    if cached:
        def recompute(i: int):
            (_, value), = current_backend().map(handle, task, [(i, shards[i])])
            with atomic_path(result.paths[i]) as tmp:
                value.save(tmp)
            return value

        result.recompute = recompute

    todo = [i for i, d in enumerate(done) if not d]
    if cached and todo and len(todo) < len(bounds):
        info(f"[dim]{description}: resuming, {len(bounds) - len(todo)} of {len(bounds)} shards already cached[/dim]")
    if not todo:
        return result
    backend = current_backend()
    with progress(description, total=len(textset)) as bar:
        bar.advance(sum(len(shards[i]) for i in range(len(shards)) if done[i]))
        if cached:
            write_manifest()
        for i, value in backend.map(handle, task, ((i, shards[i]) for i in todo)):
            if cached:
                try:
                    with atomic_path(result.paths[i]) as tmp:
                        value.save(tmp)
                        fault_point("shard-unrenamed")
                    done[i] = True
                    write_manifest()
                except OSError as exc:  # a full or read-only cache: the path, and --no-cache or another cache
                    raise disk_error(exc, result.paths[i].parent) or exc from None
                fault_point("shard-saved")
            else:
                result.values[i] = value
            bar.advance(len(shards[i]))
    return result
