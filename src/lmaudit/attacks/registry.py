"""The attack registry: every attack registers itself with its metadata.

An attack is a pure function ``fn(records, **params)`` from probe records to one
score per sample, with keyword-only hyper-parameters; higher score = more likely a
member, always. Statistics of a reference model or of shadow models travel inside
the records (``ARStats.reference``, ``ARStats.shadows``, ``MaskedStats.ref_*``).
A hyper-parameter annotated ``Literal[...]`` (e.g. ``variant: Literal["a", "b"] = "a"``)
takes only those values, of the same type (a :func:`~lmaudit.settings.one_of` check): the registry
rejects any other before a probe runs. Every other hyper-parameter is a declared setting too
(:func:`lmaudit.settings.setting`'s checks): the attack declares its constraints
(``checks={"shots": integer(1)}``), and one it does not declare must at least have
its default's type (an integer, a number, true or false); a bad value is a
:class:`~lmaudit.errors.SettingError` naming ``attack.key`` (``--param attack.key`` on the command line).
Each attack declares the probe it reads (:mod:`lmaudit.probes.requests`), so a run
groups attacks by probe and computes each probe once.
"""

from __future__ import annotations

import ast
import difflib
import functools
import inspect
import re
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from lmaudit.errors import LmauditError, SettingError
from lmaudit.probes.requests import ar_probe
from lmaudit.settings import boolean, number, one_of, refusing, table
from lmaudit.utils import import_submodules

KINDS = ("ar", "dlm")
# What an attack needs of the audited model, least first: each level includes the ones before it. A model on disk
# gives every level; a served model gives what its endpoint returns (an OpenAI-compatible completions endpoint with
# echo and logprobs: "top_k", with k its cap); a chat endpoint without prompt log-probabilities only "generation".
ACCESS = {
    "generation": "sampled text only",
    "logprob": "each token's log-probability given the text before it",
    "top_k": "also the largest log-probabilities at each position (the top-1 among them)",
    "distribution": "the whole next-token distribution at each position (its mean and spread over the vocabulary)",
    "weights": "the model itself: gradients, masked forwards",
}


@dataclass(frozen=True)
class AttackSpec:
    name: str
    kind: str  # "ar" or "dlm"
    needs_reference: bool
    fn: Callable[..., np.ndarray]
    params: dict[str, Any] = field(default_factory=dict)
    summary: str = ""
    probe: Callable[[dict, int], Any] = ar_probe  # (params, budget) -> the probe request the attack reads
    direction: str = "higher = member"
    needs_shadows: bool = False  # reads shadow models' statistics (LiRA, RMIA)
    # a sample's score depends on its own statistics only, so a set can be scored shard by shard
    per_sample: bool = True
    # the per-token values a report plots for a typical member and non-member (e.g. Q-Skew's Δ), or None
    example: Callable[[Any], np.ndarray] | None = None
    # the values a parameter may take, for those annotated Literal[...] (e.g. a ``variant``)
    choices: dict[str, tuple] = field(default_factory=dict)
    # run only when named or given parameters (it changes the run: ReCaLL holds out non-members for its prefix)
    opt_in: str = ""  # why, said when every attack runs and it is left out
    # each parameter's constraint, check(value, name, flag) as a setting's (declared, or its default's type)
    checks: dict[str, Callable] = field(default_factory=dict)
    # what it needs of the audited model (a key of ACCESS); a reference's or shadows' statistics are not counted
    access: str = "logprob"

    def check(self, params: dict) -> None:
        """Reject unknown parameter names, values outside a parameter's choices and values that fail its declared
        check (before any probe runs)."""
        unknown = set(params) - set(self.params)
        if unknown:
            raise LmauditError(
                f"attack '{self.name}' has no parameter(s) {', '.join(sorted(unknown))}",
                hint=f"its parameters are: {', '.join(self.params) or 'none'}",
            )
        for key, check in self.checks.items():
            if key in params:
                check(params[key], f"{self.name}.{key}", f"--param {self.name}.{key}")

    def __call__(self, records, **params) -> np.ndarray:
        self.check(params)
        if self.needs_reference and not records.has_reference:
            raise LmauditError(f"attack '{self.name}' needs a reference model", hint="pass --reference DIR")
        if self.needs_shadows and getattr(records, "shadows", None) is None:
            raise LmauditError(f"attack '{self.name}' needs shadow models",
                               hint="pass --shadows DIR (trained with 'lmaudit shadows')")
        return np.asarray(self.fn(records, **params), dtype=np.float64)

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": self.kind,
            "needs_reference": self.needs_reference,
            "needs_shadows": self.needs_shadows,
            "access": self.access,
            "direction": self.direction,
            "params": dict(self.params),
            "choices": {k: list(v) for k, v in self.choices.items()},
            "summary": self.summary,
        }


