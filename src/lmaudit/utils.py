"""Small shared helpers: stable hashing, atomic writes, provenance."""

from __future__ import annotations

import errno
import functools
import hashlib
import importlib
import json
import os
import pkgutil
import re
import shlex
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import tomllib
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

from lmaudit import __version__
from lmaudit.credentials import mask_secrets
from lmaudit.errors import LmauditError


def stable_hash(*parts: Any, digest_size: int = 16) -> str:
    """Hex digest of ``parts`` that is stable across processes and platforms.

    Strings, bytes, numbers and JSON-serialisable containers are accepted; numpy
    arrays are hashed by dtype, shape and raw bytes. Python's ``hash()`` is never
    used because it is salted per process.
    """
    h = hashlib.blake2b(digest_size=digest_size)
    for part in parts:
        if isinstance(part, bytes):
            h.update(b"b" + part)
        elif isinstance(part, np.ndarray):
            arr = np.ascontiguousarray(part)
            h.update(f"a{arr.dtype.str}{arr.shape}".encode())
            h.update(arr.tobytes())
        else:
            h.update(b"j" + json.dumps(part, sort_keys=True, default=str).encode())
        h.update(b"\x00")
    return h.hexdigest()


def stable_seed(*parts: Any) -> int:
    """A 63-bit integer seed derived from :func:`stable_hash` of ``parts``."""
    return int(stable_hash(*parts, digest_size=8), 16) & ((1 << 63) - 1)


_FAULT_COUNT: dict[str, int] = {}


def fault_point(stage: str) -> None:
    """Test hook: ``LMAUDIT_FAULT=<stage>:<k>`` SIGKILLs this process at the k-th ``stage`` (1-based);
    ``<stage>:<k>:enospc`` raises "No space left on device" there and at every later pass (a full disk
    stays full); ``<stage>:<k>:oom`` raises ``MemoryError`` at the k-th pass only.

    Stages: ``shard-unrenamed`` (a shard written to its temporary file, before the
    rename), ``shard-saved`` (a shard file in place), ``folder-written`` (an output
    folder complete in its temporary place, before the swap), ``folder-aside`` (the
    previous output folder moved aside, the new one not yet in place), ``digest-write``
    (a model fingerprint being memoised), ``probe-batch`` (a batch of a probe about to run).
    """
    spec = os.environ.get("LMAUDIT_FAULT", "").split(":")
    if len(spec) < 2 or spec[0] != stage:
        return
    _FAULT_COUNT[stage] = _FAULT_COUNT.get(stage, 0) + 1
    count, k = _FAULT_COUNT[stage], int(spec[1])
    if spec[2:] == ["oom"]:
        if count == k:
            raise MemoryError("out of memory (injected by LMAUDIT_FAULT)")
    elif count >= k:
        if spec[2:] == ["enospc"]:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        os.kill(os.getpid(), signal.SIGKILL)


def _current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


UMASK = _current_umask()


def _machine() -> str:
    """Six hex digits naming this machine and process namespace (a pid means a process only there)."""
    try:
        namespace = os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        namespace = 0
    return stable_hash(socket.gethostname(), namespace, digest_size=3)


_MACHINE = _machine()
STALE_AFTER_S = 24 * 3600  # a temporary whose writer cannot be asked (another machine, an older version) is stale after
_TEMP = re.compile(r"\.(?P<name>.+)\.lmtmp(?P<pid>\d+)-(?P<machine>[0-9a-f]{6})\.[A-Za-z0-9_]+"
                   r"(?P<suffix>\.tmp|\.partial|\.prev|\.build)?")
_LEGACY_TEMP = r"\..+\.[a-z0-9_]{8}\.tmp"  # atomic_path's temporaries before they carried their writer
_CLEANED: set[str] = set()


