"""Fingerprints of models and tokenizers, used as cache keys and in results."""

from __future__ import annotations

import hashlib
import json
import re
import tempfile
import warnings
from fnmatch import fnmatch
from pathlib import Path

import torch

from lmaudit.utils import atomic_path, cache_dir, fault_point, stable_hash

_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth")
# the files that define a saved tokenizer (fast and slow ones: vocabulary, merges, sentencepiece models, settings)
_TOKENIZER_FILES = ("tokenizer*", "special_tokens_map.json", "added_tokens.json", "vocab*", "merges*", "*.model",
                    "spiece*", "chat_template*")
# the backend's state that each call with padding or truncation arguments sets and resets: not its behaviour
_BACKEND_STATE = ("truncation", "padding")
# the settings of a tokenizer that change the ids or the text a probe sees (names that do not apply are skipped)
_TOKENIZER_SETTINGS = ("padding_side", "truncation_side", "model_max_length", "add_bos_token", "add_eos_token",
                       "add_prefix_space", "do_lower_case", "clean_up_tokenization_spaces", "chat_template")


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


def model_dir_fingerprint(path: str | Path, *, tokenizer: bool = True) -> str:
    """Hash of a model folder's weight files (content), config and tokenizer files (content).

    The tokenizer files (``tokenizer.json``, its config, vocabularies, merges, sentencepiece
    models, chat templates: :data:`_TOKENIZER_FILES`) are in it because the same weights
    with a tokenizer that splits text otherwise score other numbers: a probe cache keyed by
    this fingerprint must never serve one for the other. ``tokenizer=False`` gives the fingerprint
    older lmaudit versions recorded before the tokenizer files were in it (weights and config alone), which
    training records written then hold.
    """
    path = Path(path)
    tokenizer_files = _tokenizer_files(path) if tokenizer else []
    parts = []
    for f in sorted(path.iterdir()):
        if f.suffix in _WEIGHT_SUFFIXES:
            parts.append((f.name, file_digest(f)))
        elif f.name == "config.json":
            parts.append((f.name, json.loads(f.read_text())))
    return stable_hash(parts + tokenizer_files)


def _tokenizer_files(path: Path) -> list:
    """("tokenizer", name, digest) of each tokenizer file of a folder (:data:`_TOKENIZER_FILES`; small files, hashed
    on every call)."""
    return [("tokenizer", f.name, hashlib.blake2b(f.read_bytes(), digest_size=16).hexdigest())
            for f in sorted(path.iterdir()) if f.is_file() and any(fnmatch(f.name, p) for p in _TOKENIZER_FILES)]


def adapter_fingerprint(path: str | Path, base_fingerprint: str) -> str:
    """Hash of a PEFT adapter applied to a base: the base's fingerprint, the adapter's weight files (content), its
    ``adapter_config.json`` and the tokenizer files saved with it (which replace the base's tokenizer).

    The config's ``base_model_name_or_path`` (where the base was, not what it is: the base's
    fingerprint says that) and ``peft_version`` are left out, so a moved adapter keeps its fingerprint.
    """
    path = Path(path)
    config = json.loads((path / "adapter_config.json").read_text())
    config = {k: v for k, v in config.items() if k not in ("base_model_name_or_path", "peft_version")}
    weights = [(f.name, file_digest(f)) for f in sorted(path.iterdir())
               if f.name.startswith("adapter_model") and f.suffix in _WEIGHT_SUFFIXES]
    tokenizer = _tokenizer_files(path)
    return stable_hash("peft-adapter", base_fingerprint, config, weights, *([tokenizer] if tokenizer else []))


