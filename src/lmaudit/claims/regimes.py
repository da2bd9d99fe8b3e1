"""The regime column of the SmolLM2-135M verdicts: what the real model's experiments do differently from the tiny
ones, with every figure read from the stored results (a figure here follows the data it names)."""

from __future__ import annotations

import numpy as np

from lmaudit.claims.base import auc_text, count_text, pct, row_stat, seed_counts, seed_intervals, spread
from lmaudit.claims.models import model, stream, weights


def _num(x: float) -> str:
    """3e-05 as 3e-5."""
    return f"{x:g}".replace("e-0", "e-")


def _seeds(rec: dict) -> str:
    n = len(rec["experiment"]["seeds"])
    return f"{n} seed" + "s" * (n != 1)


def pretraining(recs: dict[str, dict], *, name: str = "real-pretraining-detection",
                tiny: str = "ar-pretraining-detection") -> str:
    """Continued pretraining of the real model: its setting, each exposure's best attack, the head-to-head against
    the tiny model's, and how far the Gap-K% variants (smoothing, k) stand apart."""
    rec = recs[name]
    e = rec["experiment"]
    text = (f"{model(e)} continued-pretrained ({weights(e)}, lr {_num(e['lr'])}) for one pass over "
            f"{stream(e)}; {_seeds(rec)} (the paper: members met in "
            "pretraining of Pythia/LLaMA).")
    attacks = e.get("attacks") or []
    for setting, per_seed in rec["paired"].items():
        aucs = {a: row_stat(rec, f"{setting}: {a}")[0] for a in attacks if f"{setting}: {a}" in rec["rows"]}
        best = max(aucs, key=aucs.get)
        variants = [row_stat(rec, row)[0] for row in rec["rows"] if row.startswith(f"{setting}: gap_k ")]
        text += (f" {setting[:1].upper()}{setting[1:]}: the best attack is {best} at {pct(aucs[best])} AUC; Gap-K% − "
                 f"Min-K%++ {seed_intervals(per_seed)} "
                 f"({count_text(*seed_counts(per_seed))})")
        if tiny in recs and setting in recs[tiny]["paired"]:
            text += f", on the tiny model {count_text(*seed_counts(recs[tiny]['paired'][setting]))}"
        if variants:
            text += (f"; the Gap-K% smoothing and k variants span {100 * (max(variants) - min(variants)):.1f} points"
                     + (" with no interval (one seed)" if len(e["seeds"]) == 1 else ""))
        text += "."
    return text


def unlearning(recs: dict[str, dict], *, name: str = "real-unlearning", targets: str = "real-dft-lora") -> str:
    """Unlearning on the real model: its setting, how well its targets' members are told apart at all, and each
    audit's ρ on the untouched model beside the retrained one (a ρ between sets this close says little)."""
    rec = recs[name]
    e = rec["experiment"]
    fracs = ", ".join(f"{f:.0%}" for f in e["forget_fractions"])
    # with ``lora`` set, the target, the retrained model and every unlearning method train LoRA adapters (an
    # unlearning adapter on top of the target's: lmaudit.experiments.types.unlearning_audit); else every weight
    forgot = f"by unlearning adapters ({weights(e)}) on the target" if e.get("lora") else "in every weight"
    text = (f"{model(e)} fine-tuned ({weights(e)}) on {e['n_members']} passages, {fracs} forgotten {forgot}; "
            f"{_seeds(rec)}" + (", no LiRA (no shadow models were trained)" if not e.get("n_shadows") else "") + ".")
    if targets in recs:
        t = recs[targets]
        aucs = {a: row_stat(t, a)[0] for a in t["rows"]}
        best = max(aucs, key=aucs.get)
        text += (f" Members of its targets ({targets}) are told from non-members at AUC {auc_text(t, best)} at best "
                 f"({best}), Min-K%++ {auc_text(t, 'min_k_pp')}.")
    cells = []
    for frac in e["forget_fractions"]:
        for key, v in rec["unlearning"].items():
            f, method, audit = key.split(" / ")
            if method != "none" or float(f) != frac:
                continue
            gold = rec["unlearning"].get(f"{f} / retrain / {audit}")
            if gold is None or np.isnan(v["mean"]) or np.isnan(gold["mean"]):
                continue
            undefined = v["n_undefined"] + gold["n_undefined"]
            cells.append((abs(gold["mean"] - v["mean"]), f"{audit} {v['mean']:.2f} vs {gold['mean']:.2f}"
                          + (f" ({undefined} undefined seed-runs left out)" if undefined else "")))
    if cells:
        widest = max(cells)[1].split(" ")[0]
        text += (" ρ of the forget set, untouched model vs retrained (mean over seeds): "
                 + "; ".join(c for _, c in cells) + f". The widest gap is {widest}'s.")
    text += untouched_floor(rec)
    return text


