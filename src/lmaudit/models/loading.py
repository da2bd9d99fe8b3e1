"""Safe, offline loading of local model sources: a model folder, a PEFT adapter folder, a GGUF file, a named model.

Nothing is fetched from the network: the path must exist locally. Weights load
from safetensors; pickle checkpoints (``.bin``/``.pt``) need ``allow_pickle``.
Modeling code shipped with a checkpoint runs only with ``trust_remote_code``.

A load is two steps. :func:`~lmaudit.models.resolve.resolve_model` reads and checks every file the source is made
of (:mod:`lmaudit.models.sources`) and its fingerprints into a :class:`~lmaudit.models.resolve.ResolvedModel`; a
damaged or mismatched folder is refused there, before any weight loads. :func:`load_resolved` then
loads that record once: the full model's weights and tokenizer, each adapter applied on it in
turn, and the handle's adapter built for the result.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, fields
from pathlib import Path
from typing import ClassVar

import torch
from peft import PeftModel
from peft.tuners.tuners_utils import BaseTunerLayer
from transformers import AutoConfig, AutoModel, AutoModelForCausalLM, AutoModelForMaskedLM, AutoTokenizer

from lmaudit.errors import ModelLoadError
from lmaudit.models.adapters import make_adapter
from lmaudit.models.gguf import local_model, quiet_transformers
from lmaudit.models.handle import ModelHandle
from lmaudit.models.resolve import AdapterStep, ResolvedModel, resolve_model
from lmaudit.models.served import is_endpoint
from lmaudit.models.served_model import DEFAULT_CONCURRENCY, DEFAULT_TOP_K, load_served
from lmaudit.models.sources import BASE_OPTION
from lmaudit.settings import check_settings, integer, location, setting, text

try:  # transformers 5 checks config fields with huggingface_hub's strict dataclasses
    from huggingface_hub.errors import StrictDataclassError
except ImportError:  # older versions raise ValueError/TypeError instead
    StrictDataclassError = ValueError

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
MISSING_ADAPTER_KEYS = "Found missing adapter keys while loading the checkpoint"  # peft's warning, its own words
_ON_ITS_BASE = "pass {adapter_base} with the model the adapter was trained on"


def _one_line(exc: BaseException) -> str:
    """An exception's text on one line (library messages often span several)."""
    return " ".join(str(exc).split())


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
    tokenizer: str | Path | None = None,
    served_model: str | None = None,
    top_k: int | None = None,
    concurrency: int | None = None,
) -> ModelHandle:
    """Load an AR (``AutoModelForCausalLM``) or DLM model and its tokenizer from a local folder.

    ``kind`` defaults to what the saved config says (:func:`~lmaudit.models.sources.detect_kind`).
    The handle's adapter (:mod:`lmaudit.models.adapters`) runs the model; for a DLM,
    ``mask_token_id`` and ``shift_logits`` override the detected convention. The
    model is in eval mode, on ``device`` in ``dtype`` (:func:`~lmaudit.models.resolve.resolve_device`,
    :func:`~lmaudit.models.sources.resolve_dtype`); a model loaded in another dtype than float32 has another
    fingerprint, so that cached statistics of the two never mix.

    A PEFT adapter folder loads its base (``adapter_base``, else the folder its config
    names) with these same options and applies the adapter (:mod:`lmaudit.models.lora`);
    the base may itself be an adapter, merged into the weights before the outer one is applied.
    A GGUF file, a folder holding one, or a named model (``smollm2-135m``) loads the folder
    it was imported into (:mod:`lmaudit.models.gguf`; imported on first use), and the
    handle's ``source`` records the file.

    An http(s) URL names a served model (an OpenAI-compatible endpoint, :mod:`lmaudit.models.served_model`):
    ``tokenizer`` is a local source of its tokenizer, ``served_model`` the served model's name where the endpoint
    serves several, ``top_k`` the top log-probabilities asked per position, ``concurrency`` the requests in flight at
    once. Each source reads its own options (:class:`LocalSource`, :class:`ServedSource`): a weight option given with
    a URL, or a served model's option given with a model on disk, is refused naming it.
    """
    return model_source(path, kind=kind, trust_remote_code=trust_remote_code, allow_pickle=allow_pickle,
                        mask_token_id=mask_token_id, shift_logits=shift_logits, device=device, dtype=dtype,
                        adapter_base=adapter_base, tokenizer=tokenizer, served_model=served_model, top_k=top_k,
                        concurrency=concurrency).load()


