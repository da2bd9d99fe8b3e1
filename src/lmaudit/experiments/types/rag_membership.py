"""``rag-membership``: membership inference against a local RAG pipeline (a real BM25 store and a real generator),
each attack against the no-retrieval control, over store sizes, retrieval depths and a defence.

Per seed: members and non-members are passages of the corpus' member and non-member pools drawn alike
(:meth:`Workspace.data`); the store holds the members and passages of the pretraining pool up to its size (never a
non-member). Each setting is one :func:`lmaudit.rag_mia` run through the interface: the first store size, the first
depth and no defence, then one change at a time (every other store size, every other depth, every other defence). The
generator is loaded once and its answers are kept by prompt, so the control (the same generator, an empty store) is
asked once per prompt template and seed.

Payload: ``settings``: per setting its ``store_size``, ``top_k``, ``defence`` and ``per_seed`` (per attack the AUC,
TPRs and their intervals, the control's AUC and the paired difference to it; the paired AUC and TPR@1%FPR
differences of every attack to every other; the verdict; the queries; the scores per document with their labels).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from itertools import combinations

import numpy as np

from lmaudit import api
from lmaudit.errors import SettingError
from lmaudit.experiments.config import BaseConfig
from lmaudit.experiments.registry import register_experiment
from lmaudit.experiments.workspace import Workspace
from lmaudit.metrics import paired_auc_diff, paired_tpr_diffs
from lmaudit.models.loading import load_model
from lmaudit.rag.attacks import ATTACKS, SELECTIONS
from lmaudit.rag.interrogation import QUESTION_SOURCES
from lmaudit.rag.local import LocalRag, TextGenerator
from lmaudit.rag.system import CONTROL, DEFENCES
from lmaudit.report.plots import grouped_bars
from lmaudit.seeds import seed_std
from lmaudit.settings import each, integer, one_of, setting, text


@dataclass
class RagMembershipConfig(BaseConfig):
    n_members: int = setting(30, check=integer(1))  # in the store
    n_nonmembers: int = setting(30, check=integer(1))
    passage_chars: int = setting(300, check=integer(1))
    generator: str = setting("smollm2-135m", check=text())  # a model load_model loads; also MBA's proxy
    store_sizes: list[int] = setting(default_factory=lambda: [100, 400], check=each(integer(1), nonempty=True))
    top_ks: list[int] = setting(default_factory=lambda: [3, 1], check=each(integer(1, 100), nonempty=True))
    defences: list[str] = setting(default_factory=lambda: ["none", "no-quote"],
                                  check=each(one_of(tuple(DEFENCES), noun="defence"), nonempty=True))
    attacks: list[str] = setting(default_factory=lambda: list(ATTACKS),
                                 check=each(one_of(ATTACKS, noun="RAG attack"), nonempty=True))
    question_source: str = setting("statements", check=one_of(QUESTION_SOURCES))
    n_questions: int = setting(6, check=integer(1, 100))
    n_masks: int = setting(5, check=integer(1, 100))
    mask_selection: str = setting("proxy", check=one_of(SELECTIONS))
    max_new_tokens: int = setting(48, check=integer(1, 4096))
    generate_batch: int = setting(8, check=integer(1, 1024))
    n_bootstrap: int = setting(1000, check=integer(10, 100_000))

    def __post_init__(self) -> None:
        super().__post_init__()
        if min(self.store_sizes) < self.n_members:
            raise SettingError("store_sizes", "{name} must each hold the members: every size ≥ n_members "
                                              f"({self.n_members}), got {self.store_sizes}")


def settings_of(cfg: RagMembershipConfig) -> list[dict]:
    """The settings run: the first of each list, then one change at a time."""
    base = {"store_size": cfg.store_sizes[0], "top_k": cfg.top_ks[0], "defence": cfg.defences[0]}
    out = [base]
    for key, values in (("store_size", cfg.store_sizes), ("top_k", cfg.top_ks), ("defence", cfg.defences)):
        out += [{**base, key: v} for v in values[1:]]
    return out


def label(s: dict) -> str:
    return f"store {s['store_size']}, top-{s['top_k']}, defence {s['defence']}"


def _comparisons(labels: np.ndarray, scores: dict[str, np.ndarray], n: int, seed: int) -> dict:
    """Paired AUC, TPR@1%FPR and TPR@10%FPR differences of every attack to every other on the same documents."""
    def flipped(entry):  # b − a from a − b on the same resamples
        return None if entry is None else {"diff": -entry["diff"], "ci95": [-entry["ci95"][1], -entry["ci95"][0]]}

    out = {}
    for a, b in combinations(scores, 2):
        d = paired_auc_diff(labels, scores[a], scores[b], n_resamples=n, seed=seed)
        tprs = paired_tpr_diffs(labels, scores[a], scores[b], fprs={"tpr@1%fpr": 0.01, "tpr@10%fpr": 0.1},
                                n_resamples=n, seed=seed)  # None where the non-members cannot resolve it
        out[f"{a} - {b}"] = {"auc": {"diff": d.diff, "ci95": [d.lo, d.hi]}, **tprs}
        out[f"{b} - {a}"] = {k: flipped(v) for k, v in out[f"{a} - {b}"].items()}
    return out


def _cell(result, seed: int, n: int) -> dict:
    res = result.payload
    frame = result.to_frame()
    labels = frame["label"].to_numpy()
    attacks = list(res["attacks"])
    keep = ("auc", "auc_ci95", "tpr@1%fpr", "tpr@1%fpr_ci95", "tpr@10%fpr", "tpr@10%fpr_ci95", "vs_prior",
            "vs_blind", "queries_per_document")
    return {"seed": seed,
            "attacks": {a: {**{k: m.get(k) for k in keep},
                            "control_auc": res["control_attacks"].get(a, {}).get("auc")}
                        for a, m in res["attacks"].items()},
            "compare": _comparisons(labels, {a: frame[a].to_numpy() for a in attacks}, n, seed),
            "verdict": res["verdict"], "set_check": {"differ": res["set_check"].get("differ"),
                                                     "control_differ": (res["set_check"].get("reference") or {})
                                                     .get("differ")},
            "queries": res["queries"], "runtime_s": res["runtime_s"],
            "scores": {"label": labels.tolist(), **{c: frame[c].astype(float).tolist() for c in frame.columns
                                                    if c in attacks or c.endswith(CONTROL)}}}


def run(ws: Workspace, cfg: RagMembershipConfig) -> dict:
    """Every setting on every seed (see the module)."""
    handle = load_model(cfg.generator)
    generator = TextGenerator(handle, max_new_tokens=cfg.max_new_tokens, batch_size=cfg.generate_batch)
    runs = settings_of(cfg)
    cells: list[list[dict]] = [[] for _ in runs]
    timing = []
    for seed in cfg.seeds:
        start = time.perf_counter()
        members, nonmembers = ws.data(seed)
        extra = max(cfg.store_sizes) - len(members)
        fillers = ws.corpus.passages("pretrain", extra, max_chars=cfg.passage_chars, seed=seed + 2000) if extra else []
        for i, s in enumerate(runs):
            store = [r.target for r in members.records] + fillers[:s["store_size"] - len(members)]
            system = LocalRag(store, generator, top_k=s["top_k"], template=DEFENCES[s["defence"]])
            rag_cfg = api.RagConfig(attacks=cfg.attacks, top_k=s["top_k"], template=DEFENCES[s["defence"]],
                                    max_new_tokens=cfg.max_new_tokens, n_masks=cfg.n_masks,
                                    mask_selection=cfg.mask_selection, n_questions=cfg.n_questions,
                                    question_source=cfg.question_source, batch_size=cfg.generate_batch,
                                    n_bootstrap=cfg.n_bootstrap, seed=seed)
            result = api.rag_mia(system, members, nonmembers, config=rag_cfg, proxy=handle, helper=handle)
            cells[i].append(_cell(result, seed, cfg.n_bootstrap))
        timing.append({"seed": seed, "minutes": (time.perf_counter() - start) / 60,
                       "answers_generated": len(generator.memo)})
    return {"generator": generator.describe(), "settings": [{**s, "label": label(s), "per_seed": c}
                                                             for s, c in zip(runs, cells)],
            "timing": timing, "prompts_truncated": generator.truncated}


def _ci(m: dict, key: str) -> str:
    ci = m.get(f"{key}_ci95")
    return f"{100 * m[key]:.1f} [{100 * ci[0]:.1f}, {100 * ci[1]:.1f}]" if ci and m.get(key) is not None else (
        "n/a" if m.get(key) is None else f"{100 * m[key]:.1f}")


def tables(record: dict) -> list[tuple[str, list[str], list[list[str]]]]:
    """Per setting, attack and seed: AUC and TPR@1%FPR with intervals, the control's AUC and the difference to it."""
    exp = record["experiment"]
    rows = []
    for s in record["settings"]:
        for cell in s["per_seed"]:
            for a, m in cell["attacks"].items():
                prior = m.get("vs_prior") or {}
                rows.append([s["label"], str(cell["seed"]), a, _ci(m, "auc"), _ci(m, "tpr@1%fpr"),
                             "n/a" if m["control_auc"] is None else f"{100 * m['control_auc']:.1f}",
                             f"{100 * prior['diff']:+.1f} [{100 * prior['ci95'][0]:+.1f}, "
                             f"{100 * prior['ci95'][1]:+.1f}]" if prior.get("ci95") else "-",
                             str(m["queries_per_document"])])
    caption = (f"RAG membership: {exp['n_members']} members (in the store) vs {exp['n_nonmembers']} non-members "
               f"per seed, generator `{exp['generator']}`; AUC and TPR@1%FPR (%) with 95% bootstrap intervals, "
               "the same attack on the generator without retrieval, and the paired difference to it.")
    return [(caption, ["setting", "seed", "attack", "AUC", "TPR@1%FPR", "AUC without retrieval",
                       "Δ AUC vs control", "queries/doc"], rows)]


