"""Safe, offline loading of local Hugging Face model folders.

Nothing is fetched from the network: the path must exist locally. Weights load
from safetensors; pickle checkpoints (``.bin``/``.pt``) need ``allow_pickle``.
Modeling code shipped with a checkpoint runs only with ``trust_remote_code``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open
from transformers import AutoConfig, AutoModel, AutoModelForCausalLM, AutoModelForMaskedLM, AutoTokenizer

from lmaudit.errors import ModelLoadError, SettingError, spell
from lmaudit.folders import verify_folder
from lmaudit.models.adapters import KIND_SPELLINGS, make_adapter
from lmaudit.models.fingerprint import model_dir_fingerprint
from lmaudit.models.gguf import MAX_CONTEXT, local_model, quiet_transformers, source_record
from lmaudit.models.handle import ModelHandle
from lmaudit.models.lora import TRAINING_FILE, apply_adapter, check_adapter_dir
from lmaudit.models.sources import DTYPE_NAMES, is_adapter_dir, resolve_source
from lmaudit.settings import one_of
from lmaudit.utils import stable_hash

try:  # transformers 5 checks config fields with huggingface_hub's strict dataclasses
    from huggingface_hub.errors import StrictDataclassError
except ImportError:  # older versions raise ValueError/TypeError instead
    StrictDataclassError = ValueError

# integer sizes of the standard configs: a wrong one otherwise surfaces as an obscure error deep in model building
_SIZE_FIELDS = ("vocab_size", "hidden_size", "n_embd", "num_hidden_layers", "n_layer", "num_attention_heads", "n_head",
                "max_position_embeddings", "n_positions", "intermediate_size")
# context lengths: above MAX_CONTEXT (2**24 positions) a value is a damaged field, never a model's context
_CONTEXT_FIELDS = ("max_position_embeddings", "n_positions", "n_ctx", "seq_length", "max_sequence_length")
_TOKENIZER_JSON = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")
_RESAVE = "re-save the model folder (save_pretrained) or download this file again"


def check_model_dir(path: str | Path, *, allow_pickle: bool = False) -> Path:
    """Validate a local model folder; return it as a Path."""
    if is_adapter_dir(path):  # a PEFT adapter folder (models/lora.py)
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
    _read_config(p)
    verify_folder(p, hashes=False)  # a folder lmaudit wrote: every file it listed, at its size
    for f in sorted(p.glob("*.safetensors")):  # reads only the header, which also gives the expected file size
        try:
            with safe_open(f, "pt"):
                pass
        except (SafetensorError, OSError) as exc:
            raise ModelLoadError(f"{f}: damaged or truncated safetensors file ({_one_line(exc)})", hint=_RESAVE) from None
    return p


def _one_line(exc: BaseException) -> str:
    """An exception's text on one line (library messages often span several)."""
    return " ".join(str(exc).split())


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


def _check_remote_code(p: Path, cfg: dict) -> None:
    """Every module ``auto_map`` names must be a file in the folder (code is never fetched)."""
    refs = []
    for value in cfg.get("auto_map", {}).values():
        refs += [v for v in (value if isinstance(value, (list, tuple)) else [value]) if isinstance(v, str)]
    for ref in refs:
        if "--" in ref:  # "owner/repo--module.Class": code that lives in another repository
            raise ModelLoadError(f"'{p}': config.json takes modeling code from another repository ('{ref}')",
                                 hint="lmaudit never downloads code: copy that module into the model folder")
        module = ref.rsplit(".", 1)[0].replace(".", "/") + ".py"
        if not (p / module).is_file():
            raise ModelLoadError(f"'{p}': config.json names custom code in '{module}', which is not in the folder",
                                 hint="lmaudit never downloads code: copy the module into the model folder")


def _read_config(p: Path) -> dict:
    """The folder's config.json as a dict; its standard size fields (when set) must be positive integers, and a
    context length (:data:`_CONTEXT_FIELDS`) at most :data:`~lmaudit.models.gguf.MAX_CONTEXT` (16,777,216)."""
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


def detect_kind(path: str | Path) -> str:
    """"dlm" for a model saved by lmaudit as a diffusion LM (or a known DLM family), else "ar"."""
    cfg = _read_config(Path(path))
    if cfg.get("lmaudit_kind") in ("ar", "dlm"):
        return cfg["lmaudit_kind"]
    family = (cfg.get("model_type") or "").lower()
    return "dlm" if family in ("llada", "dream") else "ar"