_REGISTRY: dict[tuple[str, str], AttackSpec] = {}


def _hyper_parameters(name: str, fn: Callable) -> dict[str, Any]:
    """Defaults of ``fn``'s keyword-only parameters; anything but (records, *, k=default, ...) is an error."""
    params = list(inspect.signature(fn).parameters.values())
    if not params or params[0].kind not in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD):
        raise ValueError(f"attack '{name}': the first parameter must be the probe records")
    out = {}
    for p in params[1:]:
        if p.kind is not inspect.Parameter.KEYWORD_ONLY:
            raise ValueError(f"attack '{name}': hyper-parameter '{p.name}' must be keyword-only "
                             "(write fn(records, *, {p.name}=...))")
        if p.default is inspect.Parameter.empty:
            raise ValueError(f"attack '{name}': hyper-parameter '{p.name}' needs a default")
        out[p.name] = p.default
    return out


def _choices(name: str, fn: Callable) -> dict[str, tuple]:
    """The allowed values of ``fn``'s hyper-parameters annotated ``Literal[...]``; each default must be one."""
    out = {}
    for p in list(inspect.signature(fn).parameters.values())[1:]:
        ann = p.annotation
        if isinstance(ann, str):  # a postponed annotation: read a Literal's values without evaluating the rest
            match = re.fullmatch(r"(?:typing\.)?Literal\[(.*)\]", ann.strip(), flags=re.S)
            if match is None:
                continue
            out[p.name] = tuple(ast.literal_eval(f"({match.group(1)},)"))
        elif typing.get_origin(ann) is Literal:
            out[p.name] = typing.get_args(ann)
        if p.name in out and p.default not in out[p.name]:
            raise ValueError(f"attack '{name}': the default of '{p.name}' is not one of {out[p.name]}")
    return out


def _checks(name: str, params: dict[str, Any], choices: dict[str, tuple], declared: dict[str, Callable]) -> dict:
    """Each parameter's check: the declared one, else one of its ``choices`` (a ``Literal``), else its default's
    type."""
    unknown = set(declared) - set(params)
    if unknown:
        raise ValueError(f"attack '{name}': checks for parameter(s) it does not have: {', '.join(sorted(unknown))}")
    out = {}
    for key, default in params.items():
        if key in declared:
            out[key] = declared[key]
        elif key in choices:
            out[key] = one_of(choices[key], listed=True, exact=True)
        elif isinstance(default, bool):
            out[key] = boolean()
        elif isinstance(default, (int, float)):
            out[key] = number(integral=isinstance(default, int))
    for key, check in out.items():  # a default that fails its own check is the attack's error
        check(params[key], f"{name}.{key}", None)
    return out


def register_attack(name: str, *, kind: str, needs_reference: bool = False, probe=None, needs_shadows: bool = False,
                    per_sample: bool = True, example=None, opt_in: str = "", checks: dict[str, Callable] | None = None,
                    access: str | None = None):
    """Decorator registering ``fn(records, *, ...)`` as attack ``name`` for models of ``kind``.

    Default parameters are read from the function's keyword-only arguments (any
    other parameter after the records is rejected); the summary from the first line
    of its docstring. Duplicate names are rejected. ``probe(params, budget)``
    returns the probe request the attack reads (AR attacks: the single forward
    pass, the default; DLM attacks must name their mask plan). ``per_sample=False``
    declares that a score also depends on the other samples of the set (e.g. a
    variance pooled over the set): such an attack is scored on the whole set, never
    shard by shard. ``example(records of one sample)`` returns the per-token values
    a report shows for a typical member and non-member (its docstring's first line
    names them). ``opt_in`` (the reason) makes an attack run only when named or given
    parameters, never as one of "every attack". ``checks`` declares parameters' constraints, as settings declare
    theirs (``{"shots": integer(1)}``, :mod:`lmaudit.utils`); a parameter without one must have its default's type.
    ``access`` (a key of :data:`ACCESS`) is what the attack needs of the audited model: by default each token's
    log-probability for an AR attack, the model itself for a DLM attack (masked forwards).
    """
    access = access or ("logprob" if kind == "ar" else "weights")
    if access not in ACCESS:
        raise ValueError(f"attack '{name}': access must be one of {', '.join(ACCESS)}, got {access!r}")
    if kind not in KINDS:
        raise ValueError(f"kind must be 'ar' or 'dlm', got {kind!r}")
    if kind == "dlm" and probe is None:
        raise ValueError(f"DLM attack '{name}' must declare its probe (a mask plan)")

    def wrap(fn: Callable[..., np.ndarray]) -> Callable[..., np.ndarray]:
        if (kind, name) in _REGISTRY:
            raise ValueError(f"attack '{name}' ({kind}) is already registered")
        params = _hyper_parameters(name, fn)
        summary = (inspect.getdoc(fn) or "").split("\n", 1)[0]
        choices = _choices(name, fn)
        spec = AttackSpec(name, kind, needs_reference, fn, params, summary, probe=probe or ar_probe,
                          needs_shadows=needs_shadows, per_sample=per_sample, example=example, choices=choices,
                          opt_in=opt_in, checks=_checks(name, params, choices, checks or {}), access=access)
        _REGISTRY[(kind, name)] = spec

        @functools.wraps(fn)
        def checked(records, **given):  # called directly, it checks its parameters as a run does (one way)
            spec.check(given)
            return fn(records, **given)

        return checked

    return wrap


