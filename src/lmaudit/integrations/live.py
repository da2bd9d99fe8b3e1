"""A membership audit of a model while it trains, which leaves the training exactly as it was.

:class:`LiveAudit` scores a sample of training texts against held-out texts (and, optionally, inserted canaries
against decoys never inserted) with :func:`lmaudit.mia` on the model in memory, records each evaluation in its
``history`` and optionally writes each as a results folder. :func:`untouched` is what makes it safe inside a training
loop: during the audit the model is in eval mode with autograd off, and afterwards every module's training flag,
every parameter's ``requires_grad``, every tensor's device and every random state (Python's ``random``, numpy's
global generator, torch's CPU generator and those of every CUDA device) are as they were, so the steps that follow
compute what they would have computed without the audit. :func:`plot_history` draws AUC against steps.

The model's weights change between evaluations, so no probe is cached (``use_cache=False``) and the handle carries
no fingerprint; the shard work runs in this process (a Ray worker would reload the weights from disk).
"""

from __future__ import annotations

import difflib
import random
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import torch
from matplotlib.figure import Figure

from lmaudit.api.membership import RunConfig, mia
from lmaudit.attacks import list_attacks
from lmaudit.data.given import texts_of
from lmaudit.data.loaders import TextSet, load_texts
from lmaudit.errors import LmauditError, SettingError
from lmaudit.models.adapters import network_handle
from lmaudit.privacy.canaries import DECOYS, TRAIN
from lmaudit.progress import is_quiet, set_quiet
from lmaudit.utils import metric_name, write_json_atomic

DEFAULT_ATTACKS = ("loss", "zlib", "min_k")
HISTORY = "history.json"  # in out_dir: every evaluation's step and metrics, rewritten after each one
_PALETTE = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#7f7f7f"]


def rng_states() -> dict:
    """Every random state an audit could draw from: Python's, numpy's global one, torch's CPU generator and, once
    CUDA is initialised, every CUDA device's (MPS's too where it exists)."""
    states = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        states["cuda"] = torch.cuda.get_rng_state_all()
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        states["mps"] = torch.mps.get_rng_state()
    return states


def set_rng_states(states: dict) -> None:
    """Put back what :func:`rng_states` returned."""
    random.setstate(states["python"])
    np.random.set_state(states["numpy"])
    torch.set_rng_state(states["torch"])
    if "cuda" in states:
        torch.cuda.set_rng_state_all(states["cuda"])
    if "mps" in states:
        torch.mps.set_rng_state(states["mps"])


def _tensors(model: torch.nn.Module) -> Iterator[torch.Tensor]:
    for module in model.modules():
        yield from (t for t in module._parameters.values() if t is not None)
        yield from (t for t in module._buffers.values() if t is not None)


@contextmanager
def untouched(model: torch.nn.Module) -> Iterator[torch.nn.Module]:
    """Inside: ``model`` in eval mode under ``torch.no_grad()``. After (error or not): every module's training flag,
    every parameter's ``requires_grad``, every parameter's and buffer's device and every random state
    (:func:`rng_states`) as they were before. The weights themselves are never written by an audit."""
    modes = [(m, m.training) for m in model.modules()]
    flags = [(p, p.requires_grad) for p in model.parameters()]
    devices = [(t, t.device) for t in _tensors(model)]
    states = rng_states()
    try:
        model.eval()
        with torch.no_grad():
            yield model
    finally:
        set_rng_states(states)
        for module, training in modes:
            module.training = training
        for p, flag in flags:
            p.requires_grad_(flag)
        for t, device in devices:
            if t.device != device:
                t.data = t.data.to(device)


@contextmanager
def _quiet() -> Iterator[None]:
    """No progress bars or informational lines of lmaudit's inside a training loop's own output."""
    was = is_quiet()
    set_quiet(True)
    try:
        yield
    finally:
        set_quiet(was)


def _text_set(texts, name: str) -> TextSet:
    """A non-empty text set from a list of strings, a data file or a :class:`TextSet`."""
    found = texts_of(texts, name=name)
    if not len(found):
        raise SettingError(name, "{name} is empty: the audit needs texts on both sides",
                           hint="give a few dozen texts or more")
    return found


def canary_sets(canaries, decoys) -> tuple[TextSet, TextSet] | None:
    """(inserted canaries, decoys never inserted): two lists, files or text sets; or ``canaries`` a canary folder
    (``lmaudit corpus canaries``) whose ``train_canaries.jsonl`` and ``decoys.jsonl`` are read."""
    if isinstance(canaries, (str, Path)) and Path(canaries).is_dir() and decoys is None:
        folder = Path(canaries)
        return load_texts(folder / TRAIN), load_texts(folder / DECOYS)
    if (canaries is None) != (decoys is None):
        given, other = ("canaries", "decoys") if decoys is None else ("decoys", "canaries")
        raise SettingError(given, "{name} needs {" + other + "}: canaries are scored against decoys never inserted",
                           also=(other,))
    return None if canaries is None else (_text_set(canaries, "canaries"), _text_set(decoys, "decoys"))


