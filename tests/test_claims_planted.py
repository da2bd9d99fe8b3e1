"""Planted records, one builder per judge of CLAIMS.md, each built so that its judge must read it as "against the
claim" or "not reproduced" (the registry test, test_claims_registry, runs every judge of every row on them). A builder
receives the experiment names the row passes and the judge's bound settings, and returns {name: record}."""

import numpy as np

S = 3  # seeds of a planted record
BEHIND = {"diff": -0.2, "ci95": [-0.25, -0.15]}
RNG = np.random.default_rng(7)


def exp(**kw) -> dict:
    return {"seeds": list(range(S)), "n_members": 200, "n_nonmembers": 200, "budget": 8, "kind": "dlm",
            "preset": "tiny", "base": "", "adapt_tokens": 1000, "lr": 1e-3, "epochs": 3, "lora": 0, "attacks": [],
            "pretrain_tokens": 10_000, **kw}


def seeds(entry: dict, n: int = S) -> list[dict]:
    return [{"seed": i, **entry} for i in range(n)]


def aucs(**rows) -> dict:
    """{row: AUC on every seed} as a record's rows (TPRs beside, finite)."""
    return {r.replace("__", " ").replace("_eq_", "="): {"per_seed": [{"auc": a, "tpr@1%fpr": 0.1,
                                                                        "tpr@10%fpr": 0.2}] * S}
            for r, a in rows.items()}


def everywhere(rec: dict, names) -> dict:
    return {n: rec for n in names}


# ---------------------------------------------------------------- membership tables (Q-Skew)

def mia(low: bool = True) -> dict:
    """A DLM membership table: Q-Skew behind every baseline on every seed, Loss below Min-K; ``low``: the DFT side of
    'IFT is harder' (every AUC below the IFT side's)."""
    a = dict(q_skew=0.55, loss=0.5, min_k=0.6, min_k_pp=0.6, secmi_dlm=0.6, calibration=0.6) if low else \
        dict(q_skew=0.85, loss=0.8, min_k=0.92, min_k_pp=0.92, secmi_dlm=0.92, calibration=0.92)
    vs = {b: seeds({**BEHIND, "tpr@1%fpr": BEHIND}) for b in a if b != "q_skew"}
    return {"rows": aucs(**a), "paired": {"compare": "q_skew", "vs": vs}, "experiment": exp()}


def plant_mia(names, kw) -> dict:
    out = {n: regimes() if "regimes" in n else mia() for n in names}
    out[kw.get("ift", "dlm-ift")] = mia(low=False)
    out[kw.get("dft", "dlm-dft")] = mia()
    for n in kw.get("names", ()):
        out.setdefault(n, mia())
    return out


def paired_rec(compare: str, others: list[str]) -> dict:
    return {"rows": aucs(**{compare: 0.7, **{o: 0.8 for o in others}}),
            "paired": {"compare": compare, "vs": {o: seeds(BEHIND) for o in others}}, "experiment": exp()}


def regimes() -> dict:
    per = lambda m: list(m + RNG.normal(0, 0.05, 100))  # noqa: E731
    cell = {"settings": {"mode": "dft"}, "paired": {"calibration unmasked_ratio": [-0.2, -0.25, -0.15],
                                                    "calibration": [-0.2, -0.25, -0.15]},
            "auc": {"calibration unmasked_ratio": [0.6, 0.0], "calibration": [0.7, 0.0]},
            "delta": {"members": {"mean": 1.0, "std": 1.0, "skew": -0.5},
                      "nonmembers": {"mean": 0.0, "std": 1.0, "skew": 0.5}},
            "per_seed": [{"delta": {"members": {"per_text_skew": per(-0.5)},
                                    "nonmembers": {"per_text_skew": per(0.5)}}}]}
    return {"cells": {"c0": cell, "c1": cell}, "experiment": exp(seeds=[0])}


def misaligned_rec() -> dict:
    rows = aucs(**{"golden / q_skew": 0.9, "golden / calibration": 0.9, "other-seed / q_skew": 0.5,
                   "other-seed / calibration": 0.6})
    vs = {"other-seed / q_skew": seeds({"diff": 0.15, "ci95": [0.12, 0.18]}),
          "other-seed / calibration": seeds(BEHIND)}
    return {"rows": rows, "paired": {"compare": "golden / q_skew", "vs": vs},
            "experiment": exp(references=["golden", "other-seed"])}


def epochs(q: tuple, other: float) -> dict:
    curve = lambda v: {"per_seed": [{"auc": v}] * S, "auc": [v, 0.0]}  # noqa: E731
    return {"curves": {"q_skew": {str(i + 1): curve(v) for i, v in enumerate(q)},
                       "loss": {str(i + 1): curve(other) for i in range(len(q))}}, "experiment": exp()}