def load_models(model, reference=None, **options) -> tuple[ModelHandle, ModelHandle | None]:
    """The target and, when given, the reference: each a loaded model (used as it is) or a source loaded with the
    ``options`` it reads (:func:`load_model`; an option that no source given reads is refused); a reference given as a
    source is read as a model of the target's kind, the one way every job reads its reference."""
    _check_read(options, [_source_type(m) for m in (model, reference)
                          if m is not None and not isinstance(m, ModelHandle)])
    target = model if isinstance(model, ModelHandle) else _source(model, options).load()
    if reference is None or isinstance(reference, ModelHandle):
        return target, reference
    return target, _source(reference, {**options, "kind": target.kind}).load()


@dataclass(frozen=True)
class LocalSource:
    """A model on disk (a folder, a PEFT adapter folder, a GGUF file or a model name) with the options its weights
    load with: read and checked (:func:`~lmaudit.models.resolve.resolve_model`), then loaded (:func:`load_resolved`)."""

    what: ClassVar[str] = "a model on disk, whose folder holds its tokenizer"
    path: str | Path
    kind: str | None = None
    trust_remote_code: bool = False
    allow_pickle: bool = False
    mask_token_id: int | None = None
    shift_logits: bool | None = None
    device: str | None = None
    dtype: str | None = None
    adapter_base: str | Path | None = None

    def load(self) -> ModelHandle:
        return load_resolved(resolve_model(
            self.path, self.adapter_base, kind=self.kind, dtype=self.dtype, device=self.device,
            trust_remote_code=self.trust_remote_code, allow_pickle=self.allow_pickle, mask_token_id=self.mask_token_id,
            shift_logits=self.shift_logits, local=local_model))


@dataclass(frozen=True)
class ServedSource:
    """A served model (an http(s) URL) with the options asking it reads
    (:func:`~lmaudit.models.served_model.load_served`). Its server holds the weights: ``device`` may only say where
    this process keeps none (cpu or auto)."""

    what: ClassVar[str] = "a served model, whose server holds the weights"
    # the types alone where the meaning is checked on use (the kind, the tokenizer, the served name, the device)
    path: str = setting(check=text())
    kind: str | None = setting(None, check=text(optional=True))
    tokenizer: str | Path | None = setting(None, check=location(optional=True))
    served_model: str | None = setting(None, check=text(optional=True))
    top_k: int | None = setting(None, check=integer(1, optional=True))  # None: DEFAULT_TOP_K
    concurrency: int | None = setting(None, check=integer(1, optional=True))  # None: DEFAULT_CONCURRENCY
    device: str | None = setting(None, check=text(optional=True))

    def __post_init__(self) -> None:
        check_settings(self)

    def load(self) -> ModelHandle:
        if self.device not in (None, "auto", "cpu"):
            raise ModelLoadError(f"{self.path}: {{device}} {self.device} does not apply to {self.what}",
                                 hint="drop {device}", options=("device",))
        return load_served(str(self.path), tokenizer=self.tokenizer, served_model=self.served_model, kind=self.kind,
                           top_k=DEFAULT_TOP_K if self.top_k is None else self.top_k,
                           concurrency=DEFAULT_CONCURRENCY if self.concurrency is None else self.concurrency)


def model_source(path: str | Path, **options) -> LocalSource | ServedSource:
    """The source ``path`` names (a served model for an http(s) URL, else a model on disk) with the ``options`` of
    :func:`load_model` it reads; one it does not read that the caller set is refused, naming it."""
    _check_read(options, [_source_type(path)])
    return _source(path, options)


def _source_type(path) -> type:
    return ServedSource if is_endpoint(path) else LocalSource


def _source(path, options: dict) -> LocalSource | ServedSource:
    source = _source_type(path)
    reads = {f.name for f in fields(source)}
    return source(str(path) if source is ServedSource else path, **{k: v for k, v in options.items() if k in reads})


def _check_read(options: dict, sources: list[type]) -> None:
    """An option the caller set (neither None, False nor "auto": the values the commands pass when it is not given)
    that none of ``sources`` reads is refused: it would be silently ignored."""
    reads = {f.name for source in sources for f in fields(source)}
    for name, value in options.items():
        if name not in reads and not (value is None or value is False or value == "auto"):
            what = " or ".join(dict.fromkeys(source.what for source in sources)) or "a model given loaded"
            raise ModelLoadError(f"{{{name}}} does not apply to {what}", hint=f"drop {{{name}}}", options=(name,))


