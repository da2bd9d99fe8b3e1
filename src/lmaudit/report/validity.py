"""Do the sets explain the result? What a membership verdict reads of a run's set checks: the blind baselines
(``set_check``), the reference scored as a target (``set_check.reference``), near-copies across the sets
(``overlap.ngrams``), and what each attack adds beyond them. Pure functions of a ``results.json`` payload;
:mod:`lmaudit.report.summary` builds the verdict from them."""

from __future__ import annotations


def _percent(x: float) -> str:
    return f"{100 * x:.1f}%"


def sets_differ(res: dict) -> bool:
    """Whether a run's blind baseline tells its members from its non-members without the model (``set_check``)."""
    return bool((res.get("set_check") or {}).get("differ"))


def reference_differs(res: dict) -> bool:
    """Whether the reference model, which never saw the members, tells them from the non-members by itself
    (``set_check``'s ``reference`` block)."""
    return bool(((res.get("set_check") or {}).get("reference") or {}).get("differ"))


def evidence(res: dict) -> dict[str, dict]:
    """The attacks a run's level is read from: all of them, less those the sets' own differences explain. When
    the sets differ without the model, only attacks whose AUC exceeds the best blind baseline's (paired interval
    above 0); when the reference already tells them apart, only attacks calibrated by the reference or whose AUC
    exceeds the same attack's on the reference (``vs_prior``)."""
    attacks = res["attacks"]
    if sets_differ(res):
        attacks = {n: m for n, m in attacks.items() if (m.get("vs_blind") or {}).get("beyond")}
    if reference_differs(res):
        calibrated = set(res["set_check"]["reference"].get("calibrated") or ())
        attacks = {n: m for n, m in attacks.items() if n in calibrated or (m.get("vs_prior") or {}).get("beyond")}
    return attacks


def gains(res: dict, name: str) -> list[dict]:
    """The checks attack ``name``'s AUC is compared with: its ``vs_blind`` when the sets differ without the model,
    its ``vs_prior`` when the reference tells them apart (an attack calibrated by the reference or by shadow models
    has none); each ``{"diff", "ci95", ...}``."""
    m = res["attacks"][name]
    calibrated = set((((res.get("set_check") or {}).get("reference") or {}).get("calibrated")) or ())
    return [vs for vs, on in ((m.get("vs_blind"), sets_differ(res)),
                              (m.get("vs_prior"), reference_differs(res) and name not in calibrated)) if on and vs]


def gain(res: dict, name: str) -> tuple[float, list | None] | None:
    """What attack ``name`` adds beyond the sets' own differences: (AUC gain, its paired 95% interval), the
    smaller of its gains (:func:`gains`). None when no check applies to it."""
    found = gains(res, name)
    if not found:
        return None
    smallest = min(found, key=lambda vs: vs["diff"])
    return smallest["diff"], smallest.get("ci95")


def gain_lower_end(res: dict, name: str) -> float | None:
    """The smallest lower end, over :func:`gains`, of what attack ``name`` adds (a gain's value when it has no
    interval); None when no check applies to it."""
    found = gains(res, name)
    return min((vs["ci95"][0] if vs.get("ci95") else vs["diff"]) for vs in found) if found else None


def adjusted_auc(res: dict, name: str) -> float:
    """0.5 plus what ``name`` adds beyond the sets' differences (:func:`gain`), or its AUC when nothing is
    subtracted from it: the AUC-scale reading a level is set from when the sets differ."""
    found = gain(res, name)
    return res["attacks"][name]["auc"] if found is None else 0.5 + found[0]


def gain_sentence(res: dict, name: str) -> str:
    """"gap_k adds +0.005 AUC (95% interval +0.002 to +0.010) beyond the blind baseline (its AUC 1.000)"."""
    found = gain(res, name)
    auc = res["attacks"][name]["auc"]
    if found is None:
        return f"{name}, calibrated by models that never saw the members, reaches AUC {auc:.3f}"
    diff, ci = found
    interval = f" (95% interval {ci[0]:+.3f} to {ci[1]:+.3f})" if ci else ""
    return f"{name} adds {diff:+.3f} AUC{interval} beyond {beyond_what(res)} (its AUC {auc:.3f})"


def prior_sentence(check: dict | None) -> str | None:
    """The verdict's sentence when the reference already tells the sets apart, else None."""
    prior = (check or {}).get("reference") or {}
    if not prior.get("differ"):
        return None
    lo, hi = prior["auc_ci95"] or (float("nan"), float("nan"))
    return (f"The reference model, which never saw the members, already tells them apart: its own {prior['best']} "
            f"gives AUC {prior['auc']:.3f} (95% interval {lo:.3f}–{hi:.3f}; Mann–Whitney p = "
            f"{prior['p_adjusted']:.2g} over its {len(prior['attacks'])} attacks). The sets differ in a way a model "
            "that never saw them sees; only the reference-calibrated attacks and what an attack adds beyond the "
            "reference's own score are evidence of memorisation.")


def beyond_what(res: dict) -> str:
    """"the blind baseline", "the reference's own scores" or both: what a run's evidence is read beyond."""
    return " and ".join(what for what, on in (("the blind baseline", sets_differ(res)),
                                              ("the reference's own scores", reference_differs(res))) if on)


def set_check_sentence(check: dict | None) -> str | None:
    """The verdict's opening sentence when the sets differ without the model, else None."""
    if not check or not check.get("differ"):
        return None
    ci = check.get("auc_ci95")  # None without resamples (bootstrap 0)
    interval = f"95% interval {ci[0]:.3f}–{ci[1]:.3f}" if ci else "no interval"
    test = (f"; held-out test p = {check['p_adjusted']:.2g} over both baselines"
            if check.get("p_adjusted") is not None else "")
    return (f"Members and non-members differ without the model: the blind baseline {check['best']} tells them apart "
            f"with AUC {check['auc']:.3f} ({interval}{test}) from their text alone; only what an "
            "attack adds beyond it is evidence of memorisation.")


def ngram_sentence(overlap: dict | None) -> str | None:
    """"Non-members' 13-word runs found in the members: mean 0.4%, largest 3.1%; none is a near-copy." (None
    without the figures)."""
    found = ((overlap or {}).get("ngrams") or {})
    if not found:
        return None
    n = max(found, key=int)
    f = found[n]
    if f["mean"] is None:
        return f"No non-member has {n} words, so no {n}-word run is compared with the members."
    copies = (f"{f['near_copies']:,} of {f['scored']:,} share half or more of them with the members (near-copies: "
              "members in all but name)" if f["near_copies"] else "none is a near-copy")
    return (f"Non-members' {n}-word runs found in the members: mean {_percent(f['mean'])}, largest "
            f"{_percent(f['max'])}; {copies}.")


def near_copy_note(overlap: dict | None) -> str | None:
    """A caveat when some non-members are near-copies of members (most of their longest n-grams shared)."""
    found = (overlap or {}).get("ngrams") or {}
    if not found or not found[max(found, key=int)]["near_copies"]:
        return None
    return ("Caveat: " + ngram_sentence(overlap) + " An attack that scores a near-copy like a member is right about "
            "its text and wrong about its label.")