def check_attack_names(names) -> list[str]:
    """``names`` as a list, each an attack some model kind has (which one the model is, the audit learns later)."""
    known = {s.name for s in list_attacks()}
    for name in names:
        if name not in known:
            close = difflib.get_close_matches(str(name), sorted(known), n=3)
            raise SettingError("attacks", f"{{name}} names an unknown attack {name!r}",
                               hint=f"did you mean {', '.join(close)}?" if close else "see lmaudit attacks")
    return list(names)


def missing_from_training(sets: dict[str, TextSet], train_texts) -> list[str]:
    """One line per set whose texts are not where they should be: members (and canaries) absent from
    ``train_texts``, non-members (and decoys) present in it. Texts compare whole, spaces at either end ignored."""
    trained = {str(t).strip() for t in train_texts}
    lines = []
    for name, textset in sets.items():
        inside = name in ("members", "canaries")
        wrong = [t for t in textset.texts if (t.strip() in trained) != inside]
        if wrong:
            where = "are not among train_texts" if inside else "are among train_texts (trained on)"
            lines.append(f"{len(wrong)} of {len(textset)} {name} {where}, e.g. {wrong[0][:60]!r}")
    return lines


@dataclass
class Evaluation:
    """One audit of the history: the step and epoch it ran after, the metrics logged, the folders written."""

    step: int
    epoch: float | None
    metrics: dict[str, float]
    folders: list[str] = field(default_factory=list)