def mask_ratio() -> dict:
    gains = {"0.25": 0.1, "0.5": 0.5}  # rising with the ratio: against Assumption 3.1
    return {"ratios": {r: {"mean_gain": g, "mean_gain_per_exposure": g} for r, g in gains.items()},
            "per_text_gains": {r: [list(g + RNG.normal(0, 0.05, 50))] for r, g in gains.items()},
            "experiment": exp(seeds=[0])}


def reconstruction(first: set[str]) -> dict:
    """A reconstruction record: the signals in ``first`` rank every true value first, the others second."""
    signals = ("ce", "skew_pii", "skew_context", "combined", "combined_paper", "AR ce")
    ranks = {s: {f: [[1 if s in first else 2] * 25] * S for f in ("email", "phone")} for s in signals}
    asr = {s: {f: [100.0 if s in first else 0.0] * S for f in ("email", "phone")} for s in signals}
    values = {f: [[("x" * (5 + i % 5)) if i < 12 else ("y" * (30 + i % 5)) for i in range(25)]] * S
              for f in ("email", "phone")}
    return {"ranks": ranks, "asr": asr, "values": values, "n_targets": 25, "n_calibration": 5,
            "fields": {f: {"coverage": [50.0] * S, "alpha": [0.1] * S, "ar_coverage": [50.0] * S}
                       for f in ("email", "phone")}, "experiment": exp(n_members=30)}


def plant_pii_combined(names, kw) -> dict:
    others = {kw["a"], *(s for s, _ in kw.get("more", ()))}
    return everywhere(reconstruction(others if not kw["better"] else {kw["b"]}), names)


def plant_examples(names, kw) -> dict:
    rec = reconstruction(set())
    for f in ("email", "phone"):  # Q-Skew alone ranks the short values first, CE alone the long ones
        rec["ranks"]["skew_pii"][f] = [[1] * 12 + [2] * 13] * S
        rec["ranks"]["ce"][f] = [[2] * 12 + [1] * 13] * S
    return everywhere(rec, names)


# ---------------------------------------------------------------- pretraining detection (Gap-K%)

def pretraining() -> dict:
    rows = aucs(**{"s: gap_k": 0.5, "s: min_k": 0.9, "s: min_k_pp": 0.99, "s: loss": 0.9, "s: zlib": 0.9,
                   "s: gap_k smooth_eq_sequential": 0.5, "s: gap_k smooth_eq_shuffled": 0.7,
                   "s: gap_k smooth_eq_none": 0.9, "s: gap_k k_eq_0.05": 0.9, "s: gap_k k_eq_0.15": 0.5,
                   "s: gap_k k_eq_0.5": 0.9, "s: perturbed gap_k": 0.5, "s: perturbed min_k_pp": 0.9,
                   "s: perturbed neighbourhood": 0.9, "s: min_k_pp smooth_eq_sequential": 0.9})
    large = seeds({"tau": 3.0, "members": 0.4, "nonmembers": 0.35, **BEHIND})
    return {"rows": rows, "paired": {"s": seeds({**BEHIND, "tpr@5%fpr": BEHIND})}, "large_gaps": {"s": large},
            "experiment": exp(kind="ar", base="m", attacks=["gap_k", "min_k_pp"])}


def plant_real_gap(names, kw) -> dict:
    return {kw["pretraining"]: pretraining()}


def plant_low_fpr_paired(names, kw) -> dict:
    vs = {"min_k_pp": seeds({**BEHIND, "tpr@5%fpr": BEHIND, "tpr@1%fpr": BEHIND})}
    return {kw["name"]: {"paired": {"compare": "gap_k", "vs": vs}, "rows": {}, "experiment": exp(n_nonmembers=1000)},
            kw["fallback"]: pretraining()}


# ---------------------------------------------------------------- unlearning audits (SMI)

def unlearning(cells: dict[str, float], half: float = 0.02, **extra) -> dict:
    """An unlearning-audit record: each 'frac / method / audit' ρ on every seed with a tight 90% interval (clipped and
    unclipped alike)."""
    table = {k: {"per_seed": [v] * S, "mean": v, "std": 0.0, "n_undefined": 0} for k, v in cells.items()}
    iv = {k: [[v - half, v + half]] * S for k, v in cells.items()}
    return {"unlearning": table, "intervals": iv, "intervals_unclipped": iv,
            "rho_unclipped": {k: [v] * S for k, v in cells.items()}, "n_train": 400, "n_nonmembers": 400,
            "cost_s": {"smi": 1.0, "smi-m": 1.0, "features": 1.0, "lira_shadow_training": 0.1, "lira_probes": 0.1,
                       "smi-scores": 0.1, "smi-m-scores": 0.1},
            "experiment": exp(kind="ar", n_shadows=4, audit_fpr=0.05, forget_fractions=[0.1],
                              smi_m_variants={"rbf 0.25×": {"kernel": "rbf", "bandwidth_factor": 0.25},
                                              "laplacian": {"kernel": "laplacian"}}), **extra}


