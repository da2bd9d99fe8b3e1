"""``pretraining-detection``: Gap-K%'s claim in its own regime — members inside the pretraining stream, no fine-tuning.

Per seed and per ``repeats`` r: an AR model pretrained from scratch on the corpus'
pretraining pool with the member passages put into the stream, each seen exactly r
times; non-members never seen. With ``base`` (a pretrained model), continued
pretraining instead: one pass of the base over a stream of ``pretrain_tokens`` tokens
(its own tokenizer) of pretraining-pool passages with the members r times each, in a
seeded random order, packed into blocks as pretraining packs documents
(``lr``/``lora``/``block``/``batch_size`` as in any fine-tuning). Rows: every attack; Gap-K% with each smoothing
(none / shuffled / sequential) and each k; every attack on members and non-members
perturbed alike by word swaps (a paraphrase stand-in). ``paired``: Gap-K% − Min-K%++
per seed with its paired bootstrap 95% interval (the claim is read from these).
``large_gaps`` (with ``gap_tau``): the share of member and of non-member tokens whose
normalised top-1 gap |g_t| exceeds τ, from the forward pass Gap-K% reads, and
non-members' − members' share with a 95% interval that resamples whole texts.

Payload: ``rows``: ``{"seen r×: label": {per_seed, auc, tpr@10%fpr, tpr@1%fpr}}``
(mean, std over seeds); ``paired``: ``{"seen r×": [{seed, diff, ci95, tpr@1%fpr, tpr@5%fpr}]}`` (the TPR
differences ``{diff, ci95}`` on the same resamples, None where the non-members cannot resolve them);
``large_gaps``: ``{"seen r×": [{seed, tau, members, nonmembers, diff, ci95}]}``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from transformers import AutoTokenizer

from lmaudit.attacks.gap_k import large_gap_counts
from lmaudit.data.corpus import cut_at_word
from lmaudit.data.instruct import perturb_words
from lmaudit.data.loaders import Record, TextSet
from lmaudit.errors import LmauditError
from lmaudit.experiments.config import BaseConfig
from lmaudit.experiments.registry import register_experiment
from lmaudit.experiments.types.membership import rows_tables
from lmaudit.experiments.workspace import Workspace, aggregate, metrics
from lmaudit.metrics import paired_auc_diff, paired_tpr_diffs
from lmaudit.settings import boolean, each, fraction, integer, one_of, positive, setting, text
from lmaudit.shifts import share_shift
from lmaudit.utils import stable_seed


@dataclass
class PretrainingConfig(BaseConfig):
    # times each member is seen in pretraining
    repeats: list[int] = setting(default_factory=lambda: [1, 4], check=each(integer(1)))
    attacks: list[str] = setting(default_factory=lambda: ["loss", "zlib", "min_k", "min_k_pp", "gap_k"],
                                 check=each(text()))
    smooth: list[str] = setting(default_factory=lambda: ["none", "shuffled", "sequential"],  # Gap-K% ablation
                                check=each(one_of(("none", "shuffled", "sequential"))))
    ks: list[float] = setting(default_factory=lambda: [0.05, 0.1, 0.15, 0.2, 0.3, 0.5],  # Gap-K% k sensitivity
                              check=each(fraction()))
    perturb: bool = setting(True, check=boolean())  # also score members and non-members perturbed by word swaps
    # continued pretraining: the members' copies as this share of the stream (its size then follows from the
    # members' tokens and r, ``pretrain_tokens`` unused); None: a stream of ``pretrain_tokens`` whatever r
    member_share: float | None = setting(None, check=fraction(optional=True))
    # the share of tokens whose normalised top-1 gap |g_t| exceeds this, members vs non-members (the paper's τ = 3);
    # None: not measured
    gap_tau: float | None = setting(3.0, check=positive(optional=True))


def _perturbed(ts: TextSet, seed: int) -> TextSet:
    return TextSet([Record(r.id, perturb_words(r.target, seed=seed), r.context) for r in ts.records],
                   source=f"{ts.source} (perturbed)")


def stream(ws: Workspace, members: TextSet, repeats: int, seed: int) -> TextSet:
    """Continued pretraining's data: ``members`` ``repeats`` times each among pretraining-pool passages, in a seeded
    random order, ``pretrain_tokens`` tokens of the base's tokenizer in all (the members' copies count), or with
    ``member_share`` as many as make the copies that share of it."""
    cfg = ws.cfg
    tok = AutoTokenizer.from_pretrained(ws.base(), local_files_only=True)
    lengths = lambda texts: [len(ids) + 1 for ids in tok(texts)["input_ids"]]  # noqa: E731 (+1: the EOS packing adds)
    inserted = [Record(f"{r.id}#{k}", r.target) for k in range(repeats) for r in members.records]
    member_tokens = repeats * sum(lengths(members.texts))
    total = cfg.pretrain_tokens if cfg.member_share is None else int(np.ceil(member_tokens / cfg.member_share))
    need = total - member_tokens
    filler: list[Record] = []
    seen: set[str] = set()
    for doc in ws.corpus.shuffled("pretrain", seed + 2000):
        if need <= 0:
            break
        text = cut_at_word(doc.text, cfg.passage_chars)
        if text not in seen:
            seen.add(text)
            filler.append(Record(f"p{len(filler)}", text))
            need -= lengths([text])[0]
    if need > 0 and cfg.member_share is not None:  # the members would be more than their share of the stream
        raise LmauditError(f"member_share = {cfg.member_share:g}: the pretraining pool lacks {need:,} of the "
                           f"{total:,} tokens the stream needs with the members ×{repeats}",
                           hint="raise member_share, or use fewer or shorter members")
    records = inserted + filler
    order = np.random.default_rng(stable_seed("pretraining-stream", seed, repeats)).permutation(len(records))
    return TextSet([records[i] for i in order], source=f"corpus:pretrain stream with the members ×{repeats}")


def _model(ws: Workspace, cfg: PretrainingConfig, members: TextSet, repeats: int, seed: int):
    """The model whose pretraining saw each member ``repeats`` times: a tiny one from scratch, or the base
    continued on :func:`stream` for one pass."""
    if cfg.base:
        if cfg.mode != "dft":
            raise LmauditError("continued pretraining reads passages: pretraining-detection takes mode \"dft\"")
        return ws.finetuned(ws.base(), stream(ws, members, repeats, seed), seed, epochs=1)
    return ws.pretrained(kind="ar", tokens=cfg.pretrain_tokens, seed=seed, include=members, repeats=repeats)


def run(ws: Workspace, cfg: PretrainingConfig) -> dict:
    """Every attack and Gap-K% variant on models whose pretraining stream holds the members."""
    rows: dict[str, list] = {}
    paired: dict[str, list] = {}
    large: dict[str, list] = {}
    variants = {**{name: (name, {}) for name in cfg.attacks},
                **{f"gap_k smooth={s}": ("gap_k", {"smooth": s}) for s in cfg.smooth},
                **{f"gap_k k={k:g}": ("gap_k", {"k": k}) for k in cfg.ks}}
    for seed in cfg.seeds:
        members, nonmembers = ws.data(seed)
        for r in cfg.repeats:
            setting = f"seen {r}×"
            model = _model(ws, cfg, members, r, seed)
            scores = {}
            for label, (attack, params) in variants.items():
                result = ws.mia(model, None, members, nonmembers, seed, budget=1, attacks=[attack],
                                params={attack: params} if params else None)
                rows.setdefault(f"{setting}: {label}", []).append(metrics(result, attack))
                scores[label] = (result.labels, result.scores[attack])
            labels = scores["gap_k"][0]
            diff, lo, hi = paired_auc_diff(labels, scores["gap_k"][1], scores["min_k_pp"][1], n_resamples=1000,
                                           seed=seed)
            tprs = paired_tpr_diffs(labels, scores["gap_k"][1], scores["min_k_pp"][1], n_resamples=1000, seed=seed)
            paired.setdefault(setting, []).append({"seed": seed, "diff": diff, "ci95": [lo, hi], **tprs})
            if cfg.gap_tau:
                large.setdefault(setting, []).append(large_gaps(ws, model, members, nonmembers, seed, cfg.gap_tau))
            if cfg.perturb:
                pm, pn = _perturbed(members, seed), _perturbed(nonmembers, seed)
                for name in cfg.attacks:  # one at a time: ReCaLL's held-out prefix leaves the others' sets whole
                    result = ws.mia(model, None, pm, pn, seed, budget=1, attacks=[name])
                    rows.setdefault(f"{setting}: perturbed {name}", []).append(metrics(result, name))
    out = {"rows": {k: {"per_seed": v, **aggregate(v)} for k, v in rows.items()}, "paired": paired}
    if large:
        out["large_gaps"] = large
    return out


def large_gaps(ws: Workspace, model, members: TextSet, nonmembers: TextSet, seed: int, tau: float) -> dict:
    """The share of member and of non-member tokens whose normalised top-1 gap |g_t| exceeds ``tau``, each pooled
    over its set's tokens, and non-members' − members' share with a 95% interval over texts (Gap-K%'s token-level
    claim: non-training text has more large gaps). Read from the probe Gap-K% scored, which the cache keeps."""
    stats = next(iter(ws.probe(model, members, nonmembers, seed, attacks=["gap_k"]).stats.values()))
    counts, totals = large_gap_counts(stats, tau)
    n = len(members)
    d = share_shift(counts[n:], totals[n:], counts[:n], totals[:n], seed=seed)
    return {"seed": seed, "tau": tau, "members": float(counts[:n].sum() / totals[:n].sum()),
            "nonmembers": float(counts[n:].sum() / totals[n:].sum()), "diff": d.diff, "ci95": [d.lo, d.hi]}


def tables(record: dict) -> list[tuple[str, list[str], list[list[str]]]]:
    """The attacks and variants (as ``mia``), then Gap-K% − Min-K%++ per seed with its paired interval."""
    cells = []
    for setting, per_seed in record["paired"].items():
        for p in per_seed:
            lo, hi = p["ci95"]
            verdict = "gap_k ahead" if lo > 0 else "min_k_pp ahead" if hi < 0 else "tied"
            cells.append([setting, str(p["seed"]), f"{100 * p['diff']:+.1f}", f"[{100 * lo:+.1f}, {100 * hi:+.1f}]",
                          verdict])
    out = rows_tables(record, "setting: attack") + [(
        "AUC(gap_k) − AUC(min_k_pp), in points, with the paired stratified bootstrap 95% interval (1,000 resamples, "
        "the same for both attacks): 'ahead' only when the interval excludes 0.",
        ["setting", "seed", "difference", "95% CI", "verdict"], cells)]
    large = record.get("large_gaps") or {}
    rows = []
    for setting, per_seed in large.items():
        for p in per_seed:
            lo, hi = p["ci95"]
            side = "non-members more" if lo > 0 else "members more" if hi < 0 else "tied"
            rows.append([setting, str(p["seed"]), f"{100 * p['members']:.2f}%", f"{100 * p['nonmembers']:.2f}%",
                         f"{100 * p['diff']:+.2f}", f"[{100 * lo:+.2f}, {100 * hi:+.2f}]", side])
    if rows:
        tau = next(iter(large.values()))[0]["tau"]
        out.append((f"Share of tokens whose normalised top-1 gap |g_t| exceeds τ = {tau:g} (Gap-K%'s token score, "
                    "before smoothing), pooled over each set's tokens; non-members − members in points with a 95% "
                    "bootstrap interval that resamples whole texts (2,000 resamples).",
                    ["setting", "seed", "members", "non-members", "difference", "95% CI", "reading"], rows))
    return out


def setting(exp: dict) -> str:
    """The line of ``table.md`` that says how the models were made (no fine-tuning here)."""
    if exp.get("base"):
        how = f"LoRA rank {exp['lora']}" if exp.get("lora") else "every weight"
        share = exp.get("member_share")
        stream_size = (f"{exp['pretrain_tokens']:,} tokens" if share is None else
                       f"as many tokens as make the members' copies {100 * share:g}% of them")
        return (f"AR `{exp['base']}` (pretrained), continued pretraining for one pass ({how}, lr {exp['lr']:g}, "
                f"{exp['block']}-token blocks) over {stream_size} of pretraining-pool passages with the members in "
                "the stream.")
    return (f"AR `{exp['preset']}` pretrained from scratch on {exp['pretrain_tokens']:,} tokens with the members in "
            "the stream; no fine-tuning.")


register_experiment("pretraining-detection", config=PretrainingConfig, run=run, tables=tables, setting=setting)
