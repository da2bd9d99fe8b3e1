"""Fingerprints of models and tokenizers, used as cache keys and in results."""

from __future__ import annotations

import hashlib
import json
import re
import warnings
from pathlib import Path

import torch

from lmaudit.utils import atomic_path, cache_dir, fault_point, stable_hash

_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth")


_DIGEST = re.compile(r"[0-9a-f]{32}")


def _read_memo(memo: Path) -> str | None:
    """A memoised digest, or None when the memo is missing or not a digest (then it is removed, with a warning).

    An empty or torn memo (a full disk, a killed writer from an older version) must
    never stand for a digest: two models would share one fingerprint and one cache.
    """
    try:
        text = memo.read_text().strip()
    except (FileNotFoundError, UnicodeDecodeError):
        text = None if not memo.exists() else ""
    if text is None:
        return None
    if _DIGEST.fullmatch(text):
        return text
    warnings.warn(f"digest cache file {memo} is damaged ({len(text)} characters); recomputing it", stacklevel=3)
    memo.unlink(missing_ok=True)
    return None


def file_digest(path: Path) -> str:
    """blake2b of a file's bytes, memoised on (path, size, inode, mtime, ctime) in the cache folder (written
    atomically). The inode and change time are in the key because a same-size copy over the file, with its old
    modification time restored, changes only them: the memo never outlives the bytes it digested."""
    st = path.stat()
    memo_key = stable_hash(str(path.resolve()), st.st_size, st.st_ino, st.st_mtime_ns, st.st_ctime_ns)
    memo = cache_dir() / "digests" / f"{memo_key}.txt"
    digest = _read_memo(memo)
    if digest is not None:
        return digest
    h = hashlib.blake2b(digest_size=16)
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 22), b""):
            h.update(chunk)
    digest = h.hexdigest()
    try:
        with atomic_path(memo) as tmp:
            tmp.write_text(digest)
            fault_point("digest-write")
    except OSError as exc:  # a full or read-only cache costs a re-hash next time, never a wrong digest
        warnings.warn(f"cannot memoise the digest of {path} in {memo.parent} ({exc.strerror})", stacklevel=2)
    return digest


def model_dir_fingerprint(path: str | Path) -> str:
    """Hash of a model folder's weight files (content) and config."""
    path = Path(path)
    parts = []
    for f in sorted(path.iterdir()):
        if f.suffix in _WEIGHT_SUFFIXES:
            parts.append((f.name, file_digest(f)))
        elif f.name == "config.json":
            parts.append((f.name, json.loads(f.read_text())))
    return stable_hash(parts)


def adapter_fingerprint(path: str | Path, base_fingerprint: str) -> str:
    """Hash of a PEFT adapter applied to a base: the base's fingerprint, the adapter's weight files (content) and
    its ``adapter_config.json``.

    The config's ``base_model_name_or_path`` (where the base was, not what it is: the base's
    fingerprint says that) and ``peft_version`` are left out, so a moved adapter keeps its fingerprint.
    """
    path = Path(path)
    config = json.loads((path / "adapter_config.json").read_text())
    config = {k: v for k, v in config.items() if k not in ("base_model_name_or_path", "peft_version")}
    weights = [(f.name, file_digest(f)) for f in sorted(path.iterdir())
               if f.name.startswith("adapter_model") and f.suffix in _WEIGHT_SUFFIXES]
    return stable_hash("peft-adapter", base_fingerprint, config, weights)


def module_fingerprint(model: torch.nn.Module) -> str:
    """Hash of an in-memory model's parameters and buffers (for models never saved)."""
    h = hashlib.blake2b(digest_size=16)
    for name, tensor in sorted(model.state_dict().items()):
        h.update(name.encode())
        t = tensor.detach().cpu().contiguous()
        h.update(str(t.dtype).encode() + str(tuple(t.shape)).encode())
        h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()


def tokenizer_fingerprint(tokenizer) -> str:
    vocab = sorted(tokenizer.get_vocab().items(), key=lambda kv: kv[1])
    return stable_hash(type(tokenizer).__name__, vocab, sorted(map(str, tokenizer.all_special_tokens)))