def truth_cells(frac: str, audit: str, err: float) -> dict:
    return {f"{frac} / none / {audit}": err, f"{frac} / retrain / {audit}": 1 - err}


def plant_closest(names, kw):
    cells = {**truth_cells("0.1", "smi-m", 0.8), **truth_cells("0.1", "smi", 0.05),
             **truth_cells("0.1", "smi-m-scores", 0.05)}
    return everywhere(unlearning(cells), names)


def plant_coverage(names, kw):
    cells = {}
    for i in range(10):  # 20 intervals per seed, none holding the known ρ
        cells |= {f"0.{i + 1} / none / smi-m": 0.35, f"0.{i + 1} / retrain / smi-m": 0.55}
    return everywhere(unlearning(cells, half=0.05), names)


def plant_cost(names, kw):
    run = {"shadows_timed": True, "smi": [2.0, 2.1, 1.9], "smi-m": [2.0, 2.2, 1.8], "features": [5.0, 5.1, 4.9],
           "lira_shadow_training": [0.5, 0.6, 0.4], "lira_probes": [0.1, 0.1, 0.1]}  # LiRA cheaper: against
    return everywhere(unlearning(truth_cells("0.1", "smi-m", 0.1), cost_runs=[run] * S), names)


def plant_illusory(names, kw):
    cells = {"0.1 / gradient_ascent / threshold-loss": 0.95, "0.1 / gradient_ascent / smi-m": 0.5,
             "0.1 / none / smi-m": 0.05}
    return everywhere(unlearning(cells), names)


def plant_ranking(names, kw):
    cells = {"0.1 / gradient_ascent / smi-m": 0.2, "0.1 / npo / smi-m": 0.8}
    return everywhere(unlearning(cells, known_rho={"0.1 / gradient_ascent": 0.9, "0.1 / npo": 0.1}), names)


def plant_forged(names, kw):
    return everywhere(unlearning({"0.1 / forged / smi-m": 0.5}), names)


def plant_bandwidth(names, kw):
    cells = {**truth_cells("0.1", "smi-m-scores", 0.4), **truth_cells("0.1", "smi-m-scores rbf 0.25×", 0.05),
             **truth_cells("0.1", "smi-m-scores laplacian", 0.4)}
    return everywhere(unlearning(cells), names)


def plant_min_samples(names, kw):
    cells = {**truth_cells("0.025", "smi-m-scores", 0.02), **truth_cells("0.05", "smi-m-scores", 0.2),
             **truth_cells("0.1", "smi-m-scores", 0.2)}
    return everywhere(unlearning(cells), names)


def plant_smi_m_vs_smi(names, kw):
    cells = {**truth_cells("0.1", "smi", 0.02), **truth_cells("0.1", "smi-m", 0.4)}
    return everywhere(unlearning(cells), names)


def plant_fnr(names, kw):
    return everywhere(unlearning(truth_cells("0.1", "smi-m", 0.1),
                                 fnr_at_0fpr={"0.1 / threshold-loss": [[0, 200]] * S}), names)


def plant_collapse(names, kw):
    cells = {"0.1 / retrain / threshold-lira": 0.95, "0.1 / retrain / smi-m": 0.2,
             "0.1 / retrain / smi-m-scores": 0.2}
    return everywhere(unlearning(cells), names)


def plant_settings(names, kw):
    cells = {"0.1 / retrain / smi-m-scores": 0.1, "0.1 / none / smi-m-scores": 0.9}
    out = everywhere(unlearning(cells), names)
    return out | everywhere(unlearning(cells), kw.get("names", ()))


def plant_renyi(names, kw):
    return everywhere(unlearning({}, renyi=[{"bound": 0.1, "bias": 0.3, "ci95": [-0.25, -0.15]}] * S), names)


# ---------------------------------------------------------------- extraction

