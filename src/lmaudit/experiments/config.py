"""Experiment files (TOML): keys, defaults and validation.

Unknown keys are errors that name the key and the file; values are type-checked.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field, fields
from pathlib import Path

from lmaudit.errors import LmauditError
from lmaudit.utils import read_toml

TYPES = ("mia", "ablation", "misaligned-ref", "epochs", "mask-ratio", "extraction-steps", "pii-extraction",
         "extraction-relaxed", "unlearning-audit", "pii-reconstruction")


@dataclass
class ExperimentConfig:
    name: str
    type: str
    kind: str = "dlm"
    preset: str = "tiny"
    pretrain_tokens: int = 2_000_000  # the AR stage (shared with the demo's base model)
    adapt_tokens: int = 500_000  # DLM: diffusion training of the AR base (Dream-style adaptation)
    mode: str = "dft"  # dft: corpus passages; ift: instruction pairs
    n_members: int = 200
    n_nonmembers: int = 200
    passage_chars: int = 250
    epochs: int = 6
    lr: float = 1e-3
    block: int = 64
    batch_size: int = 16
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])
    budget: int = 16
    attacks: list[str] | None = None
    variants: dict[str, dict] = field(default_factory=dict)  # ablation: label -> {attack, params}
    references: list[str] = field(default_factory=lambda: ["golden", "other-seed", "perturbed"])
    mask_ratios: list[float] = field(default_factory=lambda: [0.25, 0.5, 0.75])
    description: str = ""
    packages: list[str] = field(default_factory=lambda: ["numpy", "scipy", "torch", "transformers"])
    vocab_size: int = 4096
    extract: dict = field(default_factory=dict)  # extraction experiments: keys of ExtractConfig
    pii_fields: list[str] = field(default_factory=lambda: ["email", "phone"])
    n_relaxed: int = 30  # extraction-relaxed: records sampled
    budget_p: float = 0.5  # extraction-relaxed: target probability of the query-budget curve
    budget_mask: str = "pii:email"  # extraction-relaxed: the mask of the query-budget curve
    forget_fractions: list[float] = field(default_factory=lambda: [0.05, 0.1])  # unlearning-audit
    unlearn_methods: list[str] = field(default_factory=lambda: ["none", "retrain", "gradient_ascent", "npo", "finetune"])
    unlearn: dict = field(default_factory=dict)  # unlearning-audit: lr, epochs, retain_weight, npo_beta
    n_shadows: int = 8  # unlearning-audit: LiRA shadow models
    audit_fpr: float = 0.1  # unlearning-audit: FPR at which per-sample audits set their threshold
    reconstruct: dict = field(default_factory=dict)  # pii-reconstruction: keys of ReconstructConfig
    n_targets: int = 50  # pii-reconstruction: redacted records per field
    n_calibration: int = 10  # pii-reconstruction: known records to fit alpha on


def load_experiment(path: str | Path) -> ExperimentConfig:
    path = Path(path)
    raw = read_toml(path, "experiment file")
    known = {f.name: f for f in fields(ExperimentConfig)}
    for key in raw:
        if key not in known:
            close = difflib.get_close_matches(key, known, n=1)
            raise LmauditError(f"{path}: unknown key '{key}'", hint=f"did you mean '{close[0]}'?" if close else
                               f"known keys: {', '.join(known)}")
    for key in ("name", "type"):
        if key not in raw:
            raise LmauditError(f"{path}: missing key '{key}'")
    if raw["type"] not in TYPES:
        raise LmauditError(f"{path}: type '{raw['type']}' is not one of {', '.join(TYPES)}")
    defaults = ExperimentConfig(name="", type="mia")
    for key, value in raw.items():
        want = type(getattr(defaults, key))
        if getattr(defaults, key) is None or key in ("name", "type"):
            continue
        if want is float and isinstance(value, int):
            continue
        if not isinstance(value, want):
            raise LmauditError(f"{path}: key '{key}' must be {want.__name__}, got {type(value).__name__}")
    return ExperimentConfig(**raw)
