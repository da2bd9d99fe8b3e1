"""What the experiment types share: the workspace of cached corpus, tokenizer, data and models, and MIA summaries."""

from __future__ import annotations

from dataclasses import fields, replace
from functools import cached_property
from pathlib import Path

import numpy as np

from lmaudit import api
from lmaudit.data.corpus import SOURCES, build_corpus, pydoc_corpus
from lmaudit.data.given import labelled_set
from lmaudit.data.instruct import instruction_set, perturb_words
from lmaudit.data.loaders import Record, TextSet
from lmaudit.data.pii import pii_corpus
from lmaudit.data.snapshot import embedded_hash
from lmaudit.errors import LmauditError
from lmaudit.experiments.config import BaseConfig
from lmaudit.models.build import corpus_tokenizer
from lmaudit.models.fingerprint import tokenizer_fingerprint
from lmaudit.models.gguf import local_model
from lmaudit.models.kinds import adapted_from
from lmaudit.models.loading import load_model
from lmaudit.progress import info
from lmaudit.runs.extract import ExtractConfig
from lmaudit.runs.mia import RunConfig
from lmaudit.seeds import seed_std

METRICS = ("auc", "tpr@10%fpr", "tpr@1%fpr")


class Workspace:
    """Corpus, tokenizer and cached models shared by an experiment's runs (the keys of :class:`BaseConfig`).

    ``source`` is where members and non-members come from: ``corpus`` (the docstring
    corpus' member/non-member pools, in the domain the base was pretrained on) or
    ``pydoc`` (:func:`~lmaudit.data.corpus.pydoc_corpus`, text the base never saw).
    The tokenizer and the base are always those of the docstring corpus.
    """

    def __init__(self, cfg: BaseConfig, *, source: str = "corpus") -> None:
        if source not in SOURCES:
            raise LmauditError(f"unknown data source '{source}'", hint=f"one of {', '.join(SOURCES)}")
        self.cfg = cfg
        self.source = source
        self._loaded: dict[tuple, object] = {}  # (folder, kind) → the loaded model
        self._parent: Workspace | None = None

    def cell(self, *, source: str | None = None, **keys) -> "Workspace":
        """A workspace with some of the configuration's ``keys`` replaced (e.g. ``lr``, ``epochs``, ``preset``,
        ``mode``) and optionally another data ``source``, sharing this one's corpus, tokenizer and loaded models.

        ``packages`` and ``vocab_size`` stay this workspace's: the corpus and tokenizer are built (once) here.
        """
        if {"packages", "vocab_size"} & set(keys):
            raise LmauditError("a cell of a workspace shares its corpus and tokenizer: packages and vocab_size stay")
        ws = Workspace(replace(self.cfg, **keys), source=source or self.source)
        ws._parent, ws._loaded = self, self._loaded
        return ws

    @cached_property
    def corpus(self):
        """The embedded corpus, built on first use (an experiment on given checkpoints and data never needs it); one
        that differs from the corpus the committed results were built from is said to, before anything trains."""
        if self._parent:
            return self._parent.corpus
        corpus = build_corpus(tuple(self.cfg.packages))
        if corpus.fingerprint != embedded_hash():
            info(f"corpus {corpus.fingerprint[:8]}… (packages {', '.join(self.cfg.packages)}) is not the embedded "
                 f"one the committed results were built from ({embedded_hash()[:8]}…): figures will differ from "
                 "results/")
        return corpus

    @cached_property
    def tokenizer(self):
        return self._parent.tokenizer if self._parent else corpus_tokenizer(self.corpus, vocab_size=self.cfg.vocab_size)

    def corpus_hash(self) -> str | None:
        """The content hash of the corpus when this workspace (or a cell of it) used it, else None."""
        return self.__dict__["corpus"].manifest["content_hash"] if "corpus" in self.__dict__ else None

    def tokenizer_hash(self) -> str | None:
        """The content hash of the corpus' tokenizer when this workspace (or a cell of it) used it, else None."""
        return tokenizer_fingerprint(self.__dict__["tokenizer"]) if "tokenizer" in self.__dict__ else None

    def base(self, seed: int = 0, kind: str | None = None) -> Path:
        """The pretrained base: an AR model, or for a DLM that AR model adapted with the diffusion objective.

        With ``base`` set, that pretrained AR model (imported once when it is a GGUF file or a name), whatever
        the seed: a real model is not pretrained again; for a DLM, that model adapted once (``adapt_tokens``,
        ``adapt_lr``, ``adapt_block``, ``adapt_batch_size``; its own tokenizer with a mask token added).
        """
        c = self.cfg
        kind = kind or c.kind
        source = adapted_from(kind)
        if c.base:
            if source is None:  # the pretrained model itself
                return local_model(c.base)
            # a diffusion LM adapted from the pretrained model (Dream-style), with its own tokenizer
            return self.pretrained(kind=kind, tokens=c.adapt_tokens, seed=0, init_from=self.base(seed, source),
                                   lr=c.adapt_lr or None, block=c.adapt_block or None,
                                   batch_size=c.adapt_batch_size or None)
        if source is None:  # pretrained from scratch on the corpus
            return self.pretrained(kind=kind, tokens=c.pretrain_tokens, seed=seed)
        return self.pretrained(kind=kind, tokens=c.adapt_tokens, seed=seed, init_from=self.base(seed, source))

    def pretrained(self, *, kind: str, tokens: int, seed: int, **settings) -> Path:
        """A model of ``kind`` pretrained on this workspace's corpus and tokenizer (``preset``), through the interface
        into the model cache (:func:`lmaudit.api.pretrain`; ``settings``: its other keywords)."""
        return api.pretrain(kind=kind, preset=self.cfg.preset, tokens=tokens, seed=seed, packages=self.corpus,
                            tokenizer=self.tokenizer, **settings).path

    def data(self, seed: int) -> tuple[TextSet, TextSet]:
        """(members, non-members) of one seed: corpus passages (``dft``) or instruction pairs (``ift``).

        With the ``pydoc`` source, passages of the language reference (``dft`` only: its
        paragraphs have no summary line to build an instruction from).
        """
        c = self.cfg
        if self.source == "pydoc":
            if c.mode != "dft":
                raise LmauditError("the pydoc source holds single paragraphs: it serves mode 'dft' only",
                                   hint="use source 'corpus' for instruction fine-tuning")
            docs = pydoc_corpus()
            return tuple(TextSet.from_texts(docs.passages(pool, n, max_chars=c.passage_chars, seed=seed),
                                            prefix=pool[0], source=f"pydoc:{pool}")
                         for pool, n in (("member", c.n_members), ("nonmember", c.n_nonmembers)))
        if c.mode == "ift":
            return (instruction_set(self.corpus.shuffled("member", seed), c.n_members, seed=seed, prefix="m",
                                    source="corpus:member"),
                    instruction_set(self.corpus.shuffled("nonmember", seed), c.n_nonmembers, seed=seed, prefix="n",
                                    source="corpus:nonmember"))
        mem = self.corpus.passages("member", c.n_members, max_chars=c.passage_chars, seed=seed)
        non = self.corpus.passages("nonmember", c.n_nonmembers, max_chars=c.passage_chars, seed=seed)
        return (TextSet.from_texts(mem, prefix="m", source="corpus:member"),
                TextSet.from_texts(non, prefix="n", source="corpus:nonmember"))

    def other_data(self, seed: int) -> TextSet:
        """Perturbed texts from the pretraining pool (never members or non-members), in the experiment's mode."""
        c = self.cfg
        if c.mode == "ift":
            pairs = instruction_set(self.corpus.shuffled("pretrain", seed + 1000), c.n_members, seed=seed, prefix="o")
            return TextSet([Record(r.id, perturb_words(r.target, seed=seed), r.context) for r in pairs.records],
                           source="corpus:perturbed")
        texts = self.corpus.passages("pretrain", c.n_members, max_chars=c.passage_chars, seed=seed + 1000)
        return TextSet.from_texts([perturb_words(t, seed=seed) for t in texts], prefix="o", source="corpus:perturbed")

    def finetuned(self, base: Path, data: TextSet, seed: int, *, epochs: int | None = None,
                  mask_ratio: float | None = None) -> Path:
        """``base`` fine-tuned on ``data`` with the experiment's settings, through the interface into the model cache
        (:func:`lmaudit.api.finetune`, keyed by all of them).

        With ``lora`` set, a LoRA adapter of that rank (a folder that loads like a model, on ``base``).
        """
        c = self.cfg
        epochs = epochs or c.epochs
        return api.finetune(base, data, mode=c.mode, epochs=epochs, lr=c.lr, block=c.block, batch_size=c.batch_size,
                            seed=seed, mask_ratio=mask_ratio, lora=c.lora or None).path

    def fine_tuned_run(self, seed: int):
        """(members, non-members, base, target fine-tuned on the members) for one seed."""
        members, nonmembers = self.data(seed)
        base = self.base()
        return members, nonmembers, base, self.finetuned(base, members, seed)

    def pii_models(self, seed: int, kinds=("ar", "dlm"), *, repeats: int = 1):
        """(train, unseen, {kind: path}): each kind fine-tuned on the same synthetic PII messages.

        ``repeats``: the fine-tuning data holds every message that many times (the whole
        set repeated, so the copies of a message fall at different block offsets and never
        in one block, where a bidirectional model could copy a value from its twin).
        """
        c = self.cfg
        train, unseen = pii_corpus(self.corpus, c.n_members, c.n_nonmembers, seed=seed, passage_chars=c.passage_chars)
        data = train
        if repeats > 1:
            data = TextSet([Record(f"{r.id}#{k}", r.target, r.context, dict(r.fields)) for k in range(repeats)
                            for r in train.records], source=f"{train.source} ×{repeats}")
        return train, unseen, {kind: self.finetuned(self.base(kind=kind), data, seed) for kind in kinds}

    def load(self, path: Path, kind: str | None = None):
        """The model of folder ``path`` (read as a model of ``kind``, None: the kind its config says), loaded once per
        workspace."""
        key = (str(path), kind)
        if key not in self._loaded:
            self._loaded[key] = load_model(path, kind=kind)
        return self._loaded[key]

    def mia(self, target: Path, reference: Path | None, members, nonmembers, seed: int, *, budget: int,
            attacks=None, params=None, reference_prior: bool = True):
        """Membership inference of ``attacks`` (None: every attack of the target's kind) with 200 bootstraps;
        ``reference_prior=False`` leaves out the reference's own scores (a second pass of every costly probe)."""
        cfg = RunConfig(attacks=attacks, params=params or {}, seed=seed, budget=budget, n_bootstrap=200,
                        batch_size=self.cfg.probe_batch_size, reference_prior=reference_prior)
        loaded = self.load(target)  # the reference is read as a model of the target's kind, as the interface reads it
        return api.mia(loaded, members, nonmembers,
                       reference=self.load(reference, loaded.kind) if reference else None, config=cfg)

    def probe(self, target: Path, members: TextSet, nonmembers: TextSet, seed: int, *, attacks):
        """The probe records of ``members`` then ``nonmembers`` under the model of folder ``target`` for ``attacks``,
        as :meth:`mia` probes them (so they come from the cache an earlier ``mia`` of the same sets filled)."""
        cfg = RunConfig(attacks=attacks, seed=seed, budget=1, batch_size=self.cfg.probe_batch_size)
        return api.probe(self.load(target), labelled_set(members, nonmembers), config=cfg)

    def extract(self, model: Path, data: TextSet, config: ExtractConfig) -> dict:
        """(n, p)-discoverable extraction of ``data`` from the model of folder ``model`` (loaded once), through the
        interface (:func:`lmaudit.api.extract`): the job's payload."""
        return api.extract(self.load(model), data, config=config).payload