def figures(record: dict) -> list[tuple[str, str, bytes]]:
    """AUC per setting (mean ± std over seeds), each attack with retrieval and without it (the control)."""
    settings = record["settings"]
    attacks = list(settings[0]["per_seed"][0]["attacks"])
    series = {}
    for a in attacks:
        for name, key in ((a, "auc"), (a + CONTROL, "control_auc")):
            values = [[c["attacks"][a][key] for c in s["per_seed"] if c["attacks"][a][key] is not None]
                      for s in settings]
            if all(values):
                series[name] = ([100 * float(np.mean(v)) for v in values],
                                [100 * seed_std(v) if len(v) > 1 else 0.0 for v in values])
    groups = [f"store {s['store_size']}, top-{s['top_k']}" + (f", {s['defence']}" if s["defence"] != "none" else "")
              for s in settings]
    png = grouped_bars(groups, series, ylabel="AUC (%)", title="RAG membership: each attack with and without "
                       "retrieval", ylim=(0, 140), rotate=20)  # room for the legend above the bars
    return [("auc_by_setting", "AUC per setting, with retrieval and without (mean ± std over seeds)", png)]


def describe_setting(exp: dict) -> str:
    return (f"local RAG pipeline: BM25 store (`bm25s`), generator `{exp['generator']}` (greedy, "
            f"{exp['max_new_tokens']} new tokens at most), MBA's proxy the same model; interrogation questions "
            f"from {exp['question_source']}.")


register_experiment("rag-membership", config=RagMembershipConfig, run=run, tables=tables, figures=figures,
                    setting=describe_setting)
