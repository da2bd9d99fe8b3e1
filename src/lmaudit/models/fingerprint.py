"""Fingerprints of models and tokenizers, used as cache keys and in results."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import torch

from lmaudit.utils import cache_dir, stable_hash

_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth")


def _file_digest(path: Path) -> str:
    """blake2b of a file's bytes, memoised on (path, size, mtime) in the cache folder."""
    st = path.stat()
    memo_key = stable_hash(str(path.resolve()), st.st_size, st.st_mtime_ns)
    memo = cache_dir() / "digests" / f"{memo_key}.txt"
    if memo.exists():
        return memo.read_text().strip()
    h = hashlib.blake2b(digest_size=16)
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 22), b""):
            h.update(chunk)
    digest = h.hexdigest()
    memo.parent.mkdir(parents=True, exist_ok=True)
    memo.write_text(digest)
    return digest


def model_dir_fingerprint(path: str | Path) -> str:
    """Hash of a model folder's weight files (content) and config."""
    path = Path(path)
    parts = []
    for f in sorted(path.iterdir()):
        if f.suffix in _WEIGHT_SUFFIXES:
            parts.append((f.name, _file_digest(f)))
        elif f.name == "config.json":
            parts.append((f.name, json.loads(f.read_text())))
    return stable_hash(parts)


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
