"""The attack registry: every attack registers itself with its metadata.

An attack is a pure function from probe records to one score per sample, with
keyword-only hyper-parameters; higher score = more likely a member, always.
"""

from __future__ import annotations

import difflib
import inspect
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from lmaudit.errors import LmauditError


@dataclass(frozen=True)
class AttackSpec:
    name: str
    kind: str  # "ar" or "dlm"
    needs_reference: bool
    fn: Callable[..., np.ndarray]
    params: dict[str, Any] = field(default_factory=dict)
    summary: str = ""
    plan: Callable[[dict, int], Any] | None = None  # DLM: (params, budget) -> MaskPlan the attack reads
    direction: str = "higher = member"
    needs_shadows: bool = False  # reads shadow models' statistics (LiRA, RMIA)
    # a sample's score depends on its own statistics only, so a set can be scored shard by shard
    per_sample: bool = True

    def __call__(self, stats, *, reference=None, shadows=None, **params) -> np.ndarray:
        unknown = set(params) - set(self.params)
        if unknown:
            raise LmauditError(
                f"attack '{self.name}' has no parameter(s) {', '.join(sorted(unknown))}",
                hint=f"its parameters are: {', '.join(self.params) or 'none'}",
            )
        if self.needs_reference:
            has_ref = stats.has_reference if self.kind == "dlm" else reference is not None
            if not has_ref:
                raise LmauditError(f"attack '{self.name}' needs a reference model", hint="pass --reference DIR")
        if self.needs_shadows:
            if shadows is None:
                raise LmauditError(f"attack '{self.name}' needs shadow models", hint="pass --shadows DIR "
                                   "(trained with 'lmaudit shadows')")
            scores = self.fn(stats, shadows, **params)
        elif self.needs_reference and self.kind == "ar":
            scores = self.fn(stats, reference, **params)
        else:
            scores = self.fn(stats, **params)
        return np.asarray(scores, dtype=np.float64)

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": self.kind,
            "needs_reference": self.needs_reference,
            "needs_shadows": self.needs_shadows,
            "direction": self.direction,
            "params": dict(self.params),
            "summary": self.summary,
        }


_REGISTRY: dict[tuple[str, str], AttackSpec] = {}


def register_attack(name: str, *, kind: str, needs_reference: bool = False, plan=None, needs_shadows: bool = False,
                    per_sample: bool = True):
    """Decorator registering ``fn`` as attack ``name`` for models of ``kind``.

    Default parameters are read from the function's keyword-only arguments; the
    summary from the first line of its docstring. Duplicate names are rejected.
    A DLM attack names the mask plan it reads: ``plan(params, budget) -> MaskPlan``.
    ``per_sample=False`` declares that a score also depends on the other samples of
    the set (e.g. a variance pooled over the set): such an attack is scored on the
    whole set, never shard by shard.
    """
    if kind == "dlm" and plan is None:
        raise ValueError(f"DLM attack '{name}' must declare its mask plan")
    if kind not in ("ar", "dlm"):
        raise ValueError(f"kind must be 'ar' or 'dlm', got {kind!r}")

    def wrap(fn: Callable[..., np.ndarray]) -> Callable[..., np.ndarray]:
        if (kind, name) in _REGISTRY:
            raise ValueError(f"attack '{name}' ({kind}) is already registered")
        sig = inspect.signature(fn)
        params = {
            p.name: p.default
            for p in sig.parameters.values()
            if p.kind is inspect.Parameter.KEYWORD_ONLY and p.default is not inspect.Parameter.empty
        }
        summary = (inspect.getdoc(fn) or "").split("\n", 1)[0]
        _REGISTRY[(kind, name)] = AttackSpec(name, kind, needs_reference, fn, params, summary, plan=plan,
                                             needs_shadows=needs_shadows, per_sample=per_sample)
        return fn

    return wrap


def list_attacks(kind: str | None = None) -> list[AttackSpec]:
    _load_builtin()
    return [s for (k, _), s in sorted(_REGISTRY.items()) if kind is None or k == kind]


def get_attack(name: str, kind: str) -> AttackSpec:
    _load_builtin()
    spec = _REGISTRY.get((kind, name))
    if spec is None:
        names = [n for (k, n) in _REGISTRY if k == kind]
        close = difflib.get_close_matches(name, names, n=3)
        hint = f"did you mean {', '.join(close)}?" if close else f"available {kind} attacks: {', '.join(sorted(names))}"
        raise LmauditError(f"unknown {kind} attack '{name}'", hint=hint)
    return spec


def _load_builtin() -> None:
    import lmaudit.attacks  # noqa: F401  (registers the built-in attacks)
