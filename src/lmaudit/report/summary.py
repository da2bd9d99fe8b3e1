"""The verdict that opens every report: how exposed the model is, by what measure, and what usually lowers it.

Pure functions of a ``results.json`` payload (and, for the most exposed records, of the
scores); :mod:`lmaudit.report.build` renders them. The rules that set a level are
stated in the report itself (:data:`MIA_RULE`, :data:`SHARE_RULE`).
"""

from __future__ import annotations

import numpy as np

from lmaudit.report.document import Summary
from lmaudit.report.levels import (
    AUC_BOUNDS,
    LEVELS,
    SHARE_BOUNDS,
    _pct,
    level_index,
    lower_end,
    mia_level,
    rules_out_moderate,
    strongest_attack,
)
from lmaudit.report.validity import (
    adjusted_auc,
    beyond_what,
    evidence,
    gain_lower_end,
    gain_sentence,
    near_copy_note,
    prior_sentence,
    reference_differs,
    set_check_sentence,
    sets_differ,
)

MIA_RULE = ("How the level is set: from the lower ends of the 95% intervals, so that chance alone does not set it: "
            "the best lower bound over the attacks of the TPR at 1% FPR (chance: 1%) and of the AUC (chance: 0.5). "
            "Low: TPR < 2% and AUC < 0.60; moderate: TPR < 10% and AUC < 0.75; high: TPR < 30% and AUC < 0.90; "
            "severe: TPR ≥ 30% or AUC ≥ 0.90 (a run without intervals is read from its values). A TPR that too few "
            "non-members cannot measure is left out. "
            "The strongest attack has the highest TPR at 1% FPR (ties: the higher AUC), or the highest AUC when no "
            "TPR at 1% FPR is measured. When a blind baseline (a classifier of the texts alone, no model) tells "
            "the sets apart (a held-out test at 0.05), only the attacks whose AUC exceeds it (the paired "
            "interval of the difference lies above 0) set the level; when the reference, scored as a target, "
            "tells them apart, only the attacks calibrated by it or whose AUC exceeds the same attack's on it. On "
            "such sets the level is read on the AUC scale from 0.5 plus the lower end of what the best of them adds "
            "(a raw AUC or TPR there measures the sets' difference, not the model's memory); with none, or a low "
            "level only, the verdict is \"cannot tell\": on such sets a low reading does not mean safe. Low must "
            "also rule moderate out: the upper ends of the best AUC's interval below 0.60 and of the best TPR at 1% "
            "FPR below 2% (that TPR's upper end at least the exact binomial one of its members, and a TPR at 1% FPR "
            "measured at all, which takes 100 non-members); otherwise the verdict is \"cannot tell\", with the set "
            "sizes that would tell.")
SHARE_RULE = ("How the level is set: from the share of records exposed. Low: under 1%; moderate: under 5%; high: "
              "under 20%; severe: 20% or more.")
MIA_LOWER = ("What usually lowers it: fewer fine-tuning epochs or early stopping, deduplicating the training data, "
             "more (and more varied) training data, and differentially private fine-tuning (DP-SGD). These are "
             "common findings, not guarantees: audit the changed model again.")
MIA_LOW = ("No attack here tells members from non-members much better than chance at 1% false positives. This is a "
           "finding about these attacks on these sets, not a guarantee: other attacks (a reference model, shadow "
           "models) or more samples may do better.")
MIA_DIFFER_LOW = ("Beyond the sets' own differences, no attack adds much here. Sets that differ this much leave little "
                  "room to show memorisation: to measure it, draw members and non-members alike (the same source, "
                  "era and format), or hold out a random part of the training data as the members' twin.")
EXTRACT_LOWER = ("What usually lowers extraction: deduplicating repeated records (repeated text is reproduced far more "
                 "often), fewer epochs, differentially private fine-tuning, and scrubbing secrets before training. "
                 "These are common findings, not guarantees: audit the changed model again.")
PII_LOWER = ("What usually lowers it: scrubbing or pseudonymising PII before training (the model cannot learn a value "
             "it never saw), fewer epochs, deduplication and differentially private fine-tuning. These are common "
             "findings, not guarantees: audit the changed model again.")
SHARE_LOW = ("Few or no records were exposed in this run. This is a finding about this run's settings and records, "
             "not a guarantee: more queries, candidates or other masks may expose more.")


