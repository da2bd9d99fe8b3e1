"""Which attacks a run scores: the ones named (or every default one that can run), cut to what the model gives.

One rule for every job that probes for attacks (a membership run, the scores of one set, the probe records):
the attacks of the model's kind, those that need a reference or shadow models only when they are given, opt-in
ones only when named or given parameters; then those the model's access allows (:data:`ACCESS`), a served model's
distribution statistics approximated from its top-k log-probabilities. An attack the user named that cannot run
is an error; a default one is skipped with the reason. Parameters for an attack not run are an error, never
ignored.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from lmaudit.attacks.registry import ACCESS, AttackSpec, get_attack, list_attacks
from lmaudit.errors import LmauditError
from lmaudit.progress import info

APPROXIMATED = {"top_k": "distribution"}  # an access level, and the one above it its statistics approximate


@dataclass(frozen=True)
class Selection:
    """The attacks a run scores (``specs``, each with its ``params`` over its defaults), those beyond the model's
    access with the reason (``skipped``) and those computed approximately (``approximate``)."""

    specs: list[AttackSpec]
    params: dict[str, dict]
    skipped: dict[str, str] = field(default_factory=dict)
    approximate: list[str] = field(default_factory=list)


def select_attacks(names: list[str] | None, kind: str, *, access: str = "weights", has_reference: bool = False,
                   has_shadows: bool = False, params: dict | None = None) -> Selection:
    """The :class:`Selection` of ``names`` (None: every default attack of ``kind`` that can run) for a model that
    gives ``access`` (a key of :data:`ACCESS`), with ``params`` ({attack: {key: value}}) over the defaults."""
    params = params or {}
    specs = _by_kind(names, kind, has_reference, has_shadows, params)
    specs, skipped, approximate = by_access(specs, access, named=names is not None)
    unknown = set(params) - {s.name for s in specs}
    if unknown:
        raise LmauditError(f"parameters given for attack(s) not run: {', '.join(sorted(unknown))}",
                           hint="name the attack among those to run, or drop its parameters")
    merged = {s.name: {**s.params, **params.get(s.name, {})} for s in specs}
    return Selection(specs, merged, skipped, approximate)


def _by_kind(names: list[str] | None, kind: str, has_reference: bool, has_shadows: bool,
             params: dict) -> list[AttackSpec]:
    if names is not None:
        specs = [get_attack(n, kind) for n in names]
        for needs, has, what, option in (("needs_reference", has_reference, "a reference model", "reference"),
                                         ("needs_shadows", has_shadows, "shadow models", "shadows")):
            missing = [s.name for s in specs if getattr(s, needs) and not has]
            if missing:
                raise LmauditError(f"attack(s) {', '.join(missing)} need {what}", hint=f"pass {{{option}}} DIR",
                                   options=(option,))
        return specs
    every = list_attacks(kind)
    for s in every:
        if s.opt_in and s.name not in params:
            info(f"[dim]skipping {s.name} (opt-in: {s.opt_in}; name it in the attacks to run it)[/dim]")
    for what, skipped in (("--reference", [s.name for s in every if s.needs_reference and not has_reference]),
                          ("--shadows", [s.name for s in every if s.needs_shadows and not has_shadows])):
        if skipped:
            info(f"[dim]skipping {', '.join(skipped)} (needs {what})[/dim]")
    return [s for s in every if (has_reference or not s.needs_reference) and (has_shadows or not s.needs_shadows)
            and (not s.opt_in or s.name in params)]


def by_access(specs, access: str, named: bool) -> tuple[list, dict, list[str]]:
    """(the attacks ``access`` runs, {attack: why not} for the others, the names of those it runs approximately);
    an attack named by the user (``named``) that cannot run is an error."""
    order = list(ACCESS)
    runs, skipped, approx = [], {}, []
    for s in specs:
        if order.index(s.access) <= order.index(access):
            runs.append(s)
        elif APPROXIMATED.get(access) == s.access:
            runs.append(s)
            approx.append(s.name)
        else:
            skipped[s.name] = f"needs {s.access} access ({ACCESS[s.access]}); the model gives {access}"
    if named and skipped:
        name, why = next(iter(skipped.items()))
        raise LmauditError(f"attack {name} cannot run on this model: it {why}",
                           hint="audit the model's weights on disk, or leave the attack out")
    for name, why in skipped.items():
        info(f"[dim]skipping {name} ({why})[/dim]")
    if not runs:
        able = [s.name for s in list_attacks("ar") if s.access == access]
        raise LmauditError(f"no chosen attack can run on this model: it gives {access} access ({ACCESS[access]})",
                           hint=f"name one that needs no more: {', '.join(able)}" if able else None)
    return runs, skipped, approx
