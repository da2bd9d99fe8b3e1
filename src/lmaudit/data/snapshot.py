"""The embedded corpus as shipped data: the docstrings every committed tiny-model result was built from.

The embedded default trains its tiny models on the docstrings of numpy, scipy, torch and transformers. Read from
whatever versions are installed, that corpus moved with every release (one transformers release changed its content
hash and every figure trained on it), so the corpus is shipped instead: ``embedded/docstrings.jsonl.xz`` holds the
documents (id, package, source, text, pool) that the installed-package extractor gave for the versions its
``manifest.json`` names (numpy 2.4.6, scipy 1.17.1, torch 2.13.0, transformers 5.24.0: content hash
``d89b32e7…``), beside the four packages' licences (``embedded/LICENSES/``; the docstrings are theirs).

The file is checked against the SHA-256 its manifest records before it is read; a damaged copy is an error, never a
different corpus. :func:`write_snapshot` writes a new one from documents (the maintainers' way to move the pin).
"""

from __future__ import annotations

import functools
import hashlib
import json
import lzma
from pathlib import Path

from lmaudit.errors import DataError

EMBEDDED = Path(__file__).resolve().parent / "embedded"
DOCUMENTS_FILE = "docstrings.jsonl.xz"


@functools.cache
def embedded_manifest() -> dict:
    """The shipped corpus' manifest: packages and versions it was read from, licences, counts, content hash."""
    try:
        return json.loads((EMBEDDED / "manifest.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise DataError(f"{EMBEDDED / 'manifest.json'}: the embedded corpus' manifest cannot be read "
                        f"({exc.__class__.__name__})", hint="reinstall lmaudit") from None


def embedded_hash() -> str:
    """The content hash of the shipped corpus (what committed results name as their corpus)."""
    return embedded_manifest()["content_hash"]


@functools.cache
def embedded_records() -> tuple[dict, ...]:
    """The shipped corpus' documents as records (id, package, source, text, pool), read once per process."""
    path = EMBEDDED / DOCUMENTS_FILE
    try:
        packed = path.read_bytes()
    except OSError as exc:
        raise DataError(f"{path}: the embedded corpus cannot be read ({exc.__class__.__name__})",
                        hint="reinstall lmaudit") from None
    if hashlib.sha256(packed).hexdigest() != embedded_manifest()["sha256"]:
        raise DataError(f"{path}: the embedded corpus differs from the one its manifest names (SHA-256)",
                        hint="reinstall lmaudit: a changed corpus would train other models")
    return tuple(json.loads(line) for line in lzma.decompress(packed).decode("utf-8").splitlines())


def write_snapshot(records: list[dict], folder: Path, manifest: dict) -> Path:
    """Write ``records`` (id, package, source, text, pool) as a shipped corpus in ``folder``: the compressed
    documents and a manifest (``manifest`` with the file's SHA-256 added). Returns the manifest's path."""
    folder.mkdir(parents=True, exist_ok=True)
    payload = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records).encode("utf-8")
    packed = lzma.compress(payload, preset=9 | lzma.PRESET_EXTREME)
    (folder / DOCUMENTS_FILE).write_bytes(packed)
    out = folder / "manifest.json"
    out.write_text(json.dumps({**manifest, "sha256": hashlib.sha256(packed).hexdigest()}, indent=2) + "\n")
    return out