def part_level(res: dict) -> str | None:
    """The level of one membership run (:data:`MIA_RULE`): from every attack's TPR and AUC on sets drawn alike;
    when the sets differ (without the model, or to the reference), from the attacks that add beyond that only
    (:func:`evidence`), on the AUC scale, as 0.5 plus what they add (:func:`adjusted_auc`), each at the lower end of
    its interval: a raw AUC or TPR of sets that differ says how different they are, not how much the model
    remembers. None with no such attack."""
    shown = evidence(res)
    if not shown:
        return None
    if not (sets_differ(res) or reference_differs(res)):
        return mia_level(shown)
    return LEVELS[level_index(max(_adjusted_lower(res, n) for n in shown), AUC_BOUNDS)]


def _adjusted_lower(res: dict, name: str) -> float:
    """:func:`adjusted_auc` at the lower end of its interval: 0.5 plus the smallest lower end of what the attack
    adds over each check that applies (:func:`~lmaudit.report.validity.gain_lower_end`), or the lower end of its
    AUC's interval when nothing is subtracted."""
    low = gain_lower_end(res, name)
    return lower_end(res["attacks"][name], "auc") if low is None else 0.5 + low


def _interval(pair, fmt) -> str | None:
    if not pair or pair[0] is None or pair[1] is None:
        return None
    return f"{fmt(pair[0])}–{fmt(pair[1])}"


def attack_sentence(name: str, m: dict, n_nonmembers: int) -> str:
    """"min_k_pp identifies 19.3% of members at 1% false positives (95% interval …; AUC 0.926)"."""
    auc_ci = _interval(m.get("auc_ci95"), lambda v: f"{v:.3f}")
    auc = f"AUC {m['auc']:.3f}" + (f", 95% interval {auc_ci}" if auc_ci else "")
    tpr = m.get("tpr@1%fpr")
    if tpr is None:
        why = m.get("unresolved", {}).get("tpr@1%fpr", "n/a (needs ≥ 100 non-members)")
        return f"{name}: TPR at 1% FPR {why}, {n_nonmembers:,} here; {auc}"
    tpr_ci = _interval(m.get("tpr@1%fpr_ci95"), _pct)
    detail = f"95% interval {tpr_ci}; AUC {m['auc']:.3f}" if tpr_ci else auc
    return f"{name} identifies {_pct(tpr)} of members at 1% false positives ({detail})"


