"""Claims of the RAG membership papers (S²MIA, MBA, the interrogation attack), as the tuple :data:`RAG_CLAIMS` that
:mod:`lmaudit.claims.table` appends, with their judges. Both read ``rag-membership``: per setting without a defence
(store size, retrieval depth) and per seed, paired 95% intervals from the experiment's own bootstrap. The papers
report AUC and TPR against chance and against each other, never the difference to the generator without retrieval
or a size for it, so these rows read the direction alone (DESIGN.md's rule with no effect).

The experiment runs on a generator that follows a chat prompt; the tiny models here are docstring language models
that follow none, so a record whose generator is not a named pretrained model is the tiny regime's and one whose
generator is one is the real model's: each column reads only its own."""

from __future__ import annotations

from functools import partial

from lmaudit.claims.base import UNTESTABLE, Claim, Finding, judged_seeds, one_seed
from lmaudit.claims.verdicts import combine, single
from lmaudit.models.defaults import NAMED
from lmaudit.rag.system import CONTROL

RAG = "RAG membership (S²MIA, MBA, interrogation)"
NAME = "rag-membership"
POWER = "rag-membership-s2mia"  # S²MIA alone on 150 + 150 documents a seed


def _settings(rec: dict, real: bool) -> tuple[list[dict], Finding | None]:
    """The record's settings without a defence, or a finding that the record is the other regime's."""
    generator = rec["experiment"]["generator"]
    if (generator in NAMED) != real:
        why = ("the RAG experiment questions a generator that follows a chat prompt; the tiny models are docstring "
               f"language models that follow none (`{NAME}` ran on `{generator}`)") if not real else (
            f"`{NAME}` ran on `{generator}`, not on a pretrained model")
        return [], Finding(f"no {'tiny' if not real else 'real'}-model run", single(UNTESTABLE), why)
    return [s for s in rec["settings"] if s["defence"] == "none"], None


def _defended(rec: dict, attack: str) -> str:
    """The defence's settings for one attack, as text: its AUC and difference to the control per seed."""
    out = []
    for s in rec["settings"]:
        if s["defence"] != "none":
            diffs = [c["attacks"][attack]["vs_prior"] for c in s["per_seed"] if c["attacks"][attack].get("vs_prior")]
            text, _ = judged_seeds(diffs) if diffs else ("no control", None)
            out.append(f"with defence '{s['defence']}' (store {s['store_size']}, top-{s['top_k']}): {text}")
    return "; ".join(out)


def _means(cells: list[dict], attack: str) -> str:
    """Mean score over seeds of members / non-members, with retrieval and without (what an interval of [0, 0]
    means: the same score everywhere)."""
    def mean(column: str, label: int) -> str:
        v = [x for c in cells for x, y in zip(c["scores"].get(column, []), c["scores"]["label"]) if y == label]
        return f"{sum(v) / len(v):.3f}" if v else "n/a"
    return (f"mean score members / non-members {mean(attack, 1)} / {mean(attack, 0)} with retrieval, "
            f"{mean(attack + CONTROL, 1)} / {mean(attack + CONTROL, 0)} without")


def beats_control(recs: dict[str, dict], *, attack: str, name: str = NAME, also: tuple[str, ...] = (),
                  real: bool = False) -> Finding:
    """``attack`` against the system above the same attack against its generator without retrieval: per setting
    without a defence and per seed, AUC(system) − AUC(control) with its paired interval, on direction; ``also``:
    further runs of the experiment (more documents) read the same way where they ran the attack."""
    names = [name] + [n for n in also if n in recs and attack in recs[n]["experiment"]["attacks"]]
    lines, verdicts = [], []
    for n in names:
        rec = recs[n]
        settings, other = _settings(rec, real)
        if other is not None:
            return other
        e = rec["experiment"]
        for s in settings:
            diffs = [c["attacks"][attack]["vs_prior"] for c in s["per_seed"]]
            text, v = judged_seeds(diffs)
            verdicts.append(v)
            aucs = ", ".join(f"{100 * c['attacks'][attack]['auc']:.1f} vs "
                             f"{100 * c['attacks'][attack]['control_auc']:.1f}" for c in s["per_seed"])
            lines.append(f"`{n}` ({e['n_members']} + {e['n_nonmembers']}), {s['label']}: AUC {aucs}; Δ {text}; "
                         f"{_means(s['per_seed'], attack)}")
        defended = _defended(rec, attack)
        lines += [f"`{n}` {defended}"] if defended else []
    e = recs[name]["experiment"]
    return Finding(f"{attack}: AUC with retrieval vs without, and the paired difference per seed (no size from "
                   f"the papers: direction only). " + "; ".join(lines), combine(verdicts),
                   f"generator `{e['generator']}`, BM25 store; interrogation questions {e['question_source']}.",
                   one_seed=any(one_seed(recs[n]) for n in names))