def steps(**extra) -> dict:
    n = 60
    col = lambda m: list(m + RNG.normal(0, 0.2, n))  # noqa: E731
    cols = {"1": col(-10.0), "2": col(-12.0), "max": col(-14.0)}  # falling on every refinement
    conv = {"not_converged_fraction": 0.0, "median_abs_change_half_to_full": 0.0}
    per = {"1": [{"convergence": conv, "discoverable@p=0.5": 50}], "2": [{"convergence": conv,
                                                                          "discoverable@p=0.5": 10}],
           "max": [{"convergence": {**conv, "not_converged_fraction": 0.0}, "discoverable@p=0.5": 0}]}
    return {"steps": {s: {"per_seed": v} for s, v in per.items()}, "log_p_columns": cols,
            "monotone_fraction": [0.0, 0.0], "experiment": exp(seeds=[0], extract={"trajectories": 512}), **extra}


def plant_converged(names, kw):
    rec = steps()
    for s in ("2", "max"):
        rec["steps"][s]["per_seed"][0]["convergence"]["not_converged_fraction"] = 0.5
    return everywhere(rec, names)


def plant_identity(names, kw):
    return everywhere(steps(ar_identity={"dlm": [-5.0] * 20, "ar": [-4.0] * 20}), names)


def plant_matches(names, kw):
    return everywhere(steps(exact_log_p=[0.0] * 60), names)


def pii(ar: int, dlm: int, one: int = 0, unseen: int = 0, shift: float = 0.0, n: int = 200) -> dict:
    row = lambda k, u: {"discoverable@p=0.5": k, "discoverable@p=0.99": k, "median_log_p_train": -10.0,  # noqa: E731
                        "unseen_discoverable": {"discoverable@p=0.5": u, "discoverable@p=0.99": u},
                        "convergence": {"not_converged_fraction": 0.0}}
    rows, lik = {}, {}
    for f in ("email", "phone"):
        for model, k in (("AR", ar), ("DLM one-step", one), ("DLM max-step", dlm)):
            rows[f"{f} / {model}"] = [row(k, unseen)]
            lik[f"{f} / {model}"] = {"train": list(-10 + shift + RNG.normal(0, 0.5, 50)),
                                     "unseen": list(-10 + RNG.normal(0, 0.5, 50))}
    return {"pii_rows": rows, "likelihood_shift": lik, "n_train": n, "n_unseen": n,
            "experiment": exp(seeds=[0], n_members=n, extract={"n": 10_000, "p": [0.5]})}


def plant_extraction(names, kw):
    return everywhere(pii(ar=0, dlm=50, one=0), names)


def plant_one_vs_max(names, kw):
    return everywhere(pii(ar=0, dlm=0, one=50), names)


def plant_shift(names, kw):
    return everywhere(pii(ar=0, dlm=0, unseen=50, shift=-3.0), names)


def plant_larger(names, kw):
    return {kw.get("ar", "pii-extraction"): pii(ar=0, dlm=0), kw.get("dlm", "real-dlm-pii-extraction"): pii(0, 50)}


def plant_size(names, kw):
    return {kw.get("small", "pii-extraction"): pii(0, 50), kw.get("large", "real-dlm-pii-extraction"): pii(0, 0)}


def plant_one_size(names, kw):
    if kw["judge_"].__name__ == "dlm_size":
        return {kw.get("name", "pii-extraction"): pii(0, 50), kw.get("other", "pii-extraction-large"): pii(0, 0)}
    return {kw.get("name", "pii-extraction"): pii(0, 0), kw.get("other", "pii-extraction-large"): pii(0, 50)}


def relaxed() -> dict:
    eps = list(range(10))
    emp = np.array([[min(1.0, 0.1 * e + RNG.normal(0, 0.02)) for e in eps] for _ in range(40)]).clip(0, 1)
    model = lambda pred: {"eps": eps, "empirical": list(emp.mean(0)), "predicted": list(pred.mean(0)),  # noqa: E731
                          "mean_abs_error": 0.0, "per_record": {"empirical": emp.tolist(), "predicted": pred.tolist()}}
    return {"relaxed": {"AR": model(emp), "DLM": {**model((emp + 0.3).clip(0, 1)), "by_samples": {
        "32": {"error": 0.01, "ci95": [0.005, 0.015]}, "128": {"error": 0.1, "ci95": [0.09, 0.11]}}}},
            "budget": {"n": [1, 10, 100], "p": 0.5, "mask": "suffix:8", "n_records": 200,
                       "fractions": {"DLM max-step": [0.0, 0.0, 0.5]}},
            "experiment": exp(seeds=[0], extract={"samples": 64, "relaxed": 8}, n_relaxed=40)}


