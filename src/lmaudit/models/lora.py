"""PEFT (LoRA) adapters: accepted wherever a model folder is, and trained by ``finetune``/``unlearn``/``shadows --lora``.

An adapter folder holds ``adapter_config.json`` and ``adapter_model.safetensors`` (what
peft's ``save_pretrained`` writes) and, when lmaudit wrote it, the tokenizer and
``lmaudit_training.json``.

Loading (:func:`apply_adapter`, called by :func:`~lmaudit.models.loading.load_model` for
each adapter of the chain :func:`~lmaudit.models.sources.resolve_source` found). The base
model is ``base`` (the ``--adapter-base`` option) or else the adapter config's
``base_model_name_or_path`` when that is an existing local folder; lmaudit never
downloads, so a hub name is an error. The base loads with the adapter's load options,
and may itself be an adapter: the inner adapter is then merged into the weights before
the outer one is applied (training on top of an adapter does the
same, so both see one model). The base must be the architecture the adapter expects:
the class peft recorded (``auto_mapping``), every module the adapter adapts with the
features of its LoRA matrices, and the model kind lmaudit recorded. The handle's model
is the base transformers model with the LoRA layers injected, unmerged and in eval
mode: it computes bit for bit what the model trained in memory computed, and the
adapters of :mod:`lmaudit.models.adapters` run it as the base architecture. Its
fingerprint hashes the base's fingerprint, the adapter weights and the adapter config,
so the probe cache never takes an adapter for its base.

Training (:func:`add_lora`): a fresh adapter on the loaded model, the base frozen.
Targets default to peft's per-architecture choice (the attention query and value
projections, as in the LoRA paper: ``q_proj,v_proj`` for Llama, ``query,value`` for
BERT); alpha defaults to 2·rank; no dropout, and the adapter's initial values are
seeded, so the same seed gives the same adapter.
"""

from __future__ import annotations

import json
import re
import warnings
from dataclasses import dataclass, fields
from pathlib import Path

import torch
from peft import LoraConfig, PeftModel, get_peft_model
from peft.tuners.tuners_utils import BaseTunerLayer
from peft.utils import TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING
from safetensors import SafetensorError, safe_open
from transformers import AutoTokenizer

from lmaudit.errors import LmauditError, ModelLoadError, SettingError, spell
from lmaudit.folders import verify_folder
from lmaudit.models.adapters import make_adapter
from lmaudit.models.fingerprint import adapter_fingerprint, model_dir_fingerprint
from lmaudit.models.handle import ModelHandle
from lmaudit.models.sources import BASE_OPTION, read_adapter_config, resolve_source
from lmaudit.settings import boolean, check_settings, integer, positive, setting

SAFE_WEIGHTS, PICKLE_WEIGHTS = "adapter_model.safetensors", "adapter_model.bin"
TRAINING_FILE = "lmaudit_training.json"  # as models/build.py writes it
MISSING_ADAPTER_KEYS = "Found missing adapter keys while loading the checkpoint"  # peft's warning, its own words
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())


