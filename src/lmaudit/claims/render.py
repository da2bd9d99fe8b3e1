"""CLAIMS.md from the judged claims: reading the results (with their array files), judging each claim in both regimes,
the verdict cells and counts, and the Markdown. The claims themselves: :mod:`lmaudit.claims.table`."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from lmaudit.claims import models as md
from lmaudit.claims.base import Finding
from lmaudit.claims.verdicts import NOT_RUN, UNJUDGED, VERDICTS, half_width_ratio, single
from lmaudit.data.snapshot import embedded_hash
from lmaudit.errors import LmauditError

REAL = "SmolLM2-135M"


def load_results(root: Path) -> dict[str, dict]:
    """``{name: results.json}`` of every experiment folder under ``root``, each with the arrays its ``.npz`` files
    hold beside it (``gains.npz`` as ``gains``: {name: array}) where the record has no key of that name (unreadable
    files are errors)."""
    out = {}
    for f in sorted(root.glob("*/results.json")):
        try:
            rec = json.loads(f.read_text())
            for z in sorted(f.parent.glob("*.npz")):
                if z.stem not in rec:
                    with np.load(z) as arrays:
                        rec[z.stem] = {k: arrays[k] for k in arrays.files}
        except (OSError, ValueError) as e:
            raise LmauditError(f"{f}: cannot read ({e})",
                               hint=f"rerun the experiment: lmaudit run experiments/{f.parent.name}.toml") from None
        out[f.parent.name] = rec
    return out


def judge_one(experiments: tuple[str, ...], judge, recs: dict[str, dict], *, any_of: bool = False) -> Finding:
    """One judge's finding; a missing experiment is 'not run', one written before a field existed says which.

    ``any_of``: the judge reads whichever of ``experiments`` exist (it needs one), else the first must exist.
    """
    present = [e for e in experiments if e in recs]
    if not present or (not any_of and experiments[0] not in recs):
        return Finding(f"`results/{experiments[0]}` is missing", single(NOT_RUN),
                       f"run `lmaudit run experiments/{experiments[0]}.toml`")
    try:
        return judge(recs)
    except KeyError as e:
        return Finding(f"`results/{present[0]}/results.json` lacks {e} (written by an older lmaudit)", single(NOT_RUN),
                       f"rerun `lmaudit run experiments/{present[0]}.toml`")


def judge_claims(claims, recs: dict[str, dict]) -> list[tuple]:
    """Every claim's finding on the tiny models, and on the real model (None: no experiment of it tests the claim)."""
    out = []
    for claim in claims:
        real = judge_one(claim.real_experiments, claim.real_judge, recs, any_of=True) if claim.real_judge else None
        out.append((claim, judge_one(claim.experiments, claim.judge, recs), real))
    return out


def cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def verdict_cell(f: Finding, other_corpus: bool = False, *, power: bool = False) -> str:
    """'**mixed**: 1 reproduced, 2 inconclusive (one seed; h/E 1.3)': the verdict, a mixed row's per-seed counts, and
    its notes; with ``power``, the interval half-width ÷ the paper's effect (h/E, its range over the row's intervals)
    where the row states an effect."""
    v = f.verdict
    judged = v not in UNJUDGED
    text = f"**{v}**" + (f": {v.counts}" if v == "mixed" and hasattr(v, "counts") else "")
    ratio = half_width_ratio(v) if power else None
    notes = (["one seed"] * (f.one_seed and judged) + ["some parts points only"] * (f.points and judged)
             + ["from another corpus than the header's"] * (other_corpus and judged)
             + ([f"h/E {power_text(*ratio)}"] if ratio is not None else []))
    return text + (f" ({'; '.join(notes)})" if notes else "")


def power_text(lo: float, hi: float) -> str:
    """'1.3', or '0.45–60' where a row's intervals differ in half-width ÷ effect (two significant figures)."""
    a, b = f"{lo:.2g}", f"{hi:.2g}"
    return a if a == b else f"{a}–{b}"


def counts(findings: list[Finding | None]) -> str:
    """'reproduced 2, smaller 1, …, mixed 4, …': each word of :data:`VERDICTS` a row reads, counted apart."""
    verdicts = [str(f.verdict) if f else NOT_RUN for f in findings]
    return ", ".join(f"{v} {n}" for v in VERDICTS if (n := verdicts.count(v)))


