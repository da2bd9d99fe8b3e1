"""Run an experiment file: build (cached) models, run membership inference, write tables and plots.

Every experiment writes ``OUT/NAME/results.json`` (configuration, command, provenance,
per-seed values and their mean ± std) and ``OUT/NAME/table.md``; ``epochs`` and
``mask-ratio`` also write a PNG plot.
"""

from __future__ import annotations

import time
from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from lmaudit import __version__
from lmaudit.attacks.dlm_common import token_means
from lmaudit.data.corpus import build_corpus
from lmaudit.data.instruct import instruction_set, perturb_words
from lmaudit.data.loaders import Record, TextSet
from lmaudit.experiments.config import ExperimentConfig
from lmaudit.experiments.extraction import run_pii, run_reconstruction_experiment, run_relaxed, run_steps
from lmaudit.experiments.outputs import write_outputs
from lmaudit.experiments.unlearning import run_unlearning
from lmaudit.models.build import cached_build, cached_pretrain, corpus_tokenizer, finetune
from lmaudit.models.loading import load_model
from lmaudit.probes.masked import probe_masked
from lmaudit.probes.masks import MaskPlan
from lmaudit.progress import info
from lmaudit.runs.mia import RunConfig, run_mia
from lmaudit.utils import git_commit, package_versions

METRICS = ("auc", "tpr@10%fpr", "tpr@1%fpr")