def load_model(
    path: str | Path,
    *,
    kind: str | None = None,
    trust_remote_code: bool = False,
    allow_pickle: bool = False,
    mask_token_id: int | None = None,
    shift_logits: bool | None = None,
    device: str | None = None,
    dtype: str | None = None,
    adapter_base: str | Path | None = None,
) -> ModelHandle:
    """Load an AR (``AutoModelForCausalLM``) or DLM model and its tokenizer from a local folder.

    ``kind`` defaults to what the saved config says (:func:`detect_kind`). The handle's
    adapter (:mod:`lmaudit.models.adapters`) runs the model; for a DLM,
    ``mask_token_id`` and ``shift_logits`` override the detected convention. The
    model is in eval mode, on ``device`` in ``dtype`` (:func:`resolve_device`,
    :func:`resolve_dtype`); a model loaded in another dtype than float32 has another
    fingerprint, so that cached statistics of the two never mix.

    A PEFT adapter folder loads its base (``adapter_base``, else the folder its config
    names) with these same options and applies the adapter (:mod:`lmaudit.models.lora`);
    :func:`~lmaudit.models.sources.resolve_source` finds every folder first, then the full
    model loads and each adapter is applied on it in turn.
    A GGUF file, a folder holding one, or a named model (``smollm2-135m``) loads the folder
    it was imported into (:mod:`lmaudit.models.gguf`; imported on first use), and the
    handle's ``source`` records the file.
    """
    options = {k: v for k, v in locals().items() if k not in ("path", "adapter_base")}  # every other argument
    source = resolve_source(path, adapter_base, local=local_model)
    handle = _load_folder(source.folder, **options)
    for base_dir, adapter in zip(source.folders()[::-1], source.adapters):  # innermost first, each on the one before
        handle = apply_adapter(adapter, handle, base_dir, **options)
    return with_dp_record(handle, source.path) if source.adapters else handle


def _load_folder(path: Path, *, kind: str | None, trust_remote_code: bool, allow_pickle: bool,
                 mask_token_id: int | None, shift_logits: bool | None, device: str | None,
                 dtype: str | None) -> ModelHandle:
    """The full model of folder ``path`` (no adapter), with the options of :func:`load_model`."""
    device = resolve_device(device)
    p = check_model_dir(path, allow_pickle=allow_pickle)
    quiet_transformers()
    cfg = _read_config(p)
    dtype = resolve_dtype(dtype, cfg, device)
    if cfg.get("auto_map") and not trust_remote_code:
        raise ModelLoadError(
            f"'{path}' needs custom modeling code shipped with the checkpoint",
            hint="pass {remote} if you trust that code", options={"remote": spell("trust_remote_code", True)},
        )
    if cfg.get("auto_map"):
        _check_remote_code(p, cfg)
    kind = kind or detect_kind(p)
    if kind not in ("ar", "dlm"):
        raise ModelLoadError(f"unknown model kind '{kind}'", hint="use {ar} or {dlm}", options=KIND_SPELLINGS)
    try:
        config = AutoConfig.from_pretrained(p, local_files_only=True, trust_remote_code=trust_remote_code)
    except (ValueError, TypeError, StrictDataclassError) as exc:
        raise ModelLoadError(f"{p / 'config.json'}: {_one_line(exc)}",
                             hint="restore the config.json saved with these weights") from None
    for name in _TOKENIZER_JSON:
        if (p / name).exists():
            _read_json(p / name)
    try:
        tokenizer = AutoTokenizer.from_pretrained(p, local_files_only=True, trust_remote_code=trust_remote_code)
    except (OSError, ValueError) as exc:
        raise ModelLoadError(f"'{path}': cannot load the tokenizer ({_one_line(exc)})",
                             hint="save the tokenizer into the model folder") from None
    causal_arch = any(a.endswith("ForCausalLM") for a in cfg.get("architectures") or [])
    if kind == "ar" or (cfg.get("lmaudit_bidirectional") and causal_arch):
        auto = AutoModelForCausalLM
    else:
        auto = AutoModel if cfg.get("auto_map") and "AutoModelForMaskedLM" not in cfg.get("auto_map", {}) else AutoModelForMaskedLM
    # mismatched shapes are reported here, naming a tensor (transformers' own report is a silenced log)
    model, info = auto.from_pretrained(
        p, config=config, local_files_only=True, trust_remote_code=trust_remote_code,
        use_safetensors=None if allow_pickle else True, ignore_mismatched_sizes=True, output_loading_info=True,
        dtype=DTYPES[dtype],
    )
    if info["mismatched_keys"]:
        key, saved, expected = sorted(info["mismatched_keys"])[0]
        raise ModelLoadError(f"'{path}': the weights do not match config.json ({key} is {list(saved)} in the weight "
                             f"files, config.json makes it {list(expected)})",
                             hint="restore the config.json saved with these weights, or re-save the model")
    if info["missing_keys"]:  # transformers would fill them with random values
        missing = sorted(info["missing_keys"])
        raise ModelLoadError(f"'{path}': the weight files lack {len(missing)} tensor(s) config.json needs "
                             f"(e.g. {missing[0]})", hint="restore the weight files saved with this config.json")
    model.eval()
    model.to(device)
    # how to load this model again (a Ray worker does, from the same folder with the same options, on its device)
    model.lmaudit_load_spec = {"path": str(p), "kind": kind, "trust_remote_code": trust_remote_code,
                               "allow_pickle": allow_pickle, "mask_token_id": mask_token_id,
                               "shift_logits": shift_logits, "dtype": dtype}
    adapter = make_adapter(model, tokenizer, kind, mask_token_id=mask_token_id, shift_logits=shift_logits)
    fingerprint = model_dir_fingerprint(p)
    if dtype != "float32":
        fingerprint = stable_hash(fingerprint, dtype)
    handle = with_dp_record(ModelHandle(model, tokenizer, str(p), fingerprint, kind, adapter), p)
    handle.source = source_record(p)
    return handle


