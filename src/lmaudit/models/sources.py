"""Where a model comes from and what its folders hold, read without loading it (JSON, paths and safetensors
headers: light enough for every command).

A model source is a model folder, a PEFT adapter folder (``adapter_config.json``) whose base is ``--adapter-base``
or the local folder its config names (and may itself be an adapter), a GGUF file or a model name (the folder it is
imported into, which the caller's ``local`` maps it to). :func:`resolve_source` walks it into a :class:`ModelSource`:
the full-model folder and the adapters applied on it, innermost first; :func:`model_folders` lists every folder one
load reads, so that an output folder is never one of them. The checks and readers of one folder follow
(:func:`check_model_dir`, :func:`read_config`, :func:`read_adapter_dir`, ...): what
:func:`~lmaudit.models.resolve.resolve_model` reads before any weight loads.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from safetensors import SafetensorError, safe_open

from lmaudit.errors import ModelLoadError, spell
from lmaudit.folders import verify_folder
from lmaudit.settings import one_of

ADAPTER_CONFIG = "adapter_config.json"
SAFE_WEIGHTS, PICKLE_WEIGHTS = "adapter_model.safetensors", "adapter_model.bin"  # what peft's save_pretrained writes
TRAINING_FILE = "lmaudit_training.json"  # as models/build.py writes it
SOURCE_FILE = "lmaudit_source.json"  # as models/gguf.py writes it into a folder it imported
DTYPE_NAMES = ("auto", "float32", "bfloat16", "float16")  # what a model's precision may be asked as (--dtype)
# the longest context a model may state (16,777,216 positions): a larger value (4,294,967,295 in a damaged file) is
# no model's, and would size position tables and masks far beyond any memory
MAX_CONTEXT = 2**24
_NO_DOWNLOAD = "lmaudit never downloads models: pass the local folder of the base model as {adapter_base}"
BASE_OPTION = ("adapter_base",)  # the setting the adapters' errors name
_MAX_CHAIN = 16  # adapters on adapters deeper than this are a loop
# integer sizes of the standard configs: a wrong one otherwise surfaces as an obscure error deep in model building
_SIZE_FIELDS = ("vocab_size", "hidden_size", "n_embd", "num_hidden_layers", "n_layer", "num_attention_heads", "n_head",
                "max_position_embeddings", "n_positions", "intermediate_size")
# context lengths: above MAX_CONTEXT a value is a damaged field, never a model's context
_CONTEXT_FIELDS = ("max_position_embeddings", "n_positions", "n_ctx", "seq_length", "max_sequence_length")
_TOKENIZER_JSON = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")
_ADAPTER_TOKENIZER = ("tokenizer.json", "tokenizer_config.json")  # an adapter folder with one has its own tokenizer
_RESAVE = "re-save the model folder (save_pretrained) or download this file again"


def _one_line(exc: BaseException) -> str:
    """An exception's text on one line (library messages often span several)."""
    return " ".join(str(exc).split())