class LiveAudit:
    """Membership AUC (and TPR at 1% FPR, when the non-members resolve it) per attack, on a model in memory.

    ``members``: texts the model trains on; ``nonmembers``: texts drawn alike that it never sees (each a list of
    strings, a data file or a :class:`~lmaudit.data.loaders.TextSet`). ``canaries``/``decoys``: inserted canaries
    and decoys never inserted, or ``canaries`` a canary folder. ``attacks`` (default loss, zlib, min_k) and
    ``config`` (a :class:`~lmaudit.RunConfig`: batch size, parameters, bootstrap; default 200 resamples, no blind
    baselines, which do not change while the model trains) are used for every evaluation; caching is always off.
    ``out_dir``: each evaluation is also written as a membership-inference results folder ``step-NNNNNN``
    (``step-NNNNNN-canaries``), and ``history.json`` lists them all. ``stop_above_auc``: :meth:`stop_reason` says
    why training should stop once any AUC logged exceeds it. ``train_texts``: the training texts, to warn of
    members missing from them (and non-members found in them). Metric names, as MLflow gets them from the command line
    too (:func:`~lmaudit.utils.metric_name`): ``PREFIX/ATTACK/auc``, ``PREFIX/ATTACK/tpr_at_1pct_fpr``, and
    ``PREFIX/canaries/ATTACK/...``.
    """

    def __init__(self, members, nonmembers, *, attacks=None, canaries=None, decoys=None,
                 config: RunConfig | None = None, out_dir: str | Path | None = None,
                 stop_above_auc: float | None = None, train_texts=None, prefix: str = "lmaudit") -> None:
        config = config or RunConfig(n_bootstrap=200, blind=False)
        # the defaults are cut to those the model's kind has once the model is seen (a DLM has no zlib)
        self.defaulted = attacks is None and not config.attacks
        names = check_attack_names(attacks if attacks is not None else config.attacks or DEFAULT_ATTACKS)
        self.config = replace(config, attacks=names, use_cache=False)
        number = isinstance(stop_above_auc, (int, float)) and not isinstance(stop_above_auc, bool)
        if stop_above_auc is not None and not (number and 0 <= stop_above_auc < 1):
            raise SettingError("stop_above_auc", f"{{name}} must be a number in [0, 1), got {stop_above_auc!r}",
                               hint="an AUC above it stops training; 0.5 is chance")
        self.stop_above_auc = stop_above_auc
        self.sets = {"members": _text_set(members, "members"), "nonmembers": _text_set(nonmembers, "nonmembers")}
        pair = canary_sets(canaries, decoys)
        if pair is not None:
            self.sets["canaries"], self.sets["decoys"] = pair
        self.out_dir = None if out_dir is None else Path(out_dir)
        self.prefix = prefix
        self.history: list[Evaluation] = []
        self.notes = [] if train_texts is None else missing_from_training(self.sets, train_texts)

    def evaluate(self, model: torch.nn.Module, tokenizer, step: int, epoch: float | None = None, *,
                 write: bool = True) -> Evaluation:
        """Audit ``model`` as it is after ``step``, untouched (:func:`untouched`); record and return the evaluation.
        ``write=False`` writes no folder (another process of a distributed run writes them). Errors propagate."""
        if tokenizer is None:
            raise LmauditError("no tokenizer to tokenise the audit's texts",
                               hint="pass tokenizer= to the callback (or processing_class= to the Trainer)")
        pairs = {"": ("members", "nonmembers")}
        if "canaries" in self.sets:
            pairs["canaries"] = ("canaries", "decoys")
        metrics, folders = {}, []
        with untouched(model), _quiet():
            # what results.json names: not the folder the weights came from (they have changed since), nor a
            # fingerprint of weights that change every step (the handle has none)
            name = getattr(model, "name_or_path", "") or type(model).__name__
            handle = network_handle(model, tokenizer, path=f"{name} (in training, after step {step})")
            config = self.config
            if self.defaulted:
                has = {s.name for s in list_attacks(handle.kind)}
                config = replace(config, attacks=[a for a in config.attacks if a in has])
            for group, (inside, outside) in pairs.items():
                result = mia(handle, self.sets[inside], self.sets[outside], config=config, backend="local")
                head = "/".join(p for p in (self.prefix, group) if p)
                for attack, m in result.attacks.items():
                    metrics[metric_name(head, attack, "auc")] = float(m["auc"])
                    if m.get("tpr@1%fpr") is not None:
                        metrics[metric_name(head, attack, "tpr@1%fpr")] = float(m["tpr@1%fpr"])
                if write and self.out_dir is not None:
                    folder = self.out_dir / "-".join(p for p in (f"step-{step:06d}", group) if p)
                    result.write(folder)
                    folders.append(str(folder))
        evaluation = Evaluation(int(step), None if epoch is None else float(epoch), metrics, folders)
        if write and self.out_dir is not None:
            write_json_atomic(self.out_dir / HISTORY, {"stop_above_auc": self.stop_above_auc,
                                                       "evaluations": [vars(e) for e in [*self.history, evaluation]]})
        self.history.append(evaluation)  # once every file is written: an evaluation that failed is not kept
        return evaluation

    def stop_reason(self, evaluation: Evaluation) -> str | None:
        """Why training should stop after ``evaluation`` (its largest AUC above ``stop_above_auc``), else None."""
        if self.stop_above_auc is None:
            return None
        aucs = {k: v for k, v in evaluation.metrics.items() if k.endswith("/auc")}
        name = max(aucs, key=aucs.get, default=None)
        if name is None or not aucs[name] > self.stop_above_auc:
            return None
        return f"{name} = {aucs[name]:.3f} exceeds stop_above_auc = {self.stop_above_auc} after step {evaluation.step}"

    def plot(self, path: str | Path) -> Path:
        """AUC against steps, one line per attack (canaries dashed): :func:`plot_history` of this history."""
        return plot_history(self.history, path, threshold=self.stop_above_auc, prefix=self.prefix)


def plot_history(history, path: str | Path, *, threshold: float | None = None, prefix: str = "lmaudit") -> Path:
    """A PNG of every ``…/auc`` metric of ``history`` (:class:`Evaluation` objects or their dicts, as
    ``history.json`` holds them) against the training step: members solid, canaries dashed, chance (0.5) dotted,
    ``threshold`` a red line. Returns the path written."""
    rows = [e if isinstance(e, Evaluation) else Evaluation(**e) for e in history]
    if not rows:
        raise LmauditError("no evaluation to plot", hint="the history is empty: did training reach an audit?")
    names = list(dict.fromkeys(k for e in rows for k in e.metrics if k.endswith("/auc")))
    attacks = list(dict.fromkeys(k.split("/")[-2] for k in names))
    fig = Figure(figsize=(6.4, 4.0))
    ax = fig.subplots()
    for name in names:
        points = [(e.step, e.metrics[name]) for e in rows if name in e.metrics]
        canary = name.startswith(f"{prefix}/canaries/")
        attack = name.split("/")[-2]
        ax.plot(*zip(*points), marker="o", markersize=3, linestyle="--" if canary else "-",
                color=_PALETTE[attacks.index(attack) % len(_PALETTE)],
                label=f"{attack} (canaries vs decoys)" if canary else attack)
    ax.axhline(0.5, color="#7f7f7f", linestyle=":", linewidth=1, label="chance")
    if threshold is not None:
        ax.axhline(threshold, color="#d62728", linewidth=1, label=f"stop above {threshold}")
    ax.set_xlabel("training step")
    ax.set_ylabel("membership AUC")
    ax.set_ylim(0.0, 1.0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=110)
    return path
