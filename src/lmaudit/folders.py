"""Output folders written as one unit: a run's files always belong together.

Every command that writes a folder (``mia``, ``audit-set``, ``extract``, ``pii``,
``demo``, ``run``, ``tables``, ``pretrain``, ``finetune``, ``unlearn``,
``shadows``) builds it in a uniquely named temporary folder beside ``--out``
(``.NAME.lmtmpPID-MACHINE.XXXX.partial``: the name says which writer, see
:func:`~lmaudit.utils.remove_stale_temps`), writes :data:`MANIFEST` last (size and SHA-256 of every
file), and only then swaps it into place: the previous folder is moved aside and
deleted. A reader thus sees the old folder or the new one, never a mix; a process
killed before the swap leaves the old folder untouched; two processes writing one
``--out`` leave the folder of whichever swapped last, whole.

Because the swap replaces the folder whole, :func:`check_replaceable` refuses, before
any work, an ``--out`` that holds files lmaudit did not write, one that holds another
kind of output than the command writes (the manifest's ``what``: a model is never
replaced by a run), and one that is, contains or lies inside one of the command's
inputs or the cache. :func:`verify_folder` checks a folder against its manifest
(``report`` refuses a folder whose files changed after the run wrote them; a model
load re-hashes a file whose size, inode, modification or change time differs from
what the manifest recorded); report files are derived and left out of the manifest.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import shutil
import tempfile
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from fnmatch import fnmatch
from pathlib import Path

from lmaudit.errors import LmauditError
from lmaudit.utils import UMASK, fault_point, remove_stale_temps, temp_prefix, write_json_atomic

MANIFEST = "lmaudit_manifest.json"
DERIVED = ("report.html", "report.md", "report_files", "epsilon.json")  # derived from the data files at will
# what folders written before manifests existed may hold (results, experiments, demo data, models, shadows)
_LEGACY_MARKERS = ("results.json", "lmaudit_training.json", "shadows.json")
_LEGACY_NAMES = ("*.json", "*.jsonl", "*.parquet", "*.csv", "*.npz", "*.png", "*.md", "*.txt", "*.safetensors",
                 "dlm", "shadow*", *DERIVED)
_DISK_ERRORS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM, errno.ENOTDIR, errno.EISDIR)
_DISK_HINTS = {
    errno.ENOSPC: "free some space (or pick --out on another disk) and run the command again",
    errno.EDQUOT: "your disk quota is used up: free some space (or pick --out elsewhere) and run the command again",
    errno.EROFS: "that disk is mounted read-only: pick a writable --out",
    errno.EACCES: "you may not write there: pick a folder you own for --out (or fix its permissions)",
    errno.EPERM: "you may not write there: pick a folder you own for --out (or fix its permissions)",
    errno.ENOTDIR: "a part of the path is a file, not a folder: pick another --out",
    errno.EISDIR: "a file lmaudit writes is a folder there: pick another --out",
}
# what a folder's manifest says it is (``what``): a job's kind (lmaudit.runs.common.Job), or one of these, which hold
# no results
NOT_RESULTS = ("model", "shadows", "canaries")
# older manifests said "run" for every results folder; folders without a manifest are known by a marker file
_LEGACY_KIND = {"results.json": "run", "lmaudit_training.json": "model", "shadows.json": "shadows"}


def sha256_file(path: Path) -> str:
    """The SHA-256 of a file's bytes, read in 4 MiB chunks."""
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
        raise LmauditError(f"{path}: unreadable manifest",
                           hint="the folder is damaged; re-run the command that wrote it") from None
    return manifest


def _stat_key(st: os.stat_result) -> list[int]:
    """What an in-place change of a file alters, even one that keeps its size and restores its mtime: the inode
    (a copy over it), the change time (any write, or a restored mtime) and the modification time."""
    return [st.st_ino, st.st_mtime_ns, st.st_ctime_ns]


def write_manifest(folder: Path, what: str) -> dict:
    """Record the size, SHA-256 and stat key (:func:`_stat_key`) of every file under ``folder`` except derived
    report files."""
    files = {}
    for path in sorted(folder.rglob("*")):
        rel = path.relative_to(folder)
        if path.is_file() and rel.as_posix() != MANIFEST and not _is_derived(rel):
            digest = sha256_file(path)
            st = path.stat()
            files[rel.as_posix()] = {"bytes": st.st_size, "sha256": digest, "stat": _stat_key(st)}
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


def folder_kind(folder: Path) -> str | None:
    """What lmaudit wrote ``folder`` as (its manifest's ``what``, or a marker file's kind); None when unknown."""
    try:
        manifest = _read_manifest(folder)
    except LmauditError:
        return None
    if manifest is not None:
        return str(manifest.get("what"))
    return next((kind for marker, kind in _LEGACY_KIND.items() if (folder / marker).is_file()), None)