def member_exposure(scores: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-record empirical p-values and members' ranks under one attack's scores (higher = more member-like).

    Parameters
    ----------
    scores : (n,) float array
    labels : (n,) int array, 1 = member, 0 = non-member

    Returns
    -------
    p_value : (n,) float array
        For every record, the fraction of non-members whose score is at least as high as
        its own (ties count against the record): a member with p = 0 scores above every
        non-member. For a non-member its own score is among those counted. NaN when
        there are no non-members.
    rank : (n,) float array
        1 for the member with the highest score; members with equal scores share the
        best rank of the group; NaN for non-members.
    """
    scores = np.asarray(scores, dtype=np.float64)
    labels = np.asarray(labels)
    neg = np.sort(scores[labels == 0])
    if len(neg):
        p_value = (len(neg) - np.searchsorted(neg, scores, side="left")) / len(neg)
    else:
        p_value = np.full(len(scores), np.nan)
    pos = np.sort(scores[labels == 1])
    higher = len(pos) - np.searchsorted(pos, scores, side="right")  # members scoring strictly higher
    rank = np.where(labels == 1, 1.0 + higher, np.nan)
    return p_value, rank


def overlap_note(overlap: dict | None) -> str | None:
    """One sentence for a verdict when the run's sets share texts (None when they share none)."""
    if not overlap:
        return None
    parts = [f"{found['normalised']} shared by {pair.replace('/', ' and ')} "
             f"({100 * found['share']:.1f}% of the smaller set)"
             for pair, found in overlap.get("pairs", {}).items() if found.get("normalised")]
    if not parts:
        return None
    return ("Caveat: the sets share texts (" + "; ".join(parts) + "), compared as a reader sees them (Unicode NFC, "
            "invisible characters dropped, look-alike letters as one, whitespace collapsed). The figures do not "
            "measure memory cleanly: an exact copy scores the same in both sets (pulling the two sets' figures "
            "together: an AUC towards 0.5), and a copy in another Unicode form, spacing or look-alike letters is "
            "tokenised differently, so an attack can tell the two copies apart by their form alone.")


def mia_summary(parts: list[tuple[str, dict]], exposed: dict[str, int] | None = None) -> Summary:
    """The verdict of a membership-inference report with one or more parts (the demo's AR and DLM).

    ``parts`` are (label, results payload); ``exposed`` maps a label to the number of its
    members that score above every non-member under the strongest attack. A part whose sets
    differ without the model (:func:`sets_differ`) opens with that, and its level is read from
    the attacks that add beyond the blind baseline only (:func:`evidence`); with none, or with a
    low level only, its exposure is "cannot tell" (never "low": on such sets low is not safe).
    """
    levels = {label: part_level(res) for label, res in parts}
    # on sets that differ (without the model, or to the reference) a low level (or none) means "cannot tell", not
    # "safe": what the sets' differences hide cannot be told apart from memorisation
    unclear = [res for label, res in parts if levels[label] in (None, "low") and beyond_what(res)]
    # on sets drawn alike, low must rule moderate out: intervals too wide for that cannot tell either
    too_wide = {label: rules_out_moderate(res, res["attacks"]) for label, res in parts
                if levels[label] == "low" and not beyond_what(res)}
    too_wide = {label: why for label, why in too_wide.items() if why}
    levels = {label: None if levels[label] == "low" and (beyond_what(res) or label in too_wide) else levels[label]
              for label, res in parts}
    shown = [v for v in levels.values() if v is not None]
    worst = max(shown, key=LEVELS.index) if shown else None
    points = []
    for label, res in parts:
        lead = f"{label}: " if len(parts) > 1 else ""
        for opening in (set_check_sentence(res.get("set_check")), prior_sentence(res.get("set_check"))):
            if opening:
                points.append(lead + opening)
        shown = evidence(res)
        name = strongest_attack(shown or res["attacks"])
        level = levels[label] or CANNOT_TELL
        lead = f"{label} (exposure {level}): strongest" if len(parts) > 1 else "Strongest"
        if beyond_what(res) and shown:
            name = max(shown, key=lambda n: adjusted_auc(res, n))
            text = f"{lead} attack beyond {beyond_what(res)}: {gain_sentence(res, name)}"
        elif beyond_what(res):
            lead += f" attack, none beyond {beyond_what(res)}"
            text = f"{lead}: {attack_sentence(name, res['attacks'][name], res['n_nonmembers'])}"
        else:
            text = f"{lead} attack: {attack_sentence(name, res['attacks'][name], res['n_nonmembers'])}"
        text += f"; {res['n_members']:,} members vs {res['n_nonmembers']:,} non-members."
        if exposed and label in exposed and not beyond_what(res):  # on sets that differ it counts the difference
            text += (f" {exposed[label]:,} of the {res['n_members']:,} members score above every non-member "
                     "(listed under Most exposed records).")
        notes = res["attacks"][name].get("notes")
        if notes:
            text += f" Caveat: {notes[0]}."
        points.append(text)
        for note in (overlap_note(res.get("overlap")), near_copy_note(res.get("overlap"))):
            if note:
                points.append((f"{label}: " if len(parts) > 1 else "") + note)
    differ = any(beyond_what(res) for _, res in parts)
    points.append((MIA_DIFFER_LOW if differ else MIA_LOW) if worst in ("low", None) else MIA_LOWER)
    overlapping = any(overlap_note(res.get("overlap")) for _, res in parts)
    if unclear and worst in ("low", None):
        worst = None
        headline = f"Exposure: {CANNOT_TELL} ({cannot_tell_reason(unclear)})"
    elif too_wide and worst in ("low", None):
        worst = None
        headline = f"Exposure: {CANNOT_TELL} ({'; '.join(too_wide.values())})"
    else:
        headline = f"Exposure: {worst}" if worst else f"Exposure: {CANNOT_TELL}"
    at_worst = [res for label, res in parts if worst and levels[label] == worst]  # the parts the level comes from
    if any(sets_differ(res) for res in at_worst):
        headline += " (beyond a blind baseline: the sets differ without the model)"
    elif any(reference_differs(res) for res in at_worst):
        headline += " (beyond the reference's own scores: a model that never saw the members tells the sets apart)"
    if overlapping:
        headline += " (on sets that share texts)"
    return Summary(headline, worst, points, MIA_RULE)


CANNOT_TELL = "cannot tell"


def cannot_tell_reason(parts: list[dict]) -> str:
    """Why a membership verdict on sets that differ cannot tell: what tells the sets apart, and that no attack
    shows more than that."""
    what = ("the sets differ without the model" if any(sets_differ(res) for res in parts) else
            "a model that never saw the members tells the sets apart")
    return f"{what}; no attack adds enough beyond that to show memorisation, nor to rule it out"


def _rho(est: dict, *, inner: bool = False) -> str:
    """"ρ = 0.33 (90% interval 0.23–0.46)"; ``inner`` (inside parentheses): "ρ = 0.33, 90% interval 0.23–0.46"."""
    ci = _interval(est.get("ci90"), lambda v: f"{v:.2f}")
    if not ci:
        return f"ρ = {est['rho']:.2f}"
    return f"ρ = {est['rho']:.2f}" + (f", 90% interval {ci}" if inner else f" (90% interval {ci})")


def duci_summary(res: dict) -> Summary:
    """DUCI's used proportion and its interval in one sentence, ρ = 1 − p̂ beside it, and how the attack's decisions
    were corrected."""
    est = res["methods"]["duci"]
    ci = _interval(est.get("ci95"), lambda v: f"{v:.2f}")
    p = est["proportion"]
    points = [f"DUCI estimates that {100 * p:.0f}% of the {res['n_suspect']:,} suspect texts were used in training "
              f"(p̂ = {p:.2f}" + (f", 95% interval {ci})" if ci else ")") + f"; on SMI's scale, ρ = 1 − p̂ = {1 - p:.2f} "
              "is the share that behaves as never seen.",
              f"The {est['attack']} attack calls {100 * est['decided_share']:.0f}% of the suspect texts members; on "
              f"the {res.get('n_shadows', est['n_reference_models'])} shadow models it calls "
              f"{100 * est['tpr']:.0f}% of their training texts (TPR) and {100 * est['fpr']:.0f}% of the others "
              "(FPR) members, and p̂ = (share − FPR) / (TPR − FPR) corrects the share for both."]
    if est.get("anomaly"):
        points.append(f"Anomaly: the unclipped p̂ = {est['proportion_unclipped']:.2f} lies far outside [0, 1]: the "
                      "target errs unlike the shadows, so p̂ says little (trained otherwise than they were?).")
    points.append("Reading: the correction assumes the target errs as the shadows do, i.e. was trained like them "
                  "(same base, kind of data, epochs); the estimate is as good as that likeness, not a proof.")
    return Summary(f"DUCI: used proportion p̂ = {p:.2f}", None, points, "")


def audit_summary(res: dict) -> Summary:
    """ρ and its interval in one sentence (SMI-M when it ran, else SMI), the other method beside it; a DUCI audit's
    used proportion (:func:`duci_summary`)."""
    methods = res["methods"]
    if "duci" in methods:
        return duci_summary(res)
    order = [m for m in ("smi-m", "smi") if m in methods] + [m for m in methods if m not in ("smi-m", "smi")]
    name, est = order[0], methods[order[0]]
    others = "; ".join(f"{o.upper()}: {_rho(methods[o], inner=True)}" for o in order[1:])
    sentence = (f"{name.upper()} estimates {_rho(est)}: about {100 * est['rho']:.0f}% of the {res['n_suspect']:,} "
                f"suspect texts behave like texts the model never saw, and {100 * (1 - est['rho']):.0f}% like its "
                "training data" + (f" ({others})." if others else "."))
    points = [sentence]
    shared_texts = overlap_note(res.get("overlap"))
    if shared_texts:
        points.append(shared_texts)
    anomalous = [m.upper() for m in order if methods[m].get("anomaly")]
    if anomalous:
        points.append(f"Anomaly ({', '.join(anomalous)}): the unclipped ρ lies far outside [0, 1]; the suspect set "
                      "resembles neither reference set, so ρ says little (a forged or mismatched audit?).")
    points.append("Reading: for a forget set after unlearning, ρ near 1 is what removing it gives and ρ near 0 "
                  "means the model still behaves as if trained on it; for a benchmark, 1 − ρ estimates the share "
                  "that was in the training data. This is an estimate from these reference sets, not a proof.")
    return Summary(f"Set-level audit: ρ = {est['rho']:.2f}", None, points, "")


def extraction_summary(res: dict) -> Summary:
    """The share of records (n, p)-discoverable at the run's n, for each p, in the most exposing setting."""
    cfg = res["config"]
    rows = {k: v for k, v in res["summary"].items() if isinstance(v, dict)}
    n_rec = res["n_records"]
    shares, found = [], []
    for p in cfg["p"]:
        key = f"discoverable@p={p:g}"
        label = max(rows, key=lambda k: rows[k][key])
        count = rows[label][key]
        shares.append(count / n_rec if n_rec else 0.0)
        where = "" if label == "ar" else f" (at {label} denoising steps)"
        found.append(f"{count:,} of {n_rec:,} records ({100 * shares[-1]:.1f}%) with probability ≥ {p:g}{where}")
    steps = "" if list(rows) == ["ar"] else f" Step counts compared: {', '.join(rows)}; the most exposing is given."
    points = [f"Extractable within n = {cfg['n']:,} queries (mask {cfg['mask']}): " + "; ".join(found) + "." + steps]
    level = LEVELS[max(level_index(s, SHARE_BOUNDS) for s in shares)] if shares else "low"
    points.append(SHARE_LOW if level == "low" else EXTRACT_LOWER)
    return Summary(f"Exposure: {level}", level, points, SHARE_RULE + " The share is the largest over the p values "
                   "and step counts of this run.")


def pii_summary(res: dict) -> Summary:
    """Top-1 attack success rate of the best ranking signal, and the coverage of the candidates."""
    best = max(res["asr"], key=lambda s: res["asr"][s]["percent"])
    a = res["asr"][best]
    field = res.get("config", {}).get("field", "value")
    level = LEVELS[level_index(a["percent"] / 100, SHARE_BOUNDS)]
    points = [f"The best ranking signal, {best}, puts the true {field} first for {a['count']:,} of "
              f"{res['n_records']:,} redacted records (top-1 ASR {a['percent']:.1f}%).",
              f"Coverage: the true value was among the generated candidates for {res['coverage']['count']:,} records "
              f"({res['coverage']['percent']:.1f}%), the ceiling of any ranking signal.",
              SHARE_LOW if level == "low" else PII_LOWER]
    return Summary(f"Exposure: {level}", level, points, SHARE_RULE + " The share is the best signal's top-1 ASR.")


def experiment_summary(res: dict) -> Summary:
    """What the experiment measured and, for a membership table (``rows`` of AUC and TPRs), its strongest row."""
    exp = res["experiment"]
    seeds = exp.get("seeds", [])
    points = [f"Measured over {len(seeds)} seed(s) ({', '.join(map(str, seeds))}); the tables and figures below hold "
              "every value, and the description above says what the experiment reproduces."]
    rows = res.get("rows")
    level = None
    if isinstance(rows, dict) and rows and all(isinstance(r, dict) and len(r.get("auc", ())) == 2
                                               for r in rows.values()):
        attacks = {k: {"auc": r["auc"][0], "tpr@1%fpr": _finite(r.get("tpr@1%fpr", [None])[0])}
                   for k, r in rows.items()}
        name = strongest_attack(attacks)
        level = mia_level(attacks)
        tpr = attacks[name]["tpr@1%fpr"]
        tpr_text = (f"{100 * tpr:.1f} ± {100 * rows[name]['tpr@1%fpr'][1]:.1f}%" if tpr is not None
                    else f"n/a (needs ≥ {round(1 / 0.01):,} non-members)")
        points.insert(0, f"Strongest: {name}, TPR at 1% FPR {tpr_text}, AUC {attacks[name]['auc']:.3f} (mean ± std "
                         "over seeds), on the experiment's fine-tuned models.")
    headline = f"Exposure: {level}" if level else f"Experiment {exp['name']}"
    return Summary(headline, level, points, MIA_RULE if level else "")


def _finite(x) -> float | None:
    return None if x is None or not np.isfinite(x) else float(x)