UNTOUCHED_TOLERANCE = 0.1  # an untouched model's ρ within this of 0 reads its forget set as the members it is


def untouched_floor(rec: dict) -> str:
    """Which set-level audit reads the untouched model's forget set closest to 0 (its truth), and whether any reads
    it within :data:`UNTOUCHED_TOLERANCE`: where none does, the audits cannot tell an unlearning from none."""
    lows = [(v["mean"], spread(v["per_seed"])[1] if "per_seed" in v else v["std"], key.split(" / ")[0],
             key.split(" / ")[2]) for key, v in rec["unlearning"].items()  # the std recomputed with ddof = 1
            if key.split(" / ")[1] == "none" and key.split(" / ")[2].startswith("smi") and not np.isnan(v["mean"])]
    if not lows:
        return ""
    mean, std, frac, audit = min(lows)
    if mean <= UNTOUCHED_TOLERANCE:
        return (f" The untouched model's forget set reads near 0 on {audit} ({mean:.2f} ± {std:.2f}, forget "
                f"{float(frac):.0%}): that feature set can tell forgetting from none.")
    return (f" No feature set reads the untouched model's forget set near 0 (within {UNTOUCHED_TOLERANCE:g}): the "
            f"lowest is {audit}, {mean:.2f} ± {std:.2f} (forget {float(frac):.0%}), so the set-level audits here "
            "cannot tell an unlearning from none.")


def pii(recs: dict[str, dict], *, name: str = "real-pii-extraction", tiny: str = "pii-extraction") -> str:
    """PII extraction on the real model: its setting, and the unseen control of each field's discoverable count
    (a value the model infers from its context is discoverable on messages it never saw)."""
    rec = recs[name]
    e = rec["experiment"]
    kinds = "AR and DLM models of one lineage" if any("DLM" in k for k in rec["pii_rows"]) else "the AR model alone"
    text = (f"{model(e)} fine-tuned ({weights(e)}) for {e['epochs']} epochs on {rec['n_train']} synthetic messages; "
            f"{kinds}.")
    p = (e["extract"].get("p") or [None])[0]
    if p is None:
        return text + " The extraction's p is not stored, so its counts cannot be named here."
    n = e["extract"].get("n")
    budget = f"n = {n:,}" if n else "a query budget n that is not stored"
    at = f"discoverable@p={p:g}"
    for key, entries in rec["pii_rows"].items():
        train = float(np.mean([x[at] for x in entries]))
        unseen = float(np.mean([x["unseen_discoverable"][at] for x in entries]))
        if not unseen:
            continue
        text += (f" {key}: {unseen:g} of {rec['n_unseen']} unseen messages are (n, p)-discoverable at {budget}, "
                 f"p = {p:g} ({train:g} of {rec['n_train']} training ones")
        if tiny in recs and key in recs[tiny]["pii_rows"]:
            t = recs[tiny]["pii_rows"][key]
            text += (f"; the tiny model: {np.mean([x[at] for x in t]):g} and "
                     f"{np.mean([x['unseen_discoverable'][at] for x in t]):g}")
        text += ("): values of messages the model never saw are discoverable too, so a discoverable count without its "
                 "unseen control overstates memorisation here.")
    return text