RULE = ("Every verdict follows one rule (`lmaudit/claims/verdicts.py`). Each row states the paper's effect E, "
        "oriented so that E > 0 is the paper's direction, and per seed the paired 95% interval [lo, hi] of the same "
        "difference on our data falls in one of five categories: **reproduced** (lo > 0 and hi ≥ E: the paper's "
        "direction, its size not excluded); **smaller** (lo > 0 and hi < E: the direction holds, the paper's size is "
        "excluded); **inconclusive** (lo ≤ 0 and hi ≥ E: holds both 0 and the paper's effect); **not reproduced** "
        "(lo ≤ 0 and 0 ≤ hi < E: the paper's effect excluded, no effect not); **against the claim** (hi < 0). Where "
        "the paper gives no size the row says so and reads the direction alone (lo > 0 reproduced, hi < 0 against, "
        "else inconclusive). A row's verdict is the category its seeds share, over every comparison of the row; seeds "
        "that disagree make it **mixed**, shown with the per-seed counts (an inconclusive seed never counts as "
        "support). Where the experiment stores no interval of the compared quantity, one is computed from what it "
        "stores (a bootstrap over texts or records; for AUCs of independent or unpaired rows, Hanley and McNeil's "
        "standard errors from the member and non-member counts, said so), else the row reads **points only**, which "
        "is not a verdict, and says what the experiment must store. A limit of ours (too few orders, texts or "
        "seeds) reads **not testable at this size**, never against; **not testable here**: no experiment here can "
        "measure it (the row says why); **not run**: its experiment has not been run. Parts of a row that are not "
        "judged are counted beside the categories. For SmolLM2-135M, h/E is the interval half-width ÷ the paper's "
        "effect (its range over the row's intervals): above 0.5 an interval centred on the paper's effect still "
        "holds 0. The files of `experiments/power/` run SmolLM2 rows at the sizes that narrow it (each file's header "
        "says by how much and at what cost); none of them has run here.")


def markdown(judged: list[tuple], recs: dict[str, dict], command: str) -> str:
    """The Markdown of CLAIMS.md from ``judged`` (:func:`judge_claims`) and the records they were read from."""
    corpus = embedded_hash()
    other = {n: r["corpus"] for n, r in recs.items() if r.get("corpus") not in (None, corpus)}
    lines = ["# The papers' claims, tested here", "",
             f"Generated by `{command}` from the `results.json` of every experiment in this folder; do not edit by "
             "hand. Each row: the claim, the paper's own figure and the effect the verdict is judged against, what "
             "lmaudit measured (95% intervals, stored or computed, said how), the verdict and the regime that "
             f"explains a difference. Two regimes: **tiny models** {md.tiny_models(recs)}; and **{REAL}**: "
             f"{md.real_models(recs)}. Every model trained here is built from the embedded corpus `{corpus[:8]}…` "
             f"({md.embedded_corpus_text()}); a row that reads a result built from another corpus says so in its "
             "verdict and names that corpus beside the experiment. A verdict is about its regime, not about the "
             "papers' 1–12B models; a claim no experiment on the real model tests yet says 'not run' there. Text "
             "marked 'possible reason' is a hypothesis no experiment here has tested.", "", RULE, "",
             f"Verdicts, tiny models: {counts([f for _, f, _ in judged])}. On {REAL}: "
             f"{counts([r for _, _, r in judged])}.", ""]
    for paper in dict.fromkeys(c.paper for c, _, _ in judged):
        lines += [f"## {paper}", "",
                  f"| claim | paper | tiny models | verdict | {REAL} | verdict | regime / why | experiment |",
                  "|---|---|---|---|---|---|---|---|"]
        for c, f, r in judged:
            if c.paper != paper:
                continue
            names = [*c.experiments, *c.real_experiments]
            links = ", ".join(f"[{e}]({e}/table.md)" + (f" (corpus `{other[e][:8]}…`)" if e in other else "")
                              for e in names if e in recs) or c.experiments[0]
            mixed = [any(e in other for e in group) for group in (c.experiments, c.real_experiments)]
            real_ours, real_verdict = (r.ours, verdict_cell(r, mixed[1], power=True)) if r else (
                "no experiment on the real model tests this claim yet", f"**{NOT_RUN}**")
            why = f.regime + (f" {REAL}: {r.regime}" if r and r.verdict != NOT_RUN else "")
            figure = f"{c.paper_figure}. Effect judged against: {c.effect}"
            lines.append("| " + " | ".join(cell(x) for x in (c.claim, figure, f.ours, verdict_cell(f, mixed[0]),
                                                             real_ours, real_verdict, why, links)) + " |")
        lines.append("")
    return "\n".join(lines)