def temp_prefix(name: str) -> str:
    """The start of the name of a temporary written for ``name`` beside it: ``.NAME.lmtmpPID-MACHINE.``.

    The writer's process id and machine (:func:`_machine`) in the name let a later writer tell a
    killed writer's leftovers from a live one's (:func:`remove_stale_temps`).
    """
    return f".{name}.lmtmp{os.getpid()}-{_MACHINE}."


def _writer_alive(pid: int) -> bool:
    """Whether process ``pid`` of this machine runs (one of another user counts as running)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # not ours to signal, or no way to ask: alive, to be safe
        pass
    return True


def remove_stale_temps(parent: Path, *, name: str | None = None, legacy: tuple[str, ...] = (),
                       previous: bool = False, once: bool = False) -> list[Path]:
    """Delete temporary files and folders that killed writers left in ``parent``; return what was deleted.

    A temporary named by :func:`temp_prefix` is stale when its writer, on this machine, no longer
    runs (a live writer's is never touched); one of another machine, or named without its writer
    (``legacy`` regular expressions: older versions), after :data:`STALE_AFTER_S` (24 h). The
    previous content of a folder moved aside by a killed swap (``.NAME.….prev``), from which a user
    recovers a missing folder, goes after 24 h, or with ``previous`` once a new ``name`` is in place.
    With ``once``, a folder is looked at once per process (for frequent writes such as shards).
    """
    if once:
        if str(parent) in _CLEANED:
            return []
        _CLEANED.add(str(parent))
    removed = []
    for entry in parent.glob(".*"):
        match = _TEMP.fullmatch(entry.name)
        if match is None and not any(re.fullmatch(pattern, entry.name) for pattern in legacy):
            continue
        try:
            age = time.time() - entry.lstat().st_mtime
        except FileNotFoundError:  # renamed into place (or removed) by its writer meanwhile
            continue
        if match is None or match["machine"] != _MACHINE:
            stale = age > STALE_AFTER_S
        elif match["suffix"] == ".prev" and not (previous and match["name"] == name):
            stale = age > STALE_AFTER_S
        else:
            stale = not _writer_alive(int(match["pid"]))
        if stale:
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                entry.unlink(missing_ok=True)
            removed.append(entry)
    return removed


@contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; rename it over ``path`` on success.

    A reader never sees a half-written file: either the old content, or the new one. The
    temporaries killed writers left in the folder are removed first (once per process and
    folder, :func:`remove_stale_temps`).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temps(path.parent, name=path.name, legacy=(_LEGACY_TEMP,), once=True)
    fd, tmp = tempfile.mkstemp(prefix=temp_prefix(path.name), suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    os.chmod(tmp_path, 0o666 & ~UMASK)  # mkstemp creates 0600; give the file the usual permissions
    try:
        yield tmp_path
        os.replace(tmp_path, path)
    finally:
        if tmp_path.exists():
            tmp_path.unlink()


def write_json_atomic(path: str | os.PathLike[str], obj: Any) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(obj, indent=2, sort_keys=False, default=_json_default) + "\n")


def _json_default(obj: Any) -> Any:
    if isinstance(obj, (np.floating, np.integer)):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


# what shapes a figure beside the code and the data: constraints.txt pins them, results.json records them
SHAPING_PACKAGES = ("lmaudit", "torch", "transformers", "tokenizers", "numpy", "scipy", "scikit-learn", "peft",
                    "opacus", "faker", "safetensors")


def package_versions(names: tuple[str, ...] = SHAPING_PACKAGES) -> dict[str, str]:
    """The installed version of each of ``names`` ("not installed" for one that is not)."""
    out = {}
    for name in names:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


@functools.cache
def git_state() -> dict:
    """``{"commit": HEAD, "dirty": bool}`` of the checkout lmaudit runs from (both None outside one), read once per
    process: ``dirty`` says whether the package's files (``src/lmaudit``, new ones included) differ from that commit.

    Read once, so that a commit made while a long run works never restamps its results: the code a process
    runs is what it imported at its start (the command line reads this at start-up).
    """
    here = Path(__file__).resolve().parent

    def git(*args: str) -> str | None:
        try:
            out = subprocess.run(["git", *args], cwd=here, capture_output=True, text=True, timeout=5, check=False)
        except (OSError, subprocess.SubprocessError):
            return None
        return out.stdout if out.returncode == 0 else None

    commit = (git("rev-parse", "HEAD") or "").strip() or None
    status = git("status", "--porcelain", "--", ".") if commit else None
    return {"commit": commit, "dirty": None if status is None else bool(status.strip())}


def deferred(module: str, name: str):
    """``module.name`` (a function), imported when first called: a facade that the command line imports stays
    light (``lmaudit --help`` loads no model stack), and the function is the module's own once called."""
    def call(*args, **kwargs):
        return getattr(importlib.import_module(module), name)(*args, **kwargs)

    call.__name__ = call.__qualname__ = name
    call.__doc__ = f"{module}.{name}, imported when first called."
    return call


COMMAND_LINE: list[str] = []  # the lmaudit command this process runs (set by the command line's entry point)


def provenance() -> dict:
    """Version, commit (and whether the code differed from it), package versions and creation time: the first keys
    of every results file (``results.json`` of a run or an experiment, ``epsilon.json``); run from the command line,
    also the ``command`` as typed (keys come from the environment, never from it)."""
    state = git_state()
    return {
        "lmaudit_version": __version__,
        "git_commit": state["commit"],
        "git_dirty": state["dirty"],  # the code differed from that commit: the commit alone does not reproduce it
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "packages": package_versions(),
        **({"command": mask_secrets(shlex.join(COMMAND_LINE))} if COMMAND_LINE else {}),
    }


def git_commit() -> str | None:
    """The commit of the lmaudit source tree, or None outside a git checkout (see :func:`git_state`)."""
    return git_state()["commit"]


def git_dirty() -> bool | None:
    """Whether lmaudit's source differs from :func:`git_commit` (None outside a git checkout)."""
    return git_state()["dirty"]


def cache_dir() -> Path:
    """Root of lmaudit's on-disk cache (``$LMAUDIT_CACHE`` or ``~/.cache/lmaudit``)."""
    root = os.environ.get("LMAUDIT_CACHE")
    path = Path(root) if root else Path.home() / ".cache" / "lmaudit"
    path.mkdir(parents=True, exist_ok=True)
    return path


def read_toml(path: str | os.PathLike[str], what: str = "file") -> dict:
    """Parse a TOML file; a missing, unreadable or malformed file (or a pipe or device) is a one-line
    :class:`LmauditError`."""
    path = Path(path)
    if not path.exists():
        raise LmauditError(f"{path}: no such {what}")
    if not path.is_file():
        raise LmauditError(f"{path}: the {what} is not a regular file", hint="pass a .toml file")
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise LmauditError(f"{path}: malformed TOML ({exc})") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise LmauditError(f"{path}: cannot read the {what} ({getattr(exc, 'strerror', None) or exc})") from None


_IMPORTED_PACKAGES: set[str] = set()


def import_submodules(package: str) -> None:
    """Import every module of ``package`` once: registries find their entries this way, without a list of names."""
    if package in _IMPORTED_PACKAGES:
        return
    _IMPORTED_PACKAGES.add(package)
    for info in pkgutil.iter_modules(importlib.import_module(package).__path__):
        importlib.import_module(f"{package}.{info.name}")


def metric_name(*parts: str) -> str:
    """A metric name MLflow (and ``transformers``' MLflow reporter) keeps as it is, from its parts: ``%`` reads
    ``pct`` and ``@`` reads ``_at_`` (``tpr@1%fpr`` → ``tpr_at_1pct_fpr``), other characters outside letters, digits
    and ``_ - . /`` become ``_``."""
    text = "/".join(str(p) for p in parts if p not in (None, ""))
    text = re.sub(r"%(?=[A-Za-z])", "pct_", text).replace("%", "pct").replace("@", "_at_")
    return re.sub(r"[^A-Za-z0-9_\-./]", "_", text)
