"""Output folders written as one unit: a run's files always belong together.

Every command that writes a folder (``mia``, ``audit-set``, ``extract``, ``pii``,
``demo``, ``run``, ``tables``, ``pretrain``, ``finetune``, ``unlearn``,
``shadows``) builds it in a uniquely named temporary folder beside ``--out``
(``.NAME.XXXX.partial``), writes :data:`MANIFEST` last (size and SHA-256 of every
file), and only then swaps it into place: the previous folder is moved aside and
deleted. A reader thus sees the old folder or the new one, never a mix; a process
killed before the swap leaves the old folder untouched; two processes writing one
``--out`` leave the folder of whichever swapped last, whole.

Because the swap replaces the folder whole, :func:`check_replaceable` refuses an
existing ``--out`` that holds files lmaudit did not write (checked before any
work). :func:`verify_folder` checks a folder against its manifest (``report``
refuses a folder whose files changed after the run wrote them); report files are
derived and left out of the manifest.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from fnmatch import fnmatch
from pathlib import Path

from lmaudit.errors import LmauditError
from lmaudit.utils import UMASK, fault_point, write_json_atomic

MANIFEST = "lmaudit_manifest.json"
DERIVED = ("report.html", "report.md", "report_files", "epsilon.json")  # derived from the data files at will
# what folders written before manifests existed may hold (results, experiments, demo data, models, shadows)
_LEGACY_MARKERS = ("results.json", "lmaudit_training.json", "shadows.json")
_LEGACY_NAMES = ("*.json", "*.jsonl", "*.parquet", "*.csv", "*.npz", "*.png", "*.md", "*.txt", "*.safetensors",
                 "dlm", "shadow*", *DERIVED)
_STALE_AFTER_S = 24 * 3600
_DISK_ERRORS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 22), b""):
            h.update(chunk)
    return h.hexdigest()


def _is_derived(rel: Path) -> bool:
    return any(part in DERIVED for part in rel.parts)


def _read_manifest(folder: Path) -> dict | None:
    """The folder's manifest, None when it has none; a malformed one is an error naming it."""
    path = folder / MANIFEST
    if not path.exists():
        return None
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
        files = manifest["files"]
        if not isinstance(files, dict):
            raise TypeError
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError):
        raise LmauditError(f"{path}: unreadable manifest", hint="the folder is damaged; re-run the command that wrote it") from None
    return manifest


def write_manifest(folder: Path, what: str) -> dict:
    """Record the size and SHA-256 of every file under ``folder`` except derived report files."""
    files = {}
    for path in sorted(folder.rglob("*")):
        rel = path.relative_to(folder)
        if path.is_file() and rel.as_posix() != MANIFEST and not _is_derived(rel):
            files[rel.as_posix()] = {"bytes": path.stat().st_size, "sha256": _sha256(path)}
    manifest = {"written_by": "lmaudit", "what": what, "write_id": uuid.uuid4().hex, "files": files}
    write_json_atomic(folder / MANIFEST, manifest)
    return manifest


def _foreign_entries(out: Path) -> list[str]:
    """Top-level entries of an existing ``out`` that lmaudit did not write there."""
    names = sorted(p.name for p in out.iterdir())
    manifest = _read_manifest(out) if (out / MANIFEST).exists() else None
    if manifest is not None:
        known = {rel.split("/", 1)[0] for rel in manifest["files"]} | set(DERIVED) | {MANIFEST}
        return [n for n in names if n not in known]
    if not any(m in names for m in _LEGACY_MARKERS):
        return names
    return [n for n in names if not any(fnmatch(n, pattern) for pattern in _LEGACY_NAMES)]