def plant_validity(names, kw):
    cell = lambda i, lo, hi: {"seed": i, "prior": {"attack": "zlib", "auc": (lo + hi) / 2, "ci95": [lo, hi],  # noqa
                                                   "p": 1.0, "differ": False}, "best": {"attack": "gap_k", "auc": 0.9}}
    rec = {"cells": {"shifted / fine-tuned": [cell(i, 0.25, 0.35) for i in range(S)],
                     "iid / fine-tuned": [cell(i, 0.45, 0.55) for i in range(S)]}, "experiment": exp(kind="ar")}
    return everywhere(rec, names)


def plant_families(names, kw):
    out = everywhere(mia(low=False), names)
    out[kw.get("scratch", "dlm-dft-scratch")] = mia()
    return out


def plant_rag(names, kw):
    """A RAG run of the judge's own regime where every attack sits below its control and below every other."""
    attacks = ["s2mia", "mba", "interrogation"]
    cell = {"attacks": {a: {"auc": 0.4, "control_auc": 0.6, "vs_prior": BEHIND} for a in attacks},
            "compare": {f"{a} - {b}": {"auc": BEHIND, "tpr@1%fpr": None} for a in attacks for b in attacks if a != b},
            "scores": {"label": [1, 0], **{a: [0.1, 0.3] for a in attacks},
                       **{f"{a} (no retrieval)": [0.3, 0.1] for a in attacks}}}
    settings = [{"label": "store 100, top-3, defence none", "store_size": 100, "top_k": 3, "defence": "none",
                 "per_seed": seeds(cell)}]
    generator = "smollm2-135m" if kw.get("real") else "/cache/models/tiny-ar"
    return everywhere({"experiment": exp(generator=generator, attacks=attacks, question_source="statements",
                                         n_nonmembers=40), "settings": settings}, names)


def one(builder):
    return lambda names, kw: everywhere(builder(), names)


PLANTS = {
    "q_skew_beats_baselines": plant_mia, "tpr_at_1": plant_mia, "average_gain": plant_mia, "ift_harder": plant_mia,
    "min_k_broken": plant_mia, "secmi_weak": plant_mia,
    "authors_calibration": one(regimes), "asymmetry": one(regimes),
    "components_help": lambda names, kw: everywhere(paired_rec("q_skew", ["mean", "random"]), names),
    "rho_maximises": lambda names, kw: everywhere(paired_rec("ρ = 0.35", ["ρ = 0.15", "ρ = 0.5"]), names),
    "misaligned": one(misaligned_rec), "over_epochs": lambda names, kw: everywhere(epochs((0.5, 0.55), 0.9), names),
    "epochs_grow": lambda names, kw: everywhere(epochs((0.9, 0.6), 0.5), names), "mask_ratio": one(mask_ratio),
    "pii_combined": plant_pii_combined, "ar_reconstructs_more": lambda names, kw: everywhere(
        reconstruction({"ce"}), names), "pii_examples": plant_examples,
    "pretraining_gap": one(pretraining), "smoothing": one(pretraining), "k_sensitivity": one(pretraining),
    "paraphrase": one(pretraining), "gap_beats_min_k": one(pretraining), "gap_low_fpr": one(pretraining),
    "gap_components": one(pretraining), "large_gaps": one(pretraining), "not_recent": one(pretraining),
    "gap_best": one(pretraining), "gap_vs_neighbour": one(pretraining), "real_gap": plant_real_gap,
    "gap_low_fpr_paired": plant_low_fpr_paired,
    "smi_closest": plant_closest, "smi_coverage": plant_coverage, "smi_cost": plant_cost,
    "smi_illusory": plant_illusory, "smi_ranking": plant_ranking, "forged": plant_forged,
    "smi_bandwidth": plant_bandwidth, "smi_min_samples": plant_min_samples, "smi_m_beats_smi": plant_smi_m_vs_smi,
    "fnr_at_zero_fpr": plant_fnr, "shadow_collapse": plant_collapse, "smi_m_settings": plant_settings,
    "renyi_bound": plant_renyi,
    "steps_monotone": one(steps), "step_knob": one(steps), "p_hat_converged": plant_converged,
    "ar_special_case": plant_identity, "p_hat_matches": plant_matches,
    "ar_leaks_more": plant_extraction, "one_vs_max_step": plant_one_vs_max, "shift": plant_shift,
    "larger_dlm_vs_ar": plant_larger, "dlm_size": plant_size, "one_size": plant_one_size,
    "gaussian_fit": one(relaxed), "sublinear_budget": one(relaxed), "fit_samples": one(relaxed),
    "prior_separates": plant_validity, "two_families": plant_families,
    "beats_control": plant_rag, "strongest": plant_rag,
}