def read_record(folder: str | Path, name: str) -> dict | None:
    """The JSON object ``name`` that lmaudit wrote into ``folder`` (:data:`TRAINING_FILE`, :data:`SOURCE_FILE`);
    None when it is missing, unreadable or not an object (a record is a fact to report, never a reason to refuse)."""
    try:
        record = json.loads((Path(folder) / name).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    return record if isinstance(record, dict) else None


def source_record(folder: str | Path) -> dict | None:
    """The folder's ``lmaudit_source.json`` (the GGUF file it was imported from), None when it has none."""
    return read_record(folder, SOURCE_FILE)


def is_adapter_dir(path: str | Path) -> bool:
    """Whether ``path`` is a PEFT adapter folder (it has ``adapter_config.json``)."""
    return (Path(path) / ADAPTER_CONFIG).is_file()


def read_adapter_config(path: str | Path) -> dict:
    """The folder's ``adapter_config.json``; a one-line error naming the file when it is unreadable."""
    f = Path(path) / ADAPTER_CONFIG
    try:
        cfg = json.loads(f.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ModelLoadError(f"{f}: unreadable adapter config ({_one_line(exc)})",
                             hint="re-save the adapter (save_pretrained)") from None
    if not isinstance(cfg, dict) or not isinstance(cfg.get("peft_type"), str):
        raise ModelLoadError(f"{f}: not a PEFT adapter config (no 'peft_type')",
                             hint="re-save the adapter (save_pretrained)")
    return cfg


def resolve_base(path: str | Path, base: str | Path | None = None) -> Path:
    """The base model folder of the adapter at ``path``: ``base`` if given, else the config's existing local folder."""
    p = Path(path)
    if base is not None:
        if not Path(base).exists():
            raise ModelLoadError(f"{{asked}} (the base of adapter '{path}') does not exist",
                                 hint="pass the local folder of the model the adapter was trained on",
                                 options={"asked": spell("adapter_base", str(base))})
        chosen = Path(base)
    else:
        named = read_adapter_config(p).get("base_model_name_or_path")
        if not named:
            raise ModelLoadError(f"adapter '{path}' does not name its base model", hint=_NO_DOWNLOAD,
                                 options=BASE_OPTION)
        if not Path(named).is_dir():
            raise ModelLoadError(f"the base model of adapter '{path}', '{named}', is not a local folder",
                                 hint=_NO_DOWNLOAD, options=BASE_OPTION)
        chosen = Path(named)
    if chosen.resolve() == p.resolve():
        raise ModelLoadError(f"adapter '{path}' names itself as its base model", hint=_NO_DOWNLOAD, options=BASE_OPTION)
    return chosen


@dataclass(frozen=True)
class ModelSource:
    """One model as a load reads it: the full-model ``folder`` and the ``adapters`` applied on it, innermost first."""

    folder: Path
    adapters: tuple[Path, ...] = ()

    @property
    def path(self) -> Path:
        """The folder the user named (after a GGUF file or a name is mapped to its folder)."""
        return self.adapters[-1] if self.adapters else self.folder

    def folders(self) -> list[Path]:
        """Every folder the load reads, the named one first."""
        return [*reversed(self.adapters), self.folder]


def _walk(path: str | Path, base: str | Path | None, local: Callable[[str | Path], Path], seen: list[Path]) -> None:
    """Append ``path`` and each base it loads in turn to ``seen``; a loop, a chain deeper than :data:`_MAX_CHAIN` or
    a base that cannot be resolved is an error (after what was resolved so far is in ``seen``)."""
    current, given = local(path), base
    seen.append(current)
    while is_adapter_dir(current):
        nxt = resolve_base(current, None if given is None else local(given))
        given = None
        if len(seen) > _MAX_CHAIN or any(nxt.resolve() == s.resolve() for s in seen):
            chain = " → ".join(str(s) for s in [*seen, nxt])
            raise ModelLoadError(f"adapter '{path}': its bases form a loop ({chain})",
                                 hint="pass {adapter_base} with a full model folder", options=BASE_OPTION)
        current = nxt
        seen.append(current)


def resolve_source(path: str | Path, base: str | Path | None = None, *,
                   local: Callable[[str | Path], Path] = Path) -> ModelSource:
    """``path`` (with ``--adapter-base`` ``base``) resolved to the folders one load reads; see the module docstring.

    ``local`` maps a GGUF file or a model name to its folder (loading passes the import of
    :mod:`lmaudit.models.gguf`; the default takes every path as it is).
    """
    seen: list[Path] = []
    _walk(path, base, local, seen)
    return ModelSource(seen[-1], tuple(reversed(seen[:-1])))


def model_folders(path: str | Path, base: str | Path | None = None) -> list[Path]:
    """``path`` and, for an adapter, the base folders it loads (its chain of bases), without loading anything.

    What a command reads when it loads ``path``: an output folder must be none of them. A base
    that cannot be resolved is left out here (loading the adapter reports it).
    """
    seen: list[Path] = []
    try:
        _walk(path, base, Path, seen)
    except ModelLoadError:
        pass
    return seen


def check_model_dir(path: str | Path, *, allow_pickle: bool = False) -> Path:
    """Validate a local model folder; return it as a Path."""
    if is_adapter_dir(path):  # a PEFT adapter folder
        return check_adapter_dir(path, allow_pickle=allow_pickle)
    p = Path(path)
    if not p.exists():
        raise ModelLoadError(
            f"model path '{path}' does not exist",
            hint="lmaudit never downloads models: pass a local folder written by save_pretrained",
        )
    if not p.is_dir() or not (p / "config.json").exists():
        raise ModelLoadError(f"'{path}' is not a model folder (no config.json)")
    names = [f.name for f in p.iterdir()]
    has_safe = any(n.endswith(".safetensors") for n in names)
    has_pickle = any(n.endswith((".bin", ".pt", ".pth")) for n in names)
    if not has_safe and has_pickle and not allow_pickle:
        raise ModelLoadError(
            f"'{path}' holds only pickle weights (.bin/.pt), which can run arbitrary code when loaded",
            hint="convert them to safetensors, or pass {pickle} if you trust the file",
            options={"pickle": spell("allow_pickle", True)},
        )
    if not has_safe and not has_pickle:
        raise ModelLoadError(f"'{path}' has no weight files (*.safetensors)")
    read_config(p)
    verify_folder(p, hashes=False)  # a folder lmaudit wrote: every file it listed, at its size
    for f in sorted(p.glob("*.safetensors")):  # reads only the header, which also gives the expected file size
        try:
            with safe_open(f, "pt"):
                pass
        except (SafetensorError, OSError) as exc:
            raise ModelLoadError(f"{f}: damaged or truncated safetensors file ({_one_line(exc)})",
                                 hint=_RESAVE) from None
    return p


def check_adapter_dir(path: str | Path, *, allow_pickle: bool = False) -> Path:
    """Validate an adapter folder (config, weights, the files lmaudit listed); return it as a Path."""
    p = Path(path)
    read_adapter_config(p)
    if not (p / SAFE_WEIGHTS).is_file():
        if not (p / PICKLE_WEIGHTS).is_file():
            raise ModelLoadError(f"adapter '{path}' has no weights ({SAFE_WEIGHTS})")
        if not allow_pickle:
            raise ModelLoadError(f"adapter '{path}' holds only pickle weights ({PICKLE_WEIGHTS}), which can run "
                                 "arbitrary code when loaded",
                                 hint="convert them to safetensors, or pass {pickle} if you trust the file",
                                 options={"pickle": spell("allow_pickle", True)})
    verify_folder(p, hashes=False)
    if (p / SAFE_WEIGHTS).is_file():
        try:
            with safe_open(p / SAFE_WEIGHTS, "pt"):
                pass
        except (SafetensorError, OSError) as exc:
            raise ModelLoadError(f"{p / SAFE_WEIGHTS}: damaged or truncated safetensors file ({_one_line(exc)})",
                                 hint="re-save the adapter") from None
    return p


def _read_json(path: Path) -> dict:
    """A JSON object file of a model folder; a one-line error naming the file if it is unreadable or malformed."""
    try:
        obj = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ModelLoadError(f"{path}: malformed JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}",
                             hint=_RESAVE) from None
    except UnicodeDecodeError:
        raise ModelLoadError(f"{path}: not a JSON text file (not UTF-8)", hint=_RESAVE) from None
    except OSError as exc:
        raise ModelLoadError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    if not isinstance(obj, dict):
        raise ModelLoadError(f"{path}: expected a JSON object {{...}}, got {json.dumps(obj)[:40]}", hint=_RESAVE)
    return obj


def check_tokenizer_json(p: Path) -> None:
    """Every JSON file of the folder's tokenizer must be a JSON object: a one-line error naming the file otherwise,
    before transformers reads it."""
    for name in _TOKENIZER_JSON:
        if (p / name).exists():
            _read_json(p / name)


def read_config(p: Path) -> dict:
    """The folder's config.json as a dict; its standard size fields (when set) must be positive integers, and a
    context length (:data:`_CONTEXT_FIELDS`) at most :data:`MAX_CONTEXT` (16,777,216)."""
    cfg = _read_json(p / "config.json")
    for key in _SIZE_FIELDS:
        value = cfg.get(key)
        values = value if isinstance(value, list) else [value]  # a few configs give one size per layer
        if value is not None and not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in values):
            raise ModelLoadError(f"{p / 'config.json'}: '{key}' must be a positive integer, got {json.dumps(value)}",
                                 hint="restore the config.json saved with these weights")
    for key in _CONTEXT_FIELDS:
        value = cfg.get(key)
        if isinstance(value, int) and value > MAX_CONTEXT:
            raise ModelLoadError(f"{p / 'config.json'}: '{key}' is {value:,}, not a context length (lmaudit accepts "
                                 f"at most {MAX_CONTEXT:,} positions)",
                                 hint="restore the config.json saved with these weights")
    return cfg


def check_remote_code(p: Path, cfg: dict, trust_remote_code: bool) -> None:
    """Custom modeling code runs only when trusted, and every module ``auto_map`` names must be a file in the folder
    (code is never fetched)."""
    if not cfg.get("auto_map"):
        return
    if not trust_remote_code:
        raise ModelLoadError(f"'{p}' needs custom modeling code shipped with the checkpoint",
                             hint="pass {remote} if you trust that code",
                             options={"remote": spell("trust_remote_code", True)})
    refs = []
    for value in cfg["auto_map"].values():
        refs += [v for v in (value if isinstance(value, (list, tuple)) else [value]) if isinstance(v, str)]
    for ref in refs:
        if "--" in ref:  # "owner/repo--module.Class": code that lives in another repository
            raise ModelLoadError(f"'{p}': config.json takes modeling code from another repository ('{ref}')",
                                 hint="lmaudit never downloads code: copy that module into the model folder")
        module = ref.rsplit(".", 1)[0].replace(".", "/") + ".py"
        if not (p / module).is_file():
            raise ModelLoadError(f"'{p}': config.json names custom code in '{module}', which is not in the folder",
                                 hint="lmaudit never downloads code: copy the module into the model folder")


def detect_kind(path: str | Path) -> str:
    """"dlm" for a model saved by lmaudit as a diffusion LM (or a known DLM family), else "ar"."""
    return kind_of_config(read_config(Path(path)))


def kind_of_config(cfg: dict) -> str:
    """The kind a model's config declares: its ``lmaudit_kind``, else "dlm" for a known DLM family, else "ar"."""
    if cfg.get("lmaudit_kind") in ("ar", "dlm"):
        return cfg["lmaudit_kind"]
    family = (cfg.get("model_type") or "").lower()
    return "dlm" if family in ("llada", "dream") else "ar"


def resolve_dtype(dtype: str | None, cfg: dict, device: str) -> str:
    """``--dtype``: ``float32``, ``bfloat16``, ``float16``, or ``auto``/None: the checkpoint's own dtype on a GPU
    (``dtype``/``torch_dtype`` in config.json), float32 on the CPU (half-precision matrix products are slow or
    missing on most CPUs). float16 on the CPU is refused; bfloat16 there is allowed when asked for."""
    if dtype in (None, "auto"):
        saved = str(cfg.get("dtype") or cfg.get("torch_dtype") or "float32").removeprefix("torch.")
        return saved if saved in DTYPE_NAMES[1:] and device != "cpu" else "float32"
    one_of(DTYPE_NAMES)(dtype, "dtype", None)
    if dtype == "float16" and device == "cpu":
        raise ModelLoadError("{float16} on the CPU: not every layer has a float16 CPU kernel",
                             hint="use {bfloat16} or float32 on a CPU, float16 on a GPU",
                             options={"float16": spell("dtype", "float16"), "bfloat16": spell("dtype", "bfloat16")})
    return dtype


def _lora_shapes(path: Path) -> dict[str, list[int | None]]:
    """{adapted module: [in features, out features]} from the LoRA matrices in the adapter's safetensors header."""
    shapes: dict[str, list[int | None]] = {}
    with safe_open(path / SAFE_WEIGHTS, "pt") as f:
        for key in f.keys():
            m = re.fullmatch(r"base_model\.model\.(.+)\.lora_([AB])\.weight", key)
            if m:
                shape = f.get_slice(key).get_shape()
                entry = shapes.setdefault(m.group(1), [None, None])
                entry[0 if m.group(2) == "A" else 1] = shape[1] if m.group(2) == "A" else shape[0]
    return shapes


def read_adapter_dir(path: str | Path, *, allow_pickle: bool = False) -> tuple[Path, dict, dict, dict, bool]:
    """(folder, config, LoRA shapes, training record, whether it holds its own tokenizer) of an adapter folder, checked
    first (:func:`check_adapter_dir`); pickle weights are never opened before they load, so they give no shapes."""
    p = check_adapter_dir(path, allow_pickle=allow_pickle)
    shapes = _lora_shapes(p) if (p / SAFE_WEIGHTS).is_file() else {}
    return (p, read_adapter_config(p), shapes, read_record(p, TRAINING_FILE) or {},
            any((p / name).is_file() for name in _ADAPTER_TOKENIZER))