def strongest(recs: dict[str, dict], *, attack: str = "interrogation", name: str = NAME, real: bool = False
              ) -> Finding:
    """``attack`` ahead of every other attack of the run: per setting without a defence, other attack and seed, the
    paired AUC difference with its interval, on direction (the paper's TPR at 1% FPR needs 100 non-members a seed:
    shown where the record resolves it)."""
    rec = recs[name]
    settings, other = _settings(rec, real)
    if other is not None:
        return other
    lines, verdicts = [], []
    others = [a for a in rec["experiment"]["attacks"] if a != attack]
    for s in settings:
        for o in others:
            diffs = [c["compare"][f"{attack} - {o}"]["auc"] for c in s["per_seed"]]
            text, v = judged_seeds(diffs)
            verdicts.append(v)
            tprs = [c["compare"][f"{attack} - {o}"].get("tpr@1%fpr") for c in s["per_seed"]]
            shown = ("; TPR@1%FPR Δ " + ", ".join(f"{100 * t['diff']:+.1f}" for t in tprs)) if all(tprs) else ""
            lines.append(f"{s['label']}, {attack} − {o}: AUC Δ {text}{shown}")
    n0 = rec["experiment"]["n_nonmembers"]
    return Finding(f"AUC({attack}) − AUC(each other attack), paired, per seed (no size: direction only). "
                   + "; ".join(lines), combine(verdicts),
                   (f"TPR at 1% FPR needs at least 100 non-members a seed; {n0} here, so the AUC is compared. "
                    if n0 < 100 else "") + f"Generator `{rec['experiment']['generator']}`; questions "
                   f"{rec['experiment']['question_source']}.", one_seed=one_seed(rec))


def _both(judge, **kw) -> dict:
    return {"judge": partial(judge, real=False, **kw), "real_judge": partial(judge, real=True, **kw)}


RAG_CLAIMS = (
    Claim(RAG, "S²MIA finds a document in the store beyond what the generator knows without retrieval",
          "S²MIA's AUC well above the baselines on NQ and TriviaQA (Li et al. 2024); no control without retrieval",
          (NAME,), effect="none from the paper: direction only", real_experiments=(NAME, POWER),
          **_both(beats_control, attack="s2mia", also=(POWER,))),
    Claim(RAG, "MBA finds a document in the store beyond what the generator knows without retrieval",
          "MBA's fill accuracy separates members (Liu et al. 2025); no control without retrieval", (NAME,),
          effect="none from the paper: direction only", real_experiments=(NAME,), **_both(beats_control, attack="mba")),
    Claim(RAG, "The interrogation attack finds a document beyond what the generator knows without retrieval",
          "natural yes/no questions, under 30 per document (Naseh et al. 2025); no control without retrieval",
          (NAME,), effect="none from the paper: direction only", real_experiments=(NAME,),
          **_both(beats_control, attack="interrogation")),
    Claim(RAG, "The interrogation attack is the strongest of the three",
          "about 2× the TPR at 1% FPR of S²MIA and MBA (Naseh et al. 2025)", (NAME,),
          effect="none as an AUC difference: direction only", real_experiments=(NAME,), **_both(strongest)),
)