def metrics(result, name: str) -> dict:
    """AUC and TPR at 10% and 1% FPR of attack ``name`` in an MIA result (NaN for a TPR too few non-members
    resolve), and the 95% bootstrap interval of each as ``<metric>_ci95`` where the result has one."""
    row = result.attacks[name]
    out: dict = {m: float("nan") if row[m] is None else float(row[m]) for m in METRICS}
    for m in METRICS:
        if row.get(f"{m}_ci95") is not None:
            out[f"{m}_ci95"] = [float(x) for x in row[f"{m}_ci95"]]
    return out


def aggregate(per_seed: list[dict[str, float]]) -> dict[str, list[float]]:
    """{metric: [mean, std]} over seeds (sample std, ddof = 1; 0 for one seed)."""
    return {m: [float(np.mean([r[m] for r in per_seed])), seed_std([r[m] for r in per_seed])] for m in METRICS}


def extract_config(raw: dict, seed: int, **overrides) -> ExtractConfig:
    """An experiment's ``[extract]`` table as an :class:`ExtractConfig` (unknown keys are errors)."""
    known = {f.name for f in fields(ExtractConfig)}
    for key in raw:
        if key not in known:
            raise LmauditError(f"unknown key 'extract.{key}'", hint=f"known keys: {', '.join(sorted(known))}")
    return ExtractConfig(**{**raw, **overrides, "seed": seed})


def step_labels(summary: dict) -> list[str]:
    """The step-count labels of an extraction summary (its entries that are rows, in order)."""
    return [k for k, v in summary.items() if isinstance(v, dict)]