def _training_record(path: Path) -> dict:
    try:
        record = json.loads((path / TRAINING_FILE).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return {}
    return record if isinstance(record, dict) else {}


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


def _weights_only_fingerprint(folder: Path) -> str | None:
    """The fingerprint a training record written before tokenizer files were fingerprinted holds for the base
    ``folder`` (its weights and config alone), or None where the folder is not a plain model folder."""
    try:
        return model_dir_fingerprint(resolve_source(folder).folder, tokenizer=False)
    except (OSError, LmauditError):
        return None


def folder_fingerprint(path: str | Path, base: str | Path | None = None) -> str:
    """The fingerprint :func:`~lmaudit.models.loading.load_model` gives the folder's model, without loading it."""
    source = resolve_source(path, base)
    fingerprint = model_dir_fingerprint(source.folder)
    for adapter in source.adapters:
        fingerprint = adapter_fingerprint(adapter, fingerprint)
    return fingerprint


def _lora_shapes(weights: Path) -> dict[str, list[int | None]]:
    """{adapted module: [in features, out features]} from the LoRA matrices in a safetensors header."""
    shapes: dict[str, list[int | None]] = {}
    with safe_open(weights, "pt") as f:
        for key in f.keys():
            m = re.fullmatch(r"base_model\.model\.(.+)\.lora_([AB])\.weight", key)
            if m:
                shape = f.get_slice(key).get_shape()
                entry = shapes.setdefault(m.group(1), [None, None])
                entry[0 if m.group(2) == "A" else 1] = shape[1] if m.group(2) == "A" else shape[0]
    return shapes


def _check_fits(path: Path, base: Path, model, cfg: dict) -> None:
    """The base must be the architecture the adapter was trained on: a one-line error naming both otherwise."""
    actual = type(model).__name__
    expected = (cfg.get("auto_mapping") or {}).get("base_model_class")
    if expected and expected != actual:
        raise ModelLoadError(f"adapter '{path}' was trained on a {expected}; its base '{base}' is a {actual}",
                             hint="pass {adapter_base} with the model the adapter was trained on", options=BASE_OPTION)
    if not (path / SAFE_WEIGHTS).is_file():
        return
    modules = dict(model.named_modules())
    for name, (n_in, n_out) in sorted(_lora_shapes(path / SAFE_WEIGHTS).items()):
        module = modules.get(name)
        have = None if module is None else (getattr(module, "in_features", None), getattr(module, "out_features", None))
        if have is None or (None not in have and have != (n_in, n_out)):
            found = "which it lacks" if have is None else f"the base's is {have[0]} → {have[1]}"
            raise ModelLoadError(f"adapter '{path}' (for a {expected or 'model'}) does not fit its base '{base}' (a "
                                 f"{actual}): it adapts {name} as {n_in} → {n_out} features, {found}",
                                 hint="pass {adapter_base} with the model the adapter was trained on", options=BASE_OPTION)


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


def apply_adapter(path: Path, base: ModelHandle, base_dir: Path, **options) -> ModelHandle:
    """The adapter at ``path`` applied on ``base``, the handle of the folder ``base_dir`` (loaded with the same
    ``options``, which it may fold in: a base that is itself an adapter is merged first); see the module docstring."""
    p = check_adapter_dir(path, allow_pickle=bool(options.get("allow_pickle")))
    cfg = read_adapter_config(p)
    model = merge_adapters(base.model)  # a base that is itself an adapter: folded in, as training on top of it does
    _check_fits(p, base_dir, model, cfg)
    training = _training_record(p)  # written by lmaudit; absent for adapters from elsewhere
    record, trained_kind = training.get("lora") or {}, training.get("kind")
    if trained_kind in ("ar", "dlm") and trained_kind != base.kind:
        raise ModelLoadError(f"adapter '{path}' was trained on a model of kind {trained_kind}; its base '{base_dir}' "
                             f"loads as kind {base.kind}", hint="pass {adapter_base} with the model it was trained on",
                             options=BASE_OPTION)
    if record.get("base_fingerprint") not in (None, base.fingerprint, _weights_only_fingerprint(base_dir)):
        warnings.warn(f"adapter '{path}' was trained on a base with other weights than '{base_dir}' "
                      f"(fingerprint {record['base_fingerprint'][:12]}…, this one {base.fingerprint[:12]}…)", stacklevel=2)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            warnings.filterwarnings("ignore", category=FutureWarning)
            peft_model = PeftModel.from_pretrained(model, str(p), is_trainable=False)
    except (ValueError, RuntimeError, KeyError, TypeError, OSError) as exc:
        raise ModelLoadError(f"adapter '{path}' cannot be applied to its base '{base_dir}' ({_one_line(exc)})",
                             hint="pass {adapter_base} with the model the adapter was trained on", options=BASE_OPTION) from None
    for w in caught:  # peft only warns where an adapter's file lacks weights its config declares: they stay at init
        if MISSING_ADAPTER_KEYS in str(w.message):
            missing = str(w.message).split(MISSING_ADAPTER_KEYS, 1)[1].strip(" :.")
            raise ModelLoadError(f"adapter '{path}' lacks weights its adapter_config.json declares ({missing[:200]}): "
                                 "they would stay at their initial values",
                                 hint="pass the adapter folder as it was saved (its adapter_model.safetensors whole)")
        warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    inner = peft_model.get_base_model().eval()
    tokenizer = _tokenizer(p, base.tokenizer, bool(options.get("trust_remote_code")))
    spec = getattr(base.model, "lmaudit_load_spec", None)
    if spec is not None:  # a Ray worker loads the same adapter on the same base
        inner.lmaudit_load_spec = {**spec, "path": str(p), "adapter_base": str(base_dir)}
    inner.lmaudit_adapter = {"path": str(p), "peft_type": cfg["peft_type"], "r": cfg.get("r"),
                             "lora_alpha": cfg.get("lora_alpha"), "target_modules": cfg.get("target_modules"),
                             "base": {"path": str(base_dir), "fingerprint": base.fingerprint}}
    adapter = make_adapter(inner, tokenizer, base.kind, mask_token_id=options.get("mask_token_id"),
                           shift_logits=options.get("shift_logits"))
    return ModelHandle(inner, tokenizer, str(p), adapter_fingerprint(p, base.fingerprint), base.kind, adapter)


def _tokenizer(path: Path, base_tokenizer, trust_remote_code: bool):
    """The adapter folder's own tokenizer when it has one (saved with the training), else the base's."""
    if not any((path / name).is_file() for name in _TOKENIZER_FILES):
        return base_tokenizer
    try:
        tok = AutoTokenizer.from_pretrained(path, local_files_only=True, trust_remote_code=trust_remote_code)
    except (OSError, ValueError) as exc:
        raise ModelLoadError(f"adapter '{path}': cannot load its tokenizer ({_one_line(exc)})",
                             hint="remove the tokenizer files to use the base's, or re-save them") from None
    if len(tok) != len(base_tokenizer):
        raise ModelLoadError(f"adapter '{path}': its tokenizer has {len(tok)} tokens, its base's {len(base_tokenizer)}",
                             hint="the adapter belongs to another base: pass {adapter_base}", options=BASE_OPTION)
    return tok


def adapter_record(handle) -> dict:
    """``{"adapter": {...}}`` for a handle loaded from an adapter folder (its rank, targets and base), else ``{}``."""
    info = getattr(handle.model, "lmaudit_adapter", None)
    return {"adapter": info} if info else {}


def _module_names(value, name: str, flag: str | None) -> None:
    if value is not None and (not value or not all(isinstance(t, str) and t for t in value)):
        shown = repr(value).replace("{", "{{").replace("}", "}}")
        raise SettingError(name, f"{{name}} must name modules, got {shown}", flag=flag, hint="e.g. q_proj,v_proj")


@dataclass(frozen=True)
class LoraSpec:
    """A LoRA fine-tuning: rank, alpha (default 2·rank), target modules (default: peft's for the architecture);
    ``merge`` writes the merged full model instead of the adapter.

    Examples
    --------
    >>> lmaudit.LoraSpec(8).scale_alpha
    16.0
    >>> lmaudit.LoraSpec(0)
    Traceback (most recent call last):
    ...
    lmaudit.errors.SettingError: rank must be an integer ≥ 1, got 0 (hint: --lora R with R ≥ 1 (leave --lora out for full fine-tuning))
    """

    rank: int = setting(check=integer(1, hint="--lora R with R ≥ 1 (leave --lora out for full fine-tuning)"),
                        flag="--lora")
    alpha: float | None = setting(None, check=positive(optional=True), flag="--lora-alpha")
    targets: tuple[str, ...] | None = setting(None, check=_module_names, flag="--lora-targets")
    merge: bool = setting(False, check=boolean(), flag="--merge")

    def __post_init__(self) -> None:
        """Every setting's declared constraint (the rank first)."""
        check_settings(self)

    @classmethod
    def given(cls, rank: int | None = None, alpha: float | None = None, targets: tuple[str, ...] | None = None,
              merge: bool = False) -> LoraSpec | None:
        """The spec of the settings given (None: full fine-tuning, when no ``rank`` is); a LoRA setting given
        without a rank is refused, naming it."""
        if rank is None:
            for f in fields(cls)[1:]:
                if {"alpha": alpha, "targets": targets, "merge": merge}[f.name] not in (None, False):
                    raise SettingError(f.name, "{name} applies to LoRA training only", flag=f.metadata["flag"],
                                       hint="add {rank}", also={"rank": ("rank=", "--lora RANK")})
            return None
        return cls(rank, alpha, targets, merge)

    @property
    def scale_alpha(self) -> float:
        return float(self.alpha) if self.alpha is not None else 2.0 * self.rank


def linear_names(model) -> list[str]:
    """The distinct names of the model's linear layers (what ``--lora-targets`` can name)."""
    return sorted({name.rsplit(".", 1)[-1] for name, m in model.named_modules() if isinstance(m, torch.nn.Linear)})


def add_lora(model, spec: LoraSpec, *, seed: int = 0) -> PeftModel:
    """A fresh LoRA adapter on ``model`` (inner adapters merged first), only its matrices trainable.

    The model is changed in place (LoRA layers injected); train ``peft.get_base_model()``
    like any model (see :func:`start_training`, :func:`finish_training`).
    """
    merge_adapters(model)
    model_type = getattr(model.config, "model_type", None)
    targets = list(spec.targets) if spec.targets else TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING.get(model_type)
    hint = "pass {targets} with some of its linear layers: " + ",".join(linear_names(model))
    if not targets:
        raise LmauditError(f"peft has no default LoRA targets for a '{model_type}' model", hint=hint)
    config = LoraConfig(r=spec.rank, lora_alpha=spec.scale_alpha, lora_dropout=0.0, target_modules=targets, bias="none")
    try:
        with torch.random.fork_rng(devices=[]), warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            torch.manual_seed(seed)  # LoRA's A matrices start random: the same seed gives the same adapter
            return get_peft_model(model, config)
    except ValueError as exc:
        raise LmauditError(f"{{asked}}: {_one_line(exc)}", hint=hint,
                           options={"asked": spell("targets", ",".join(targets), flag="--lora-targets"),
                                    "targets": spell("targets", flag="--lora-targets")}) from None


def start_training(model, lora: LoraSpec | None, *, seed: int = 0):
    """(the module to train, its peft wrapper or None): a fresh LoRA adapter on ``model``, or the whole model
    (any adapter merged in, every parameter trainable)."""
    if lora is None:
        return merge_adapters(model).requires_grad_(True), None
    peft_model = add_lora(model, lora, seed=seed)
    return peft_model.get_base_model(), peft_model


def finish_training(module, peft_model: PeftModel | None, lora: LoraSpec | None, base: str | Path,
                    base_fingerprint: str):
    """(what to save, what ``lmaudit_training.json`` adds) after :func:`start_training` and training.

    With LoRA: the adapter, naming ``base`` by its absolute path (or, with ``lora.merge``,
    the merged full model), and a ``lora`` record (rank, alpha, targets, base and its fingerprint).
    """
    if peft_model is None:
        return module, {}
    cfg = peft_model.peft_config["default"]
    record = {"rank": lora.rank, "alpha": lora.scale_alpha, "targets": sorted(cfg.target_modules), "merged": lora.merge,
              "trainable_parameters": sum(p.numel() for p in peft_model.parameters() if p.requires_grad),
              "base": str(Path(base).resolve()), "base_fingerprint": base_fingerprint}
    if lora.merge:
        return merge_adapters(module), {"lora": record}
    cfg.base_model_name_or_path = record["base"]
    return peft_model, {"lora": record}


def save_weights(model, folder: Path) -> None:
    """``save_pretrained`` of a full model, or of an adapter (its config and weights only)."""
    if isinstance(model, PeftModel):
        # the embeddings are never resized here: peft's "auto" would look the base up, on the Hub when it is no local model
        model.save_pretrained(folder, save_embedding_layers=False)
        (folder / "README.md").unlink(missing_ok=True)  # peft's model card template
        return
    if any(isinstance(m, BaseTunerLayer) for m in model.modules()):
        raise LmauditError("internal error: a model with unmerged LoRA layers cannot be saved as a full model")
    model.save_pretrained(folder)


def full_model(model):
    """``model`` with any adapter merged in and every parameter trainable (full fine-tuning)."""
    return start_training(model, None)[0]
