"""``usage-proportion``: how much of a suspect set was used in training, by DUCI and by SMI-M, against the truth.

Per seed, from the corpus: a suspect set S (``n_suspect`` member-pool passages), a filler training set T
(``n_members`` other member-pool passages, known members) and held-out non-members H (``n_nonmembers``
non-member-pool passages). For each true proportion p of ``proportions``, a target is the base fine-tuned on T ∪ (the
first round(p·|S|) passages of a seeded permutation of S); the truth is that count over |S|. Two audits estimate the
used proportion of S on each target:

- ``duci`` (:func:`~lmaudit.audit.duci.duci`): the ``duci_attack`` decisions on S, debiased by the attack's TPR and
  FPR on ``n_shadows`` reference models fine-tuned from the same base on complementary random halves of S ∪ O (O:
  ``n_shadow_pool`` further member-pool passages), so every suspect passage is IN for half of them and OUT for the
  others; its 95% bootstrap interval (records resampled with their shadow scores);
- ``smi-m`` (:func:`~lmaudit.audit.smi.smi_m`): 1 − ρ on the vector of ``smi_attacks`` scores (``audit-set --features
  scores``), T as the members and H as the non-members; its 90% interval is 1 − (SMI-M's interval of ρ).

Both run through :func:`lmaudit.audit_set` with the probe cache off, so each audit's seconds are its own forward
passes (the base's included) and estimate; DUCI's shadow training is a one-off cost per seed, counted apart (near 0
when a rerun finds the shadows in the model cache).

Payload: ``cells`` ({"p": [one dict per seed: ``truth``, ``n_used``, and per audit ``estimate`` (clipped to [0, 1]),
``unclipped``, ``ci`` and ``ci_unclipped`` (DUCI's 95%, SMI-M's 90%), ``seconds``, and DUCI's ``ci90_unclipped``,
``tpr``, ``fpr``, ``decided_share``, ``threshold``]}), ``shadow_training_s`` and ``target_training_s`` (per seed), and
the set sizes.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from lmaudit import api
from lmaudit.attacks import get_attack
from lmaudit.audit.smi import KERNELS
from lmaudit.data.loaders import TextSet
from lmaudit.errors import LmauditError
from lmaudit.experiments.config import BaseConfig
from lmaudit.experiments.registry import register_experiment
from lmaudit.experiments.workspace import Workspace
from lmaudit.models.shadows import ShadowSet, shadow_splits, text_key
from lmaudit.progress import info
from lmaudit.report import plots
from lmaudit.runs.audit_set import AuditConfig
from lmaudit.settings import each, fraction, integer, one_of, setting, text
from lmaudit.utils import stable_seed

AUDITS = ("duci", "smi-m")
LEVELS = {"duci": "95%", "smi-m": "90%"}


@dataclass
class UsageProportionConfig(BaseConfig):
    proportions: list[float] = setting(default_factory=lambda: [0.0, 0.25, 0.5, 0.75, 1.0],
                                       check=each(fraction(), nonempty=True))
    n_suspect: int = setting(80, check=integer(4))  # |S|
    n_shadows: int = setting(4, check=integer(2, hint="shadows come in complementary pairs: at least 2"))
    n_shadow_pool: int = setting(80, check=integer(0))  # |O|: member-pool passages beside S in the shadows' pool
    duci_attack: str = setting("reference", check=text())
    smi_attacks: list[str] = setting(default_factory=lambda: ["loss", "zlib", "min_k", "min_k_pp", "reference"],
                                     check=each(text(), nonempty=True))
    kernel: str = setting("rbf", check=one_of(KERNELS, noun="kernel"))
    bootstrap: int = setting(200, check=integer(20))


def _sets(ws: Workspace, cfg: UsageProportionConfig, seed: int) -> tuple[TextSet, TextSet, list, TextSet]:
    """(S, T, the records of O, H) of one seed: disjoint member-pool passages for the first three, non-member-pool
    ones for H."""
    c = cfg
    texts = ws.corpus.passages("member", c.n_suspect + c.n_members + c.n_shadow_pool, max_chars=c.passage_chars,
                               seed=seed)
    a, b = c.n_suspect, c.n_suspect + c.n_members
    others = TextSet.from_texts(texts[b:], prefix="o", source="corpus:member (O)").records if texts[b:] else []
    held = ws.corpus.passages("nonmember", c.n_nonmembers, max_chars=c.passage_chars, seed=seed)
    return (TextSet.from_texts(texts[:a], prefix="s", source="corpus:member (suspect S)"),
            TextSet.from_texts(texts[a:b], prefix="t", source="corpus:member (filler T)"), others,
            TextSet.from_texts(held, prefix="h", source="corpus:nonmember (held out H)"))


def _audit(method: str, *args, **kwargs) -> dict:
    """One audit through the interface, as its cell: the estimate, or ``undefined`` (why) where the audit refuses
    (DUCI on references its attack does not separate; SMI-M on reference sets it cannot tell apart)."""
    t0 = time.perf_counter()
    try:
        est = api.audit_set(*args, **kwargs).payload["methods"][method]
    except LmauditError as exc:
        info(f"[yellow]{method}: {exc.message}[/yellow]")
        return {"estimate": None, "unclipped": None, "ci": [None, None], "ci_unclipped": [None, None],
                "ci90_unclipped": [None, None], "undefined": exc.message, "seconds": time.perf_counter() - t0}
    return {**(_duci_cell(est) if method == "duci" else _smi_cell(est)), "seconds": time.perf_counter() - t0}


def run(ws: Workspace, cfg: UsageProportionConfig) -> dict:
    """DUCI's and SMI-M's estimate of the used proportion of S for every true proportion and seed."""
    for key, name in (("duci_attack", cfg.duci_attack), *(("smi_attacks", a) for a in cfg.smi_attacks)):
        try:  # an attack of another kind, or one that needs shadows of its own, is refused before anything trains
            if get_attack(name, cfg.kind).needs_shadows:
                raise LmauditError(f"attack {name} needs shadow models of its own",
                                   hint="the shadows here are DUCI's reference models: name an attack of the model")
        except LmauditError as exc:
            raise LmauditError(f"{key}: {exc.message}", hint=exc.hint) from None
    if cfg.mode != "dft":
        raise LmauditError('usage-proportion draws passages: it runs with mode = "dft"')
    cells: dict[str, list] = {}
    shadow_s, target_s = [], []
    base = ws.base()
    for seed in cfg.seeds:
        S, T, others, H = _sets(ws, cfg, seed)
        t0 = time.perf_counter()
        halves = shadow_splits(TextSet(S.records + others, source="S ∪ O"), cfg.n_shadows, seed)
        shadows = ShadowSet([ws.finetuned(base, h, seed + 100 + j) for j, h in enumerate(halves)],
                            [{text_key(r) for r in h.records} for h in halves])
        shadow_s.append(time.perf_counter() - t0)
        order = np.random.default_rng(stable_seed("usage-proportion", seed)).permutation(len(S))
        spent = 0.0
        for p in cfg.proportions:
            used = [S.records[i] for i in np.sort(order[: round(p * len(S))])]
            t0 = time.perf_counter()
            target = ws.finetuned(base, TextSet(T.records + used, source=f"T ∪ {len(used)} of S"), seed)
            spent += time.perf_counter() - t0
            model, ref = ws.load(target), ws.load(base, "ar")
            info(f"usage-proportion: seed {seed}, p = {p:g} ({len(used)} of {len(S)} suspect passages trained on)")
            smi = _audit("smi-m", model, T, H, S, reference=ref, config=AuditConfig(
                method="smi-m", features="scores", attacks=cfg.smi_attacks, kernel=cfg.kernel, bootstrap=cfg.bootstrap,
                seed=seed, use_cache=False))
            duci = _audit("duci", model, suspect=S, reference=ref, shadows=shadows, config=AuditConfig(
                method="duci", attack=cfg.duci_attack, bootstrap=cfg.bootstrap, seed=seed, use_cache=False))
            cells.setdefault(f"{p:g}", []).append({"seed": seed, "truth": len(used) / len(S), "n_used": len(used),
                                                   "duci": duci, "smi-m": smi})
        target_s.append(spent)
    return {"cells": cells, "shadow_training_s": shadow_s, "target_training_s": target_s,
            "n_suspect": cfg.n_suspect, "n_filler": cfg.n_members, "n_nonmembers": cfg.n_nonmembers,
            "n_shadows": cfg.n_shadows, "n_shadow_pool": cfg.n_shadow_pool}


def _duci_cell(est: dict) -> dict:
    return {"estimate": est["proportion"], "unclipped": est["proportion_unclipped"], "ci": est["ci95"],
            "ci_unclipped": est["ci95_unclipped"], "ci90_unclipped": est["ci90_unclipped"], "tpr": est["tpr"],
            "fpr": est["fpr"], "decided_share": est["decided_share"], "threshold": est["threshold"]}


def _smi_cell(est: dict) -> dict:
    """SMI-M's ρ (the unused share) turned into the used proportion 1 − ρ, its interval reversed."""
    flip = lambda ci: [None, None] if ci[0] is None else [1.0 - ci[1], 1.0 - ci[0]]  # noqa: E731
    return {"estimate": 1.0 - est["rho"], "unclipped": 1.0 - est["rho_unclipped"], "ci": flip(est["ci90"]),
            "ci_unclipped": flip(est["ci90_unclipped"])}


