"""The experiment-type registry: each type is one module of :mod:`lmaudit.experiments.types`, found without a list.

A type module declares its keys (a dataclass on top of
:class:`~lmaudit.experiments.config.BaseConfig`), its runner
``run(workspace, cfg) -> payload`` and the builders of its tables and figures from
the record written to ``results.json``, and registers them with
:func:`register_experiment`. Adding a type is adding its module, its TOML file and
its test; :func:`load_experiment` checks a file against the schema of its type.
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lmaudit.errors import LmauditError, SettingError
from lmaudit.experiments.config import BaseConfig, check_keys, check_name, in_file
from lmaudit.models.kinds import adapted_from
from lmaudit.utils import import_submodules, read_toml

Table = tuple[str, list[str], list[list[str]]]  # (caption, header, rows of cells)
FigureSpec = tuple[str, str, bytes]  # (file stem, caption, PNG bytes)


def no_figures(record: dict) -> list[FigureSpec]:
    """The figure builder of a type that draws none."""
    return []


def fine_tuning_setting(exp: dict) -> str:
    """The usual setting line: the kind and preset fine-tuned (or the given model of a ``checkpoint`` run)."""
    if exp.get("model"):
        return f"model `{exp['model']}`."
    if exp.get("base"):  # a pretrained model, not a tiny preset
        how = f"LoRA rank {exp['lora']}" if exp.get("lora") else "every weight"
        made = (f"pretrained, adapted into a {exp['kind'].upper()} on {exp['adapt_tokens']:,} tokens"
                if adapted_from(exp['kind']) and exp.get("adapt_tokens") else "pretrained")
        return (f"{exp['kind']} `{exp['base']}` ({made}), {exp['mode']} fine-tuning ({how}, lr {exp['lr']:g}) "
                f"for {exp['epochs']} epochs.")
    return f"{exp['kind']} `{exp['preset']}`, {exp['mode']} fine-tuning for {exp['epochs']} epochs."


@dataclass(frozen=True)
class ExperimentType:
    """One experiment type: its name, its keys, its runner and its table and figure builders.

    ``arrays`` maps payload keys that hold ``{label: 1-D numbers}`` too large for
    ``results.json`` to an entry-name prefix: they are written to ``KEY.npz`` beside it
    (entries ``PREFIX + label``) and handed back to the builders when a folder is rebuilt.
    """

    name: str
    config: type[BaseConfig]
    run: Callable[[Any, BaseConfig], dict]
    tables: Callable[[dict], list[Table]]
    figures: Callable[[dict], list[FigureSpec]] = no_figures
    arrays: dict[str, str] = field(default_factory=dict)
    setting: Callable[[dict], str] = fine_tuning_setting  # table.md's line on how the models were made


_REGISTRY: dict[str, ExperimentType] = {}


def register_experiment(name: str, *, config: type[BaseConfig], run: Callable[[Any, BaseConfig], dict],
                        tables: Callable[[dict], list[Table]], figures: Callable[[dict], list[FigureSpec]] = no_figures,
                        arrays: dict[str, str] | None = None,
                        setting: Callable[[dict], str] | None = None) -> ExperimentType:
    """Register experiment type ``name`` (the ``type`` of its TOML files) and return it.

    Parameters
    ----------
    name : str
        The type's name; a duplicate is rejected.
    config : type
        A dataclass subclass of :class:`BaseConfig` adding the type's own keys (with defaults).
    run : callable
        ``run(workspace, cfg) -> payload``: the dict that ``results.json`` holds after the provenance.
    tables : callable
        ``tables(record) -> [(caption, header, rows)]`` from the record of ``results.json``; cells are strings.
    figures : callable, optional
        ``figures(record) -> [(file_stem, caption, png_bytes)]``.
    arrays : dict, optional
        Payload keys stored as ``KEY.npz`` instead of in ``results.json`` (see :class:`ExperimentType`).
    setting : callable, optional
        ``setting(experiment config dict) -> str``: ``table.md``'s line on how the models were made
        (default :func:`fine_tuning_setting`).
    """
    if name in _REGISTRY:
        raise ValueError(f"experiment type '{name}' is already registered")
    if not (dataclasses.is_dataclass(config) and issubclass(config, BaseConfig)):
        raise ValueError(f"experiment type '{name}': config must be a dataclass subclass of BaseConfig")
    spec = ExperimentType(name, config, run, tables, figures, dict(arrays or {}), setting or fine_tuning_setting)
    _REGISTRY[name] = spec
    return spec


def list_experiment_types() -> list[ExperimentType]:
    """Every registered experiment type, by name."""
    _discover()
    return [_REGISTRY[n] for n in sorted(_REGISTRY)]


def get_experiment_type(name: str) -> ExperimentType:
    """The experiment type ``name``; an unknown name is an error that suggests a close one."""
    _discover()
    if name not in _REGISTRY:
        close = difflib.get_close_matches(name, _REGISTRY, n=1)
        raise LmauditError(f"experiment type '{name}' is not one of {', '.join(sorted(_REGISTRY))}",
                           hint=f"did you mean '{close[0]}'?" if close else None)
    return _REGISTRY[name]


def load_experiment(path: str | Path) -> BaseConfig:
    """Read an experiment file into the config dataclass of its type.

    Raises :class:`LmauditError` naming the file for a missing ``name`` or ``type``, an
    unknown type, a key that is not in that type's schema, or a value of the wrong type; a value outside its
    declared constraint (``lr = -1``, ``seeds = []``) is a :class:`SettingError` naming the file and the key.
    """
    path = Path(path)
    raw = read_toml(path, "experiment file")
    for key in ("name", "type"):
        if key not in raw:
            raise LmauditError(f"{path}: missing key '{key}'")
        if not isinstance(raw[key], str):
            raise LmauditError(f"{path}: key '{key}' must be str, got {type(raw[key]).__name__}")
    check_name(raw["name"], str(path))
    try:
        spec = get_experiment_type(raw["type"])
    except LmauditError as exc:
        raise LmauditError(f"{path}: {exc.message}", hint=exc.hint) from None
    owners: dict[str, list[str]] = {}
    for other in list_experiment_types():
        for f in dataclasses.fields(other.config):
            owners.setdefault(f.name, []).append(other.name)
    check_keys(raw, spec.config, path, owners=owners)
    try:
        return spec.config(**raw)  # its declared constraints are checked here
    except SettingError as exc:
        raise in_file(exc, path) from None


def _discover() -> None:
    """Import every module of :mod:`lmaudit.experiments.types` once, so that their types register themselves."""
    import_submodules("lmaudit.experiments.types")