def _same_kind(existing: str | None, kind: str | None) -> bool:
    if existing is None or kind is None or existing == kind:
        return True
    return existing == "run" and kind not in NOT_RESULTS  # written before manifests said which run


CACHE = "the cache"


def with_cache(inputs: dict | None = None) -> dict:
    """``inputs`` and lmaudit's cache folder: what a user's ``--out`` must never replace (the cache's own writes
    go inside it, so only commands and runs add it)."""
    root = os.environ.get("LMAUDIT_CACHE")
    return {**(inputs or {}), CACHE: Path(root) if root else Path.home() / ".cache" / "lmaudit"}


def _input_paths(inputs: dict | None) -> list[tuple[str, Path]]:
    """(name, path) of every input given (None skipped, lists flattened)."""
    pairs = []
    for name, value in (inputs or {}).items():
        for path in value if isinstance(value, (list, tuple)) else [value]:
            if path is not None and str(path) and not str(path).startswith("<"):  # "<memory>": not a file
                pairs.append((name, Path(path)))
    return pairs


def _check_inputs(out: Path, what: str, inputs: dict | None, options: dict | None = None) -> None:
    """``out`` must not be, contain or lie inside any input: replacing it would delete what the command reads."""
    real_out = Path(os.path.realpath(out))
    for name, path in _input_paths(inputs):
        real = Path(os.path.realpath(path))
        if real == real_out:
            relation = "is"
        elif real_out in real.parents:
            relation = "contains"
        elif real in real_out.parents:
            relation = "lies inside"
        else:
            continue
        shown = name if name == CACHE else f"{name} '{path}'"
        raise LmauditError(f"{what} '{out}' {relation} {shown}: writing it would replace what the command reads",
                           hint=f"name an output folder outside {name}", options=options or ())


def resolve_out(out: str | Path, what: str = "--out") -> Path:
    """``out`` with a symbolic link resolved (the folder it points to is written); a link that loops is refused."""
    out = Path(out)
    if not out.is_symlink():
        return out
    try:
        return Path(os.path.realpath(out, strict=False))
    except (OSError, RuntimeError):
        raise LmauditError(f"{what} '{out}' is a symbolic link that cannot be followed",
                           hint="name a real folder") from None


def check_replaceable(out: str | Path, what: str = "--out", *, kind: str | Callable[[], str] | None = None,
                      inputs: dict | None = None, options: dict | None = None) -> Path:
    """``out`` may be written: absent, empty, or a folder lmaudit wrote as ``kind``; said before any work. ``kind``
    may be a function giving it, called only when ``out`` holds a folder lmaudit wrote (a job's type, read from its
    declaration, costs importing the job).

    ``inputs`` maps an option name (``"--model"``) to the path(s) the command reads; an ``out``
    that is, contains or lies inside one of them (or the cache) is refused. A symbolic link is
    resolved: the returned path is the folder that will be written. With ``options`` (as
    :class:`~lmaudit.errors.LmauditError` takes them), ``what`` and the input names may be ``{setting}``
    placeholders, spelled as Python's parameters or the command line's options by whoever reads the error.
    """
    given = Path(out)
    out = resolve_out(given, what)
    _check_inputs(out, what, inputs, options)
    spelled = {"options": options or ()}
    if out.exists() and not out.is_dir():
        raise LmauditError(f"{what} '{given}' is an existing file", hint="name a folder (it is created if absent)",
                           **spelled)
    if out.is_dir():
        existing, foreign = _inspect(out)
        if existing is not None and callable(kind):
            kind = kind()
        if not _same_kind(existing, kind):
            raise LmauditError(f"{what} '{given}' holds {_a(existing)} lmaudit wrote; this command writes {_a(kind)}",
                               hint=f"name another folder: lmaudit replaces its output folder whole, and never "
                                    f"replaces {_a(existing)} with {_a(kind)}", **spelled)
        if foreign:
            shown = ", ".join(foreign[:3]) + (f" and {len(foreign) - 3} more" if len(foreign) > 3 else "")
            raise LmauditError(f"{what} '{out}' holds files lmaudit did not write ({shown})",
                               hint="lmaudit replaces its output folder whole: name a new or empty folder, "
                                    "or move those files out", **spelled)
    if out.parent.exists() and not out.parent.is_dir():
        raise LmauditError(f"{what} '{given}': '{out.parent}' is a file, not a folder", **spelled)
    return out


