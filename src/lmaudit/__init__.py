"""lmaudit: audit what language models remember of their training data.

The jobs, for notebooks and scripts (each returns a result with ``write(folder)``)::

    import lmaudit
    model = lmaudit.load_model("models/ft")
    result = lmaudit.mia(model, "members.jsonl", "nonmembers.jsonl", reference=lmaudit.load_model("models/base"))
    result.attacks["loss"]["auc"]

``lmaudit.attacks.list_attacks()`` lists the attacks. The jobs load the model stack
(torch, transformers) on first use, so ``import lmaudit`` and ``import
lmaudit.attacks`` stay light.
"""

import importlib
import os

__version__ = "0.1.0"

# Nothing is ever downloaded: set before transformers or huggingface_hub is imported anywhere.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")

_API = {"load_model": "lmaudit.api", "load_results": "lmaudit.api", "mia": "lmaudit.api", "probe": "lmaudit.api",
        "score": "lmaudit.api", "audit_set": "lmaudit.api", "extract": "lmaudit.api",
        "reconstruct_pii": "lmaudit.api", "dataset_inference": "lmaudit.api",
        "finetune": "lmaudit.api", "generate": "lmaudit.api", "epsilon": "lmaudit.api", "unlearn": "lmaudit.api", "pretrain": "lmaudit.api", "shadows": "lmaudit.api",
        "LoraSpec": "lmaudit.models.lora", "DPSpec": "lmaudit.models.dp", "RunConfig": "lmaudit.runs.mia", "AuditConfig": "lmaudit.runs.audit_set",
        "ExtractConfig": "lmaudit.runs.extract", "ReconstructConfig": "lmaudit.runs.pii",
        "InferenceConfig": "lmaudit.runs.dataset_inference"}
__all__ = ["__version__", *_API]


def __getattr__(name: str):
    """The jobs of :mod:`lmaudit.api`, imported on first use (they need torch; ``import lmaudit`` does not)."""
    if name in _API:
        return getattr(importlib.import_module(_API[name]), name)
    if name == "attacks":  # light: no torch
        return importlib.import_module("lmaudit.attacks")
    raise AttributeError(f"module 'lmaudit' has no attribute '{name}'")


def __dir__() -> list[str]:
    """What ``lmaudit.<Tab>`` completes: the jobs and configs of :mod:`lmaudit.api` besides this module's names."""
    return sorted({*globals(), *_API, "attacks"})