class Workspace:
    """Corpus, tokenizer and cached models shared by an experiment's runs."""

    def __init__(self, cfg: ExperimentConfig) -> None:
        self.cfg = cfg
        self.corpus = build_corpus(tuple(cfg.packages))
        self.tokenizer = corpus_tokenizer(self.corpus, vocab_size=cfg.vocab_size)
        self._loaded: dict[str, object] = {}

    def base(self, seed: int = 0, kind: str | None = None) -> Path:
        """The pretrained base: an AR model, or for a DLM that AR model adapted with the diffusion objective."""
        c = self.cfg
        ar = cached_pretrain(self.corpus, self.tokenizer, kind="ar", preset=c.preset, tokens=c.pretrain_tokens, seed=seed)
        if (kind or c.kind) == "ar":
            return ar
        return cached_pretrain(self.corpus, self.tokenizer, kind="dlm", preset=c.preset, tokens=c.adapt_tokens,
                               seed=seed, init_from=ar)

    def data(self, seed: int) -> tuple[TextSet, TextSet]:
        c = self.cfg
        if c.mode == "ift":
            return (instruction_set(self.corpus.shuffled("member", seed), c.n_members, seed=seed, prefix="m", source="corpus:member"),
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
        c = self.cfg
        epochs = epochs or c.epochs
        key = ("finetune", str(base), data.fingerprint(), c.mode, epochs, c.lr, c.block, c.batch_size, seed, mask_ratio)
        return cached_build("models", key, lambda tmp: finetune(
            base, data, tmp, mode=c.mode, epochs=epochs, lr=c.lr, block=c.block, batch_size=c.batch_size, seed=seed,
            mask_ratio=mask_ratio))

    def fine_tuned_run(self, seed: int):
        """(members, non-members, base, target fine-tuned on the members) for one seed."""
        members, nonmembers = self.data(seed)
        base = self.base()
        return members, nonmembers, base, self.finetuned(base, members, seed)

    def load(self, path: Path):
        if str(path) not in self._loaded:
            self._loaded[str(path)] = load_model(path)
        return self._loaded[str(path)]

    def mia(self, target: Path, reference: Path | None, members, nonmembers, seed: int, *,
            attacks=None, params=None):
        cfg = RunConfig(attacks=attacks if attacks is not None else self.cfg.attacks, params=params or {}, seed=seed,
                        budget=self.cfg.budget, n_bootstrap=200)
        return run_mia(self.load(target), members, nonmembers,
                       reference=self.load(reference) if reference else None, config=cfg)


def _metrics(result, name: str) -> dict[str, float]:
    return {m: float(result.attacks[name][m]) for m in METRICS}


def _aggregate(per_seed: list[dict[str, float]]) -> dict[str, list[float]]:
    """{metric: [mean, std]} over seeds (population std; 0 for one seed)."""
    return {m: [float(np.mean([r[m] for r in per_seed])), float(np.std([r[m] for r in per_seed]))] for m in METRICS}


def _run_mia_table(ws: Workspace) -> dict:
    rows: dict[str, list] = {}
    for seed in ws.cfg.seeds:
        members, nonmembers, base, target = ws.fine_tuned_run(seed)
        result = ws.mia(target, base, members, nonmembers, seed)
        for name in result.attacks:
            rows.setdefault(name, []).append(_metrics(result, name))
    return {"rows": {k: {"per_seed": v, **_aggregate(v)} for k, v in rows.items()}}


def _run_ablation(ws: Workspace) -> dict:
    rows: dict[str, list] = {}
    for seed in ws.cfg.seeds:
        members, nonmembers, base, target = ws.fine_tuned_run(seed)
        for label, variant in ws.cfg.variants.items():
            attack = variant["attack"]
            params = {k: v for k, v in variant.items() if k != "attack"}
            result = ws.mia(target, base, members, nonmembers, seed, attacks=[attack], params={attack: params})
            rows.setdefault(label, []).append(_metrics(result, attack))
    return {"rows": {k: {"per_seed": v, **_aggregate(v)} for k, v in rows.items()}}


def _run_misaligned(ws: Workspace) -> dict:
    rows: dict[str, list] = {}
    for seed in ws.cfg.seeds:
        members, nonmembers, base, target = ws.fine_tuned_run(seed)
        refs = {"golden": base, "other-seed": ws.base(seed=1),
                "perturbed": ws.finetuned(base, ws.other_data(seed), seed)}
        for ref_name in ws.cfg.references:
            result = ws.mia(target, refs[ref_name], members, nonmembers, seed)
            for name in result.attacks:
                rows.setdefault(f"{ref_name} / {name}", []).append(_metrics(result, name))
    return {"rows": {k: {"per_seed": v, **_aggregate(v)} for k, v in rows.items()}}


def _run_epochs(ws: Workspace) -> dict:
    curves: dict[str, dict[int, list]] = {}
    for seed in ws.cfg.seeds:
        members, nonmembers = ws.data(seed)
        base = ws.base()
        for epoch in range(1, ws.cfg.epochs + 1):
            result = ws.mia(ws.finetuned(base, members, seed, epochs=epoch), base, members, nonmembers, seed)
            for name in result.attacks:
                curves.setdefault(name, {}).setdefault(epoch, []).append(_metrics(result, name))
    return {"curves": {name: {str(e): {"per_seed": v, **_aggregate(v)} for e, v in by_epoch.items()}
                       for name, by_epoch in curves.items()}}


def _run_mask_ratio(ws: Workspace) -> dict:
    """Per-token memorisation gain (Δ = log p_target − log p_base, cyclic masks) by training mask ratio."""

    out: dict[str, dict] = {}
    base = ws.base()
    for seed in ws.cfg.seeds:
        members, nonmembers = ws.data(seed)
        for ratio in ws.cfg.mask_ratios:
            target = ws.finetuned(base, members, seed, mask_ratio=ratio)
            tar, ref = ws.load(target), ws.load(base)
            stats = probe_masked(tar.adapter, tar.tokenizer, members, MaskPlan("cyclic", budget=ws.cfg.budget),
                                 reference=ref.adapter, seed=seed)
            gains, _ = token_means(stats, stats.logp.astype(np.float64) - stats.ref_logp)
            entry = out.setdefault(str(ratio), {"gains": [], "auc": []})
            entry["gains"].extend(gains.tolist())
            entry["auc"].append(_metrics(ws.mia(target, base, members, nonmembers, seed, attacks=["q_skew", "loss"]),
                                         "q_skew")["auc"])
    summary = {}
    for ratio, entry in out.items():
        g = np.asarray(entry["gains"])
        summary[ratio] = {
            "n_tokens": len(g), "mean_gain": float(g.mean()), "median_gain": float(np.median(g)),
            "q10_gain": float(np.quantile(g, 0.1)), "q90_gain": float(np.quantile(g, 0.9)),
            "mean_gain_per_exposure": float(g.mean() / (float(ratio) * ws.cfg.epochs)),
            "q_skew_auc": float(np.mean(entry["auc"])),
        }
    return {"ratios": summary, "gains": {r: e["gains"] for r, e in out.items()}}


RUNNERS = {"mia": _run_mia_table, "ablation": _run_ablation, "misaligned-ref": _run_misaligned,
           "epochs": _run_epochs, "mask-ratio": _run_mask_ratio, "extraction-steps": run_steps,
           "pii-extraction": run_pii, "extraction-relaxed": run_relaxed,
           "unlearning-audit": run_unlearning, "pii-reconstruction": run_reconstruction_experiment}


def run_experiment(cfg: ExperimentConfig, *, out_root: str | Path = "results", command: str = "") -> Path:
    """Run ``cfg`` and write its outputs under ``out_root/cfg.name``; return that folder."""
    t0 = time.perf_counter()
    info(f"experiment {cfg.name} ({cfg.type}): {cfg.description}")
    ws = Workspace(cfg)
    payload = RUNNERS[cfg.type](ws)
    record = {
        "experiment": asdict(cfg),
        "command": command,
        "lmaudit_version": __version__,
        "git_commit": git_commit(),
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "packages": package_versions(),
        "corpus": ws.corpus.manifest["content_hash"],
        "runtime_s": round(time.perf_counter() - t0, 1),
        **payload,
    }
    return write_outputs(Path(out_root) / cfg.name, record)