def load_resolved(resolved: ResolvedModel) -> ModelHandle:
    """The model ``resolved`` describes, loaded once: the full model, each adapter applied on it in turn (an inner
    one merged into the weights first, as training on top of it does), then the handle's adapter built."""
    quiet_transformers()
    model, tokenizer = _load_full(resolved)
    for step in resolved.adapters:
        model, tokenizer = _apply_adapter(step, model, tokenizer, resolved)
    adapter = make_adapter(model, tokenizer, resolved.kind, mask_token_id=resolved.mask_token_id,
                           shift_logits=resolved.shift_logits)
    return ModelHandle(model, tokenizer, str(resolved.path), resolved.fingerprint, resolved.kind, adapter,
                       dp=resolved.dp, source=resolved.source)


def _load_full(r: ResolvedModel):
    """(model, tokenizer) of the full model's folder, in eval mode on the device."""
    p, trust = r.folder, r.trust_remote_code
    try:
        config = AutoConfig.from_pretrained(p, local_files_only=True, trust_remote_code=trust)
    except (ValueError, TypeError, StrictDataclassError) as exc:
        raise ModelLoadError(f"{p / 'config.json'}: {_one_line(exc)}",
                             hint="restore the config.json saved with these weights") from None
    try:
        tokenizer = AutoTokenizer.from_pretrained(p, local_files_only=True, trust_remote_code=trust)
    except (OSError, ValueError) as exc:
        raise ModelLoadError(f"'{p}': cannot load the tokenizer ({_one_line(exc)})",
                             hint="save the tokenizer into the model folder") from None
    cfg = r.config
    causal_arch = any(a.endswith("ForCausalLM") for a in cfg.get("architectures") or [])
    if r.kind == "ar" or (cfg.get("lmaudit_bidirectional") and causal_arch):
        auto = AutoModelForCausalLM
    else:
        auto = (AutoModel if cfg.get("auto_map") and "AutoModelForMaskedLM" not in cfg.get("auto_map", {})
                else AutoModelForMaskedLM)
    # mismatched shapes are reported here, naming a tensor (transformers' own report is a silenced log)
    model, info = auto.from_pretrained(
        p, config=config, local_files_only=True, trust_remote_code=trust,
        use_safetensors=None if r.allow_pickle else True, ignore_mismatched_sizes=True, output_loading_info=True,
        dtype=DTYPES[r.dtype],
    )
    if info["mismatched_keys"]:
        key, saved, expected = sorted(info["mismatched_keys"])[0]
        raise ModelLoadError(f"'{p}': the weights do not match config.json ({key} is {list(saved)} in the weight "
                             f"files, config.json makes it {list(expected)})",
                             hint="restore the config.json saved with these weights, or re-save the model")
    if info["missing_keys"]:  # transformers would fill them with random values
        missing = sorted(info["missing_keys"])
        raise ModelLoadError(f"'{p}': the weight files lack {len(missing)} tensor(s) config.json needs "
                             f"(e.g. {missing[0]})", hint="restore the weight files saved with this config.json")
    model.eval()
    model.to(r.device)
    # how to load this model again (a Ray worker does, from the same folder with the same options, on its device)
    model.lmaudit_load_spec = {"path": str(p), "kind": r.kind, "trust_remote_code": trust,
                               "allow_pickle": r.allow_pickle, "mask_token_id": r.mask_token_id,
                               "shift_logits": r.shift_logits, "dtype": r.dtype}
    return model, tokenizer


def merge_adapters(model):
    """Fold every LoRA layer of ``model`` into its base weights, in place; return the now plain transformers model."""
    layers = [(name, m) for name, m in model.named_modules() if isinstance(m, BaseTunerLayer)]
    for name, layer in layers:  # outer layers first; their inner modules are never tuner layers here
        layer.merge()
        parent, _, child = name.rpartition(".")
        setattr(model.get_submodule(parent), child, layer.get_base_layer())
    if layers:
        model.__dict__.pop("peft_config", None)
        model.__dict__.pop("lmaudit_adapter", None)
    return model