def _holds(ci, truth: float) -> bool:
    return ci[0] is not None and ci[0] - 1e-9 <= truth <= ci[1] + 1e-9


def _ci(ci) -> str:
    return "-" if ci[0] is None else f"[{ci[0]:.2f}, {ci[1]:.2f}]"


def _cells(a: dict, truth: float) -> list[str]:
    """An audit's estimate (unclipped), interval, error, whether the interval holds the truth, and seconds."""
    if a["estimate"] is None:
        return ["undefined", "-", "-", "-", f"{a['seconds']:.1f}"]
    return [f"{a['estimate']:.3f} ({a['unclipped']:+.3f})", _ci(a["ci_unclipped"]), f"{a['estimate'] - truth:+.3f}",
            "yes" if _holds(a["ci_unclipped"], truth) else "no", f"{a['seconds']:.1f}"]


def tables(record: dict) -> list[tuple[str, list[str], list[list[str]]]]:
    """One row per (true proportion, seed): each audit's used proportion, interval, error, coverage and seconds; then
    a summary per audit."""
    rows = []
    for p, per_seed in record["cells"].items():
        for c in per_seed:
            d, s = c["duci"], c["smi-m"]
            rows.append([p, str(c["seed"]), f"{c['truth']:.3f}", *_cells(d, c["truth"]), *_cells(s, c["truth"]),
                         "-" if d["estimate"] is None else f"{d['decided_share']:.3f}",
                         "-" if d["estimate"] is None else f"{d['tpr']:.2f} / {d['fpr']:.2f}"])
    header = ["p", "seed", "truth", "DUCI p̂ (unclipped)", "DUCI 95% interval", "DUCI error", "DUCI holds truth",
              "DUCI s", "SMI-M 1 − ρ (unclipped)", "SMI-M 90% interval", "SMI-M error", "SMI-M holds truth",
              "SMI-M s", "raw share called members", "TPR / FPR on shadows"]
    caption = (f"The used proportion of the suspect set S ({record['n_suspect']} passages) on targets fine-tuned on "
               f"{record['n_filler']} filler passages and the first p·|S| of S. DUCI: the "
               f"{record['experiment']['duci_attack']} attack's decisions debiased on {record['n_shadows']} shadow "
               f"models (complementary halves of S ∪ {record['n_shadow_pool']} other passages); SMI-M: 1 − ρ on the "
               "attack-score features, the filler as members and held-out passages as non-members. Estimates are "
               "clipped to [0, 1] (unclipped in parentheses); error = clipped estimate − truth; the intervals are "
               "the bootstrap percentiles of the unclipped estimate (DUCI 95%, SMI-M 90%, as each audit reports), "
               "and 'holds truth' is read on them. Seconds: the audit's own forward passes (probe cache off, the "
               "base's passes included) and estimate; DUCI's shadow training is apart (next table). The raw share is "
               "what counting DUCI's decisions without the correction gives.")
    out = [(caption, header, rows)]
    summary = []
    flat = [c for per_seed in record["cells"].values() for c in per_seed]
    for audit in AUDITS:
        cells = [(c[audit], c["truth"]) for c in flat if c[audit]["estimate"] is not None]
        held = sum(_holds(a["ci_unclipped"], t) for a, t in cells)
        widths = [a["ci_unclipped"][1] - a["ci_unclipped"][0] for a, _ in cells if a["ci_unclipped"][0] is not None]
        row = [audit, f"{np.mean([abs(a['estimate'] - t) for a, t in cells]):.3f}" if cells else "-",
               f"{held}/{len(cells)} ({LEVELS[audit]})", str(len(flat) - len(cells))]
        held90 = sum(_holds(a["ci90_unclipped" if audit == "duci" else "ci_unclipped"], t) for a, t in cells)
        row.append(f"{held90}/{len(cells)} (90%)")
        row += [f"{np.median(widths):.2f}" if widths else "-",
                f"{np.mean([c[audit]['seconds'] for c in flat]):.1f}"]
        summary.append(row)
    shadows, targets = (", ".join(f"{s:.1f}" for s in record[k]) for k in ("shadow_training_s", "target_training_s"))
    caption = (f"Per audit over {len(flat)} targets: mean absolute error of the clipped estimate, how often the "
               "interval of the unclipped estimate holds the truth (of the defined estimates; 'undefined': the audit "
               "refused, e.g. DUCI's attack not separating the shadows), DUCI's also at 90% as SMI-M's, the median "
               "width and the mean "
               f"seconds per audit. DUCI's one-off cost: training {record['n_shadows']} shadows took "
               f"{shadows} s (per seed; near 0 where the model cache held them); the targets' training, a cost of "
               f"neither audit, {targets} s.")
    out.append((caption, ["audit", "mean abs. error", "interval holds truth", "undefined", "at 90%", "median width",
                          "seconds per audit"], summary))
    return out


def figures(record: dict) -> list[tuple[str, str, bytes]]:
    """Each audit's unclipped estimate and interval against the truth, every seed."""
    series = {f"{a.upper()} ({LEVELS[a]})": [(c["truth"], c[a]["unclipped"],
                                             *(np.nan if v is None else v for v in c[a]["ci_unclipped"]))
                                            for per_seed in record["cells"].values() for c in per_seed
                                            if c[a]["estimate"] is not None]
              for a in AUDITS}
    png = plots.estimates_vs_truth(series, xlabel="true used proportion of S", ylabel="estimated used proportion",
                                   title="DUCI vs SMI-M (1 − ρ)")
    return [("estimate_vs_truth", "Estimated against true used proportion (unclipped, with intervals)", png)]


register_experiment("usage-proportion", config=UsageProportionConfig, run=run, tables=tables, figures=figures)