def chain_fingerprints(folder: str | Path, adapters=(), dtype: str = "float32") -> list[str]:
    """The fingerprint of each model one load builds: the full model of ``folder`` in ``dtype``, then that model with
    each adapter folder of ``adapters`` applied in turn (innermost first). The last is the loaded model's."""
    fingerprints = [model_dir_fingerprint(folder)]
    if dtype != "float32":  # another precision computes other numbers: its probes are never served for float32's
        fingerprints[0] = stable_hash(fingerprints[0], dtype)
    for adapter in adapters:
        fingerprints.append(adapter_fingerprint(adapter, fingerprints[-1]))
    return fingerprints


def module_fingerprint(model: torch.nn.Module) -> str:
    """Hash of an in-memory model's parameters and buffers (for models never saved)."""
    h = hashlib.blake2b(digest_size=16)
    for name, tensor in sorted(model.state_dict().items()):
        h.update(name.encode())
        t = tensor.detach().cpu().contiguous()
        h.update(str(t.dtype).encode() + str(tuple(t.shape)).encode())
        h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()


def _slow_tokenizer_files(tokenizer) -> list:
    """(name, bytes) of the files a tokenizer without a ``tokenizers`` backend is defined by (its vocabulary,
    merges or sentencepiece model, as ``save_vocabulary`` writes them)."""
    with tempfile.TemporaryDirectory(prefix="lmaudit-tokenizer-") as folder:
        try:
            written = tokenizer.save_vocabulary(folder)
        except (NotImplementedError, AttributeError, TypeError):  # a tokenizer defined by its class and settings
            return []
        return [(Path(f).name, Path(f).read_bytes()) for f in written if f and Path(f).is_file()]


def _backend_digest(backend) -> str:
    """Digest of a ``tokenizers`` backend's serialization without the padding and truncation state that each call
    sets (:data:`_BACKEND_STATE`). That state comes first in the text, so the rest is hashed as it is (a few
    milliseconds for a 49,152-token vocabulary); a layout other than expected is parsed whole."""
    text = backend.to_str()
    head, sep, rest = text.partition(',"added_tokens":')
    try:
        state = json.loads(head + "}") if sep else None
    except json.JSONDecodeError:
        state = None
    if not isinstance(state, dict) or set(state) - {"version", *_BACKEND_STATE}:
        spec = json.loads(text)
        for key in _BACKEND_STATE:
            spec.pop(key, None)
        return stable_hash("parsed", spec)
    return stable_hash(state.get("version"), rest.encode())


def tokenizer_fingerprint(tokenizer) -> str:
    """Hash of everything of a tokenizer that decides the ids a text becomes (and so a probe's numbers).

    A fast tokenizer is described whole by its serialized ``tokenizers`` backend: vocabulary,
    merges, normalizer, pre-tokenizer, post-processor, decoder and added tokens (the
    padding and truncation state that each call sets is left out: :func:`_backend_digest`).
    A tokenizer without such a backend is described by its class, vocabulary, the files that
    define it (:func:`_slow_tokenizer_files`) and its settings. Both add the special and
    added tokens with their matching flags, and the settings of :data:`_TOKENIZER_SETTINGS`.
    """
    added = sorted((int(i), str(t), *(bool(getattr(t, flag, False)) for flag in
                                      ("special", "lstrip", "rstrip", "normalized", "single_word")))
                   for i, t in getattr(tokenizer, "added_tokens_decoder", {}).items())
    settings = {name: getattr(tokenizer, name) for name in _TOKENIZER_SETTINGS if hasattr(tokenizer, name)}
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        behaviour = ("tokenizers", _backend_digest(backend))
    else:
        init = {k: v for k, v in getattr(tokenizer, "init_kwargs", {}).items()
                if not k.endswith("_file") and k not in ("name_or_path", "added_tokens_decoder")}
        behaviour = ("files", sorted(tokenizer.get_vocab().items(), key=lambda kv: kv[1]),
                     [(name, hashlib.blake2b(data, digest_size=16).hexdigest())
                      for name, data in _slow_tokenizer_files(tokenizer)], init)
    return stable_hash(type(tokenizer).__name__, sorted(map(str, tokenizer.all_special_tokens)), added, settings,
                       behaviour)