def check_replaceable(out: str | Path, what: str = "--out") -> Path:
    """``out`` may be written: absent, empty, or a folder lmaudit wrote; said before any work."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise LmauditError(f"{what} '{out}' is an existing file", hint="name a folder (it is created if absent)")
    if out.is_dir():
        try:
            foreign = _foreign_entries(out)
        except LmauditError:
            foreign = [MANIFEST]
        if foreign:
            shown = ", ".join(foreign[:3]) + (f" and {len(foreign) - 3} more" if len(foreign) > 3 else "")
            raise LmauditError(f"{what} '{out}' holds files lmaudit did not write ({shown})",
                               hint="lmaudit replaces its output folder whole: name a new or empty folder, "
                                    "or move those files out")
    if out.parent.exists() and not out.parent.is_dir():
        raise LmauditError(f"{what} '{out}': '{out.parent}' is a file, not a folder")
    return out


def _remove_stale(out: Path) -> None:
    """Delete temporaries of killed writers of ``out`` (older than a day; a live writer's are younger)."""
    for p in out.parent.glob(f".{out.name}.*"):
        try:
            age = time.time() - p.stat().st_mtime
        except FileNotFoundError:  # another writer renamed its folder into place (or removed it) meanwhile
            continue
        if p.suffix in (".partial", ".prev") and age > _STALE_AFTER_S:
            shutil.rmtree(p, ignore_errors=True)


def _swap_into_place(tmp: Path, out: Path) -> None:
    """Rename ``tmp`` to ``out``, moving whatever is at ``out`` aside first (retried if another writer races)."""
    aside = []
    try:
        for _ in range(1000):
            try:
                os.rename(tmp, out)  # atomic; succeeds when out is absent (or an empty folder)
                return
            except OSError as exc:
                if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                    raise
            prev = out.parent / f".{out.name}.{uuid.uuid4().hex[:8]}.prev"
            try:
                os.rename(out, prev)
            except FileNotFoundError:  # another writer moved it first
                continue
            aside.append(prev)
            fault_point("folder-aside")
        raise LmauditError(f"could not put {out} in place: other processes keep writing it")
    finally:
        for prev in aside:
            shutil.rmtree(prev, ignore_errors=True)


@contextmanager
def output_folder(out: str | Path, *, what: str = "run") -> Iterator[Path]:
    """Yield an empty temporary folder beside ``out``; on success, write the manifest and swap it into place.

    On an exception (a full disk, an interrupt) the temporary folder is removed and
    ``out`` is left as it was; a full, read-only or forbidden disk is a one-line error.
    """
    out = check_replaceable(out)
    tmp = None
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        _remove_stale(out)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".partial", dir=out.parent))
        os.chmod(tmp, 0o777 & ~UMASK)
        yield tmp
        write_manifest(tmp, what)
        fault_point("folder-written")
        _swap_into_place(tmp, out)
    except OSError as exc:
        if exc.errno not in _DISK_ERRORS:
            raise
        kept = "left unchanged" if out.exists() else "not created"
        raise LmauditError(f"cannot write {out}: {exc.strerror}; {out} was {kept}",
                           hint="free some space (or pick a writable --out) and run the command again") from None
    finally:
        if tmp is not None and tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def missing_folder_hint(folder: Path) -> str | None:
    """When ``folder`` is missing because a writer was killed mid-swap: where its previous content is."""
    left = sorted(folder.parent.glob(f".{folder.name}.*.prev"))
    return f"an interrupted write left the previous content in {left[-1]}" if left else None


def verify_folder(folder: str | Path, *, hashes: bool = True, suffixes: tuple[str, ...] | None = None) -> dict | None:
    """Check every file the folder's manifest lists (size, and SHA-256 when ``hashes``); return the manifest.

    ``suffixes`` limits the check to files with those endings.

    None for a folder without a manifest (written by hand, or by a version of lmaudit without manifests).
    Raises :class:`LmauditError` naming the first file that is missing or changed.
    """
    folder = Path(folder)
    manifest = _read_manifest(folder)
    if manifest is None:
        return None
    hint = f"the folder's files no longer belong together; re-run the command that wrote {folder}"
    for rel, entry in manifest["files"].items():
        if suffixes is not None and not rel.endswith(suffixes):
            continue
        path = folder / rel
        if not path.is_file():
            raise LmauditError(f"{path}: missing (listed in {MANIFEST})", hint=hint)
        if path.stat().st_size != entry.get("bytes") or (hashes and _sha256(path) != entry.get("sha256")):
            raise LmauditError(f"{path}: changed since the run wrote it (its content does not match {MANIFEST})",
                               hint=hint)
    return manifest