def _inspect(out: Path) -> tuple[str | None, list[str]]:
    """(what lmaudit wrote ``out`` as, its entries lmaudit did not write); a folder another writer moves aside
    while it is read counts as absent (the swap handles it), never as a crash or as foreign files."""
    try:
        existing = folder_kind(out)
        try:
            foreign = _foreign_entries(out)
        except LmauditError:
            foreign = [MANIFEST]
    except FileNotFoundError:
        return None, []
    return (existing, foreign) if out.exists() else (None, [])


def _a(kind: str | None) -> str:
    """"a model", "an experiment", "a mia run"."""
    noun = {None: "output", "run": "results folder", "model": "model", "shadows": "set of shadow models",
            "experiment": "experiment", "canaries": "canary set", "corpus": "corpus export"}.get(kind, f"{kind} run")
    return ("an " if noun[0] in "aeiou" else "a ") + noun


def _remove_stale(out: Path) -> None:
    """Delete temporaries of killed writers beside ``out`` (:func:`~lmaudit.utils.remove_stale_temps`: those of
    writers no longer running; those written before temporaries named their writer after a day)."""
    remove_stale_temps(out.parent, name=out.name, legacy=(re.escape(f".{out.name}.") + r".+\.(partial|prev)",))


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
            prev = out.parent / f"{temp_prefix(out.name)}{uuid.uuid4().hex[:8]}.prev"
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
def output_folder(out: str | Path, *, what: str = "run", inputs: dict | None = None) -> Iterator[Path]:
    """Yield an empty temporary folder beside ``out``; on success, write the manifest and swap it into place.

    ``what`` is the kind of output (recorded in the manifest; an existing folder of another
    kind is refused), ``inputs`` what the writer read (see :func:`check_replaceable`). On an
    exception (a full disk, an interrupt) the temporary folder is removed and ``out`` is left
    as it was; a full, read-only or forbidden disk is a one-line error naming the path.
    """
    out = check_replaceable(out, kind=what, inputs=inputs)
    tmp = None
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        _remove_stale(out)
        tmp = Path(tempfile.mkdtemp(prefix=temp_prefix(out.name), suffix=".partial", dir=out.parent))
        os.chmod(tmp, 0o777 & ~UMASK)
        yield tmp
        write_manifest(tmp, what)
        fault_point("folder-written")
        _swap_into_place(tmp, out)
        remove_stale_temps(out.parent, name=out.name, previous=True)  # a killed swap's old content: replaced now
    except OSError as exc:
        if exc.errno not in _DISK_ERRORS:
            raise
        kept = "left unchanged" if out.exists() else "not created"
        where = f" ({exc.filename})" if exc.filename and Path(exc.filename).name != out.name else ""
        raise LmauditError(f"cannot write {out}: {exc.strerror}{where}; {out} was {kept}",
                           hint=_DISK_HINTS.get(exc.errno)) from None
    finally:
        if tmp is not None and tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def disk_error(exc: OSError, path: str | Path | None = None) -> LmauditError | None:
    """A full, read-only or forbidden disk met anywhere (the cache, a report) as a one-line error naming the path
    (the error's own, else ``path``) and what to do; None for any other OSError."""
    if exc.errno not in _DISK_ERRORS:
        return None
    named = exc.filename or path
    where = f" {named}" if named else ""
    hint = _DISK_HINTS[exc.errno] + " (for the cache: set $LMAUDIT_CACHE to another folder, or pass --no-cache)"
    return LmauditError(f"cannot write{where}: {exc.strerror}", hint=hint)


def missing_folder_hint(folder: Path) -> str | None:
    """When ``folder`` is missing because a writer was killed mid-swap: where its previous content is."""
    left = sorted(folder.parent.glob(f".{folder.name}.*.prev"))
    return f"an interrupted write left the previous content in {left[-1]}" if left else None


def verify_folder(folder: str | Path, *, hashes: bool = True, suffixes: tuple[str, ...] | None = None) -> dict | None:
    """Check every file the folder's manifest lists (size, and SHA-256 when ``hashes``); return the manifest.

    Without ``hashes``, a file is still hashed when its stat key (inode, modification and
    change time) differs from the one the manifest recorded: weights copied over a file in
    place, with the old size and modification time restored, are found (the hash is paid only
    for a changed or copied file). ``suffixes`` limits the check to files with those endings.

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
        st = path.stat()
        rehash = hashes or entry.get("stat") != _stat_key(st)
        if st.st_size != entry.get("bytes") or (rehash and sha256_file(path) != entry.get("sha256")):
            raise LmauditError(f"{path}: changed since the run wrote it (its content does not match {MANIFEST})",
                               hint=hint)
    return manifest
