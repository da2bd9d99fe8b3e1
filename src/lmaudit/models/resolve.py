"""What one load reads, resolved and checked before any weight loads: the folders of a model source, its kind,
precision, device and fingerprints (:class:`ResolvedModel`), which :func:`~lmaudit.models.loading.load_resolved`
then loads once. Nothing here loads a weight (the weight files are hashed for the fingerprint) or imports
transformers."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from lmaudit.errors import ModelLoadError, SettingError, spell
from lmaudit.models.adapters import KIND_SPELLINGS
from lmaudit.models.fingerprint import chain_fingerprints, model_dir_fingerprint
from lmaudit.models.sources import (
    TRAINING_FILE,
    check_model_dir,
    check_remote_code,
    check_tokenizer_json,
    detect_kind,
    read_adapter_dir,
    read_config,
    read_record,
    resolve_dtype,
    resolve_source,
    source_record,
)


@dataclass(frozen=True)
class AdapterStep:
    """One adapter of a chain as :func:`resolve_model` read it, applied on the model of the folder ``base``."""

    path: Path
    base: Path
    config: dict  # its adapter_config.json
    shapes: dict  # {adapted module: [in features, out features]} of its LoRA matrices
    trained_kind: str | None  # the kind its training record names (none for an adapter lmaudit did not train)
    other_base: str | None  # the base fingerprint its training record names, when that is another base's
    own_tokenizer: bool  # it holds the tokenizer saved with its training, which replaces the base's
    base_fingerprint: str  # of the model it is applied on
    fingerprint: str  # of the model once it is applied


@dataclass(frozen=True)
class ResolvedModel:
    """Everything one load reads, resolved and checked before any weight loads (:func:`resolve_model`)."""

    folder: Path  # the full model's folder
    config: dict  # its config.json
    kind: str  # "ar" or "dlm"
    dtype: str
    device: str
    fingerprint: str  # of the loaded model: the full model in ``dtype``, with every adapter applied
    adapters: tuple[AdapterStep, ...] = ()  # applied on the full model in turn, innermost first
    dp: dict | None = None  # the named folder's differential-privacy record (lmaudit_training.json)
    source: dict | None = None  # the GGUF file the named folder was imported from (lmaudit_source.json)
    trust_remote_code: bool = False
    allow_pickle: bool = False
    mask_token_id: int | None = None
    shift_logits: bool | None = None

    @property
    def path(self) -> Path:
        """The folder the user named (after a GGUF file or a name is mapped to its folder)."""
        return self.adapters[-1].path if self.adapters else self.folder


def resolve_model(path: str | Path, adapter_base: str | Path | None = None, *, kind: str | None = None,
                  dtype: str | None = None, device: str | None = None, trust_remote_code: bool = False,
                  allow_pickle: bool = False, mask_token_id: int | None = None, shift_logits: bool | None = None,
                  local: Callable[[str | Path], Path] = Path) -> ResolvedModel:
    """What :func:`~lmaudit.models.loading.load_model` loads for these arguments, read and checked without loading
    a weight.

    ``local`` maps a GGUF file or a model name to its folder (:func:`~lmaudit.models.sources.resolve_source`).
    The folders of the chain are found first, then the full model's folder is checked, then
    each adapter's, innermost first; only then are the files fingerprinted. An adapter whose
    training record names other base weights (neither the base's fingerprint nor the
    weights-and-config one that lmaudit recorded before tokenizer files were fingerprinted)
    keeps that fingerprint as ``other_base``, which loading warns of.
    """
    device = resolve_device(device)  # a setting, checked before any file is read
    source = resolve_source(path, adapter_base, local=local)
    folder = check_model_dir(source.folder, allow_pickle=allow_pickle)
    cfg = read_config(folder)
    dtype = resolve_dtype(dtype, cfg, device)
    check_remote_code(folder, cfg, trust_remote_code)
    kind = kind or detect_kind(folder)
    if kind not in KIND_SPELLINGS:
        raise ModelLoadError(f"unknown model kind '{kind}'", hint="use {ar} or {dlm}", options=KIND_SPELLINGS)
    check_tokenizer_json(folder)
    adapters = [read_adapter_dir(p, allow_pickle=allow_pickle) for p in source.adapters]
    # the named folder's records: the handle reports them
    dp = (read_record(source.path, TRAINING_FILE) or {}).get("dp")
    imported_from = source_record(source.path)
    fingerprints = chain_fingerprints(folder, source.adapters, dtype)
    # the full model as training records written before tokenizer files were fingerprinted name it
    weights_only = model_dir_fingerprint(folder, tokenizer=False) if adapters else None
    steps, bases = [], (folder, *source.adapters)  # each adapter is applied on the model of the folder before it
    for i, (p, config, shapes, training, own_tokenizer) in enumerate(adapters):
        trained_on = (training.get("lora") or {}).get("base_fingerprint")
        steps.append(AdapterStep(
            path=p, base=bases[i], config=config, shapes=shapes, trained_kind=training.get("kind"),
            other_base=None if trained_on in (None, fingerprints[i], weights_only) else trained_on,
            own_tokenizer=own_tokenizer, base_fingerprint=fingerprints[i], fingerprint=fingerprints[i + 1]))
    return ResolvedModel(folder=folder, config=cfg, kind=kind, dtype=dtype, device=device, fingerprint=fingerprints[-1],
                         adapters=tuple(steps), dp=dp if isinstance(dp, dict) else None, source=imported_from,
                         trust_remote_code=trust_remote_code, allow_pickle=allow_pickle, mask_token_id=mask_token_id,
                         shift_logits=shift_logits)


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
