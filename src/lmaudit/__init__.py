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

import importlib as _importlib
import os as _os
import pkgutil as _pkgutil

__version__ = "0.1.0"

# Nothing is ever downloaded: set before transformers or huggingface_hub is imported anywhere.
_os.environ.setdefault("HF_HUB_OFFLINE", "1")
_os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
_os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")


# lmaudit's own subpackages and modules (listed, not imported): ``from lmaudit import api`` imports that alone
_SUBPACKAGES = frozenset(m.name for m in _pkgutil.iter_modules(__path__))


def __getattr__(name: str):
    """The names of :mod:`lmaudit.api` (its jobs, their settings and results), imported on first use: they need torch,
    ``import lmaudit`` does not. ``__all__`` is read the same way."""
    if name in _SUBPACKAGES:  # ``from lmaudit import api``: the subpackage itself, light (its jobs load on first use)
        return _importlib.import_module(f"lmaudit.{name}")
    if name.startswith("__") and name != "__all__":
        raise AttributeError(f"module 'lmaudit' has no attribute '{name}'")
    api = _importlib.import_module("lmaudit.api")
    if name == "__all__":
        return ["__version__", *api.__all__]
    if name in api.__all__:
        return getattr(api, name)
    raise AttributeError(f"module 'lmaudit' has no attribute '{name}'")


def __dir__() -> list[str]:
    """What ``lmaudit.<Tab>`` completes: this module's public names and those of :mod:`lmaudit.api`."""
    own = {n for n in globals() if not n.startswith("_") or n == "__version__"}
    return sorted({*own, *_importlib.import_module("lmaudit.api").__all__, "attacks"})
