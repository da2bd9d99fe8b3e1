"""The Python interface: the same jobs as the commands, on model folders or loaded models, paths or text sets.

Every job returns a result whose ``write(folder)`` writes the files the command
writes; ``lmaudit.attacks.list_attacks()`` lists the attacks. The Examples of each
function run as tests (``tests/test_doctests.py``), with ``MODEL`` a tiny model folder and
``members.jsonl``, ``nonmembers.jsonl``, ``suspect.jsonl``, ``redacted.jsonl`` and
``prompts.jsonl`` in the working folder. In a notebook::

    import lmaudit
    target = lmaudit.load_model("models/ft")
    result = lmaudit.mia(target, "members.jsonl", "nonmembers.jsonl", reference="models/base")
    print(result.attacks["reference"]["auc"])
    records = lmaudit.probe(target, "members.jsonl")  # the probes' statistics, kept
    lmaudit.score(records, ["min_k"], params={"min_k": {"k": 0.5}})  # re-scored, no forward pass
"""

from __future__ import annotations

import importlib
import pkgutil
from types import ModuleType

# the job families: a job is declared in its job module (lmaudit.runs) and run by a function of its family's module,
# whose ``__all__`` names its jobs and their settings; adding one touches no list in this file
FAMILIES = ("lmaudit.api.membership", "lmaudit.api.extraction", "lmaudit.api.training", "lmaudit.api.unlearning",
            "lmaudit.api.results", "lmaudit.api.rag")
OTHERS = {"JOBS": "lmaudit.runs.common", "load_model": "lmaudit.models.loading",
          "make_backend": "lmaudit.probes.backends", "on_backend": "lmaudit.runs.inputs",
          "gate": "lmaudit.runs.gate", "card": "lmaudit.runs.card",
          "track": "lmaudit.runs.tracking",  # read results folders: no job of their own
          "check_tracking_uri": "lmaudit.runs.tracking",  # an --mlflow URI, checked before any model loads
          "quantize": "lmaudit.models.quantize"}  # writes a model folder from a model: no job of its own


# the interface's own modules (listed, not imported): reached by name without importing the jobs
MODULES = frozenset(m.name for m in pkgutil.iter_modules(__path__))


def load_jobs() -> list[ModuleType]:
    """The job families, imported (they need torch): every job is then declared, its report kind with it."""
    return [importlib.import_module(name) for name in FAMILIES]


def __getattr__(name: str):
    """The interface's names, imported on first use: ``lmaudit.api.tools`` and ``import lmaudit.api`` stay light."""
    if name == "__all__":
        return sorted({n for family in load_jobs() for n in family.__all__} | set(OTHERS))
    if name == "JOBS":  # every job declared (its module imported) before the registry is read
        load_jobs()
    if name in OTHERS:
        return getattr(importlib.import_module(OTHERS[name]), name)
    if name in MODULES:  # ``from lmaudit.api import tools``: the module itself, not a search of the jobs
        return importlib.import_module(f"lmaudit.api.{name}")
    if not name.startswith("__"):
        for family in load_jobs():
            if name in family.__all__:
                return getattr(family, name)
    raise AttributeError(f"module 'lmaudit.api' has no attribute '{name}'")


def __dir__() -> list[str]:
    """The interface's names: the jobs, their settings and results, and :data:`OTHERS` (no module objects)."""
    return sorted({"FAMILIES", "OTHERS", "load_jobs", *__getattr__("__all__")})