def with_dp_record(handle: ModelHandle, folder: str | Path) -> ModelHandle:
    """``handle`` with the ``dp`` record of the folder's ``lmaudit_training.json`` (a model lmaudit trained with
    differential privacy, :mod:`lmaudit.models.dp`); a missing or unreadable record leaves it without one."""
    try:
        record = json.loads((Path(folder) / TRAINING_FILE).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return handle
    dp = record.get("dp") if isinstance(record, dict) else None
    handle.dp = dp if isinstance(dp, dict) else None
    return handle


DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def resolve_device(device: str | None) -> str:
    """``--device``: ``cpu``, ``cuda``, ``cuda:N``, or ``auto``/None (the first GPU when there is one, else CPU)."""
    if device in (None, "auto"):
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cpu":
        return device
    match = re.fullmatch(r"cuda(?::(\d+))?", str(device))
    if not match:
        raise SettingError("device", f"{{name}} must be cpu, cuda, cuda:N or auto, got {device!r}")
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if int(match.group(1) or 0) >= count:
        raise ModelLoadError(f"{{asked}}: this machine has {count} CUDA GPU(s)",
                             hint="use {cpu}, or auto to take a GPU when there is one",
                             options={"asked": spell("device", device), "cpu": spell("device", "cpu")})
    return device


def resolve_dtype(dtype: str | None, cfg: dict, device: str) -> str:
    """``--dtype``: ``float32``, ``bfloat16``, ``float16``, or ``auto``/None: the checkpoint's own dtype on a GPU
    (``dtype``/``torch_dtype`` in config.json), float32 on the CPU (half-precision matrix products are slow or
    missing on most CPUs). float16 on the CPU is refused; bfloat16 there is allowed when asked for."""
    if dtype in (None, "auto"):
        saved = str(cfg.get("dtype") or cfg.get("torch_dtype") or "float32").removeprefix("torch.")
        return saved if saved in DTYPES and device != "cpu" else "float32"
    one_of(DTYPE_NAMES)(dtype, "dtype", None)
    if dtype == "float16" and device == "cpu":
        raise ModelLoadError("{float16} on the CPU: not every layer has a float16 CPU kernel",
                             hint="use {bfloat16} or float32 on a CPU, float16 on a GPU",
                             options={"float16": spell("dtype", "float16"), "bfloat16": spell("dtype", "bfloat16")})
    return dtype


def load_causal_lm(path: str | Path, **kwargs) -> ModelHandle:
    """Load an autoregressive model (see :func:`load_model`)."""
    return load_model(path, kind="ar", **kwargs)