def _apply_adapter(step: AdapterStep, model, tokenizer, r: ResolvedModel):
    """(model, tokenizer) with the adapter of ``step`` applied on ``model`` (any adapter in it merged first).

    The model is the base transformers model with the LoRA layers injected, unmerged and in
    eval mode: it computes bit for bit what the model trained in memory computed.
    """
    model = merge_adapters(model)
    _check_fits(step, model)
    if step.trained_kind in ("ar", "dlm") and step.trained_kind != r.kind:
        raise ModelLoadError(f"adapter '{step.path}' was trained on a model of kind {step.trained_kind}; its base "
                             f"'{step.base}' loads as kind {r.kind}",
                             hint="pass {adapter_base} with the model it was trained on", options=BASE_OPTION)
    if step.other_base is not None:
        warnings.warn(f"adapter '{step.path}' was trained on a base with other weights than '{step.base}' "
                      f"(fingerprint {step.other_base[:12]}…, this one {step.base_fingerprint[:12]}…)", stacklevel=3)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            warnings.filterwarnings("ignore", category=FutureWarning)
            peft_model = PeftModel.from_pretrained(model, str(step.path), is_trainable=False)
    except (ValueError, RuntimeError, KeyError, TypeError, OSError) as exc:
        raise ModelLoadError(f"adapter '{step.path}' cannot be applied to its base '{step.base}' ({_one_line(exc)})",
                             hint=_ON_ITS_BASE, options=BASE_OPTION) from None
    for w in caught:  # peft only warns where an adapter's file lacks weights its config declares: they stay at init
        if MISSING_ADAPTER_KEYS in str(w.message):
            missing = str(w.message).split(MISSING_ADAPTER_KEYS, 1)[1].strip(" :.")
            raise ModelLoadError(f"adapter '{step.path}' lacks weights its adapter_config.json declares "
                                 f"({missing[:200]}): they would stay at their initial values",
                                 hint="pass the adapter folder as it was saved (its adapter_model.safetensors whole)")
        warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    inner = peft_model.get_base_model().eval()
    if step.own_tokenizer:
        tokenizer = _adapter_tokenizer(step.path, tokenizer, r.trust_remote_code)
    spec = getattr(inner, "lmaudit_load_spec", None)  # the base's (peft injected its layers into that same module)
    if spec is not None:  # a Ray worker loads the same adapter on the same base
        inner.lmaudit_load_spec = {**spec, "path": str(step.path), "adapter_base": str(step.base)}
    cfg = step.config
    inner.lmaudit_adapter = {"path": str(step.path), "peft_type": cfg["peft_type"], "r": cfg.get("r"),
                             "lora_alpha": cfg.get("lora_alpha"), "target_modules": cfg.get("target_modules"),
                             "base": {"path": str(step.base), "fingerprint": step.base_fingerprint}}
    return inner, tokenizer


def _check_fits(step: AdapterStep, model) -> None:
    """The base must be the architecture the adapter was trained on: the class peft recorded (``auto_mapping``) and
    every module the adapter adapts, with the features of its LoRA matrices; a one-line error naming both otherwise."""
    actual = type(model).__name__
    expected = (step.config.get("auto_mapping") or {}).get("base_model_class")
    if expected and expected != actual:
        raise ModelLoadError(f"adapter '{step.path}' was trained on a {expected}; its base '{step.base}' is a {actual}",
                             hint=_ON_ITS_BASE, options=BASE_OPTION)
    modules = dict(model.named_modules())
    for name, (n_in, n_out) in sorted(step.shapes.items()):
        module = modules.get(name)
        have = None if module is None else (getattr(module, "in_features", None), getattr(module, "out_features", None))
        if have is None or (None not in have and have != (n_in, n_out)):
            found = "which it lacks" if have is None else f"the base's is {have[0]} → {have[1]}"
            raise ModelLoadError(f"adapter '{step.path}' (for a {expected or 'model'}) does not fit its base "
                                 f"'{step.base}' (a {actual}): it adapts {name} as {n_in} → {n_out} features, {found}",
                                 hint=_ON_ITS_BASE, options=BASE_OPTION)


def _adapter_tokenizer(path: Path, base_tokenizer, trust_remote_code: bool):
    """The tokenizer saved in an adapter folder with its training, which must have as many tokens as the base's."""
    try:
        tok = AutoTokenizer.from_pretrained(path, local_files_only=True, trust_remote_code=trust_remote_code)
    except (OSError, ValueError) as exc:
        raise ModelLoadError(f"adapter '{path}': cannot load its tokenizer ({_one_line(exc)})",
                             hint="remove the tokenizer files to use the base's, or re-save them") from None
    if len(tok) != len(base_tokenizer):
        raise ModelLoadError(f"adapter '{path}': its tokenizer has {len(tok)} tokens, its base's {len(base_tokenizer)}",
                             hint="the adapter belongs to another base: pass {adapter_base}", options=BASE_OPTION)
    return tok


def load_causal_lm(path: str | Path, **kwargs) -> ModelHandle:
    """Load an autoregressive model (see :func:`load_model`)."""
    return load_model(path, kind="ar", **kwargs)
