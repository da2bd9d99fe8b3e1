"""PEFT (LoRA) adapters: accepted wherever a model folder is, and trained by
``finetune``/``unlearn``/``shadows --lora``.

An adapter folder holds ``adapter_config.json`` and ``adapter_model.safetensors`` (what
peft's ``save_pretrained`` writes) and, when lmaudit wrote it, the tokenizer and
``lmaudit_training.json``.

Loading (:func:`~lmaudit.models.loading.load_model`: :func:`~lmaudit.models.resolve.resolve_model`
reads and checks each adapter of the chain, :func:`~lmaudit.models.loading.load_resolved` applies
them in turn). The base model is ``base`` (the ``--adapter-base`` option) or else the adapter
config's ``base_model_name_or_path`` when that is an existing local folder; lmaudit never
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

import warnings
from dataclasses import dataclass, fields
from pathlib import Path

import torch
from peft import LoraConfig, PeftModel, get_peft_model
from peft.tuners.tuners_utils import BaseTunerLayer
from peft.utils import TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING

from lmaudit.errors import LmauditError, SettingError, spell
from lmaudit.models.fingerprint import chain_fingerprints
from lmaudit.models.loading import merge_adapters
from lmaudit.models.sources import resolve_source
from lmaudit.settings import boolean, check_settings, integer, positive, refusing, setting


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())


def folder_fingerprint(path: str | Path, base: str | Path | None = None) -> str:
    """The fingerprint :func:`~lmaudit.models.loading.load_model` gives the folder's model, without loading it."""
    source = resolve_source(path, base)
    return chain_fingerprints(source.folder, source.adapters)[-1]


def _module_names(value, name: str, flag: str | None) -> None:
    if value is not None and (not value or not all(isinstance(t, str) and t for t in value)):
        shown = repr(value).replace("{", "{{").replace("}", "}}")
        raise SettingError(name, f"{{name}} must name modules, got {shown}", flag=flag, hint="e.g. q_proj,v_proj")


refusing(_module_names, [], [""], [3])


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
    lmaudit.errors.SettingError: rank must be an integer ≥ 1, got 0 (hint: --lora R with R ≥ 1 (leave --lora out
    for full fine-tuning))
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
        # the embeddings are never resized here: peft's "auto" would look the base up,
        # on the Hub when it is no local model
        model.save_pretrained(folder, save_embedding_layers=False)
        (folder / "README.md").unlink(missing_ok=True)  # peft's model card template
        return
    if any(isinstance(m, BaseTunerLayer) for m in model.modules()):
        raise LmauditError("internal error: a model with unmerged LoRA layers cannot be saved as a full model")
    model.save_pretrained(folder)


def full_model(model):
    """``model`` with any adapter merged in and every parameter trainable (full fine-tuning)."""
    return start_training(model, None)[0]