def list_attacks(kind: str | None = None) -> list[AttackSpec]:
    _discover()
    return [s for (k, _), s in sorted(_REGISTRY.items()) if kind is None or k == kind]


def get_attack(name: str, kind: str) -> AttackSpec:
    _discover()
    spec = _REGISTRY.get((kind, name))
    if spec is None:
        names = [n for (k, n) in _REGISTRY if k == kind]
        close = difflib.get_close_matches(name, names, n=3)
        hint = f"did you mean {', '.join(close)}?" if close else f"available {kind} attacks: {', '.join(sorted(names))}"
        raise LmauditError(f"unknown {kind} attack '{name}'", hint=hint)
    return spec


def _check_params(attack: str, given: dict, name: str, flag: str | None) -> None:
    """``given`` parameters of ``attack`` pass its declared checks (either kind's, for an attack of both kinds); the
    error names ``name.parameter``. A name that is no attack is left to the run (it knows the kind)."""
    errors = []
    for spec in (s for s in list_attacks() if s.name == attack):
        try:
            return spec.check(given)
        except LmauditError as exc:
            errors.append(exc)
    first = next((e for e in errors if isinstance(e, SettingError)), errors[0] if errors else None)
    if isinstance(first, SettingError):
        key = first.field.removeprefix(f"{attack}.")
        raise SettingError(f"{name}.{key}", first.template, flag=f"{flag or name}.{key}",
                           hint=first.hint_template) from None
    if first is not None:
        raise SettingError(name, first.message.replace("{", "{{").replace("}", "}}"), flag=flag or name,
                           hint=first.hint) from None


def attack_params(value, name: str, flag: str | None) -> None:
    """A declared check of a table ``{attack: {parameter: value}}`` (an experiment file's ``[params]``): each
    attack's parameters pass its declared checks, the error naming ``name.attack.parameter``."""
    table()(value, name, flag)
    for attack, given in value.items():
        table()(given, f"{name}.{attack}", f"{flag or name}.{attack}")
        _check_params(attack, given, f"{name}.{attack}", f"{flag or name}.{attack}")


def attack_variants(value, name: str, flag: str | None) -> None:
    """A declared check of a table ``{label: {attack = NAME, parameter = value, ...}}`` (an ablation's variants):
    each variant's parameters pass its attack's declared checks, the error naming ``name.label.parameter``."""
    table()(value, name, flag)
    for label, variant in value.items():
        table()(variant, f"{name}.{label}", f"{flag or name}.{label}")
        if isinstance(variant.get("attack"), str):
            params = {k: v for k, v in variant.items() if k != "attack"}
            _check_params(variant["attack"], params, f"{name}.{label}", f"{flag or name}.{label}")


refusing(attack_params, 3, {"loss": 3}, {"recall": {"shots": 0}}, {"loss": {"variant": "bogus"}})
refusing(attack_variants, 3, {"v": 3}, {"v": {"attack": "loss", "variant": "bogus"}})


def _discover() -> None:
    """Import every module of :mod:`lmaudit.attacks` once, so that their attacks register themselves."""
    import_submodules("lmaudit.attacks")
