"""Membership inference against a retrieval-augmented system through its answers: is a document in its store?

The job questions a :class:`~lmaudit.rag.system.RagSystem` (a local pipeline or a served endpoint) about every
member (a document in its store) and non-member with each attack of :mod:`lmaudit.rag.attacks`, and reports per
attack the AUC and the TPR at 10% and 1% FPR with their 95% stratified bootstrap intervals
(:func:`~lmaudit.metrics.summarize_attacks`) and the queries it asked per document.

**The no-retrieval control.** Given a control system (the same generator with an empty store), every attack is also
run against it with the same questions; its scores are the attack's prior, as a reference model's are for weights:
``vs_prior`` is the paired difference AUC(system) − AUC(control) with its interval, ``beyond`` True when the
interval excludes 0. What the store adds beyond the generator's own knowledge is that difference.

**The set checks** (:func:`~lmaudit.runs.set_check.two_set_check`, as ``mia`` runs them): the blind baselines read
the documents alone (out of fold), and each attack gets ``vs_blind``, its AUC minus the best baseline's with a paired
interval; the control's own scores are checked as a reference model's are (a control that tells the sets apart sees
a difference the store does not explain). ``verdict`` reads "cannot tell" whenever either check finds the sets
differ without the system.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from lmaudit.data.loaders import TextSet
from lmaudit.data.overlap import check_sets
from lmaudit.errors import LmauditError, SettingError
from lmaudit.models.handle import ModelHandle
from lmaudit.progress import progress
from lmaudit.rag import interrogation
from lmaudit.rag.attacks import ATTACKS, DEFAULT_ATTACKS, SELECTIONS, QuestionSet, mask_documents, mba_plan, s2mia_plan
from lmaudit.rag.system import CONTROL, DEFAULT_TEMPLATE, ask, check_template, questioning
from lmaudit.report.document import Figure, Report, Section
from lmaudit.report.plots import roc_curves
from lmaudit.report.tables import facts_common
from lmaudit.runs.common import Job, RunResult, register_job, write_results
from lmaudit.runs.set_check import PRIOR, two_set_check
from lmaudit.settings import boolean, check_settings, each, fraction, integer, one_of, seed_value, setting, text

TYPE = "rag-mia"


@dataclass
class RagConfig:
    """Settings of a RAG membership audit (recorded in ``results.json``): the ``attacks`` (``s2mia`` and ``mba`` by
    default; ``interrogation`` when named); for a local pipeline the retrieval depth ``top_k``, the prompt
    ``template`` (with ``{context}`` and ``{question}``), ``max_new_tokens`` of greedy generation (a served
    system's ``max_tokens``), ``chat_template`` (None: the generator's when it has one) and ``batch_size`` (prompts
    a local model answers at once); S²MIA's ``query_fraction`` (the share of a document's words it asks with);
    MBA's ``n_masks`` and ``mask_selection`` (``proxy``: the words a proxy model finds hardest; ``spread``: the
    longest word of each of ``n_masks`` runs); the interrogation attack's ``n_questions`` per document and
    ``question_source`` (``helper``: a helper model writes them, as published; ``statements``: made from the
    document, no model); ``control`` (a local pipeline's generator also questioned with an empty store);
    ``n_bootstrap`` resamples of the intervals and their ``seed``.

    Examples
    --------
    >>> lmaudit.RagConfig(top_k=5).top_k
    5
    >>> lmaudit.RagConfig(attacks=["s2mia", "guess"])
    Traceback (most recent call last):
    ...
    lmaudit.errors.SettingError: unknown RAG attack 'guess' (hint: use one of s2mia, mba, interrogation)
    """

    attacks: list = setting(default_factory=lambda: list(DEFAULT_ATTACKS),
                            check=each(one_of(ATTACKS, noun="RAG attack"), nonempty=True))
    top_k: int = setting(3, check=integer(1, 100))
    template: str = setting(DEFAULT_TEMPLATE, check=text())
    max_new_tokens: int = setting(64, check=integer(1, 4096))
    chat_template: bool | None = setting(None, check=boolean(optional=True))
    query_fraction: float = setting(0.5, check=fraction(above_zero=True))
    n_masks: int = setting(5, check=integer(1, 100))
    mask_selection: str = setting("proxy", check=one_of(SELECTIONS))
    n_questions: int = setting(10, check=integer(1, 100))
    question_source: str = setting("helper", check=one_of(interrogation.QUESTION_SOURCES))
    batch_size: int = setting(8, check=integer(1, 1024))
    control: bool = setting(True, check=boolean())
    blind: bool = setting(True, check=boolean())  # the blind baselines: do the documents differ without the system?
    n_bootstrap: int = setting(1000, check=integer(0, 100_000), flag="--bootstrap")
    seed: int = setting(0, check=seed_value())

    def __post_init__(self) -> None:
        check_settings(self)
        try:
            check_template(self.template)
        except LmauditError as exc:
            raise SettingError("template", "{name}: " + exc.message.replace("{", "{{").replace("}", "}}"),
                               hint=exc.hint) from None
        if len(set(self.attacks)) != len(self.attacks):
            raise SettingError("attacks", "{name} names an attack twice, got " + repr(self.attacks).replace(
                "{", "{{").replace("}", "}}"))


def _plans(documents: list[str], names: list[str], cfg: RagConfig, proxy, helper) -> dict[str, QuestionSet]:
    """Each attack's questions and scorer (MBA's masks and the interrogation's questions made here, before the
    system is asked anything)."""
    plans: dict[str, QuestionSet] = {}
    if "s2mia" in cfg.attacks:
        plans["s2mia"] = s2mia_plan(documents, split=cfg.query_fraction)
    if "mba" in cfg.attacks:
        plans["mba"] = mba_plan(mask_documents(documents, n_masks=cfg.n_masks, selection=cfg.mask_selection,
                                               proxy=proxy, names=names))
    if "interrogation" in cfg.attacks:
        made = (interrogation.statement_questions(documents, cfg.n_questions, seed=cfg.seed, names=names)
                if cfg.question_source == "statements"
                else interrogation.helper_questions(helper, documents, cfg.n_questions, names=names,
                                                    answer=_short(helper, interrogation.TRUTH_TOKENS)))
        plans["interrogation"] = interrogation.plan(made)
    return {a: plans[a] for a in cfg.attacks}


def _scores(plan: QuestionSet, system, bar) -> np.ndarray:
    """Every document's score under one attack's ``plan`` on ``system`` (the answers themselves are not kept)."""
    flat = [q for qs in plan.questions for q in qs]
    answers = iter(ask(system, flat, bar=bar))
    return np.array([plan.score(i, [next(answers) for _ in qs]) for i, qs in enumerate(plan.questions)])


def _per_document(plan: QuestionSet) -> float | int:
    """The queries an attack asked per document (their mean where documents got different numbers)."""
    counts = [len(qs) for qs in plan.questions]
    mean = sum(counts) / len(counts)
    return int(mean) if mean == int(mean) else round(mean, 2)


def run_rag_mia(system, members: TextSet, nonmembers: TextSet, *, config: RagConfig | None = None, control=None,
                proxy: ModelHandle | None = None, helper=None, overlap: dict | None = None) -> RagResult:
    """Question ``system`` (and ``control``, the same generator without retrieval, when given) about every member
    and non-member with each of ``config.attacks``; ``proxy`` chooses MBA's masks (``mask_selection="proxy"``);
    ``helper`` (a function of prompts to answers) writes the interrogation's questions
    (``question_source="helper"``)."""
    cfg = config or RagConfig()
    start = time.perf_counter()
    if overlap is None:
        overlap = check_sets({"members": members, "nonmembers": nonmembers}, [("members", "nonmembers")])
    records = members.records + nonmembers.records
    documents = [r.target for r in records]
    labels = np.array([1] * len(members) + [0] * len(nonmembers), dtype=np.int64)
    names = [f"{'member' if y else 'non-member'} '{r.id}'" for r, y in zip(records, labels)]
    plans = _plans(documents, names, cfg, proxy, helper)
    systems = [(system, "")] + ([(control, CONTROL)] if control is not None else [])
    asked = sum(len(qs) for plan in plans.values() for qs in plan.questions)
    scores = {}
    with questioning(system, control), progress("RAG questions", total=asked * len(systems)) as bar:
        for attack, plan in plans.items():
            for which, suffix in systems:
                scores[attack + suffix] = _scores(plan, which, bar)
    prior = {a: scores[a + CONTROL] for a in cfg.attacks} if control is not None else None
    check, metrics, blind = two_set_check(members, nonmembers, {a: scores[a] for a in cfg.attacks}, prior=prior,
                                          blind=cfg.blind, n_resamples=cfg.n_bootstrap, seed=cfg.seed)
    per_document = {a: _per_document(plan) for a, plan in plans.items()}
    attacks = {a: {**metrics[a], "queries_per_document": per_document[a]} for a in cfg.attacks}
    for entry in attacks.values():  # the control's scores are named as the records name them
        if entry.get("vs_prior"):
            entry["vs_prior"]["prior"] = entry["vs_prior"]["prior"].replace(PRIOR, "") + CONTROL
    controls = {a: {k: v for k, v in metrics[PRIOR + a].items() if k != "vs_best"} for a in (prior or {})}
    table = {"id": [r.id for r in records], "label": labels.tolist(),
             **{name: [float(v) for v in s] for name, s in {**scores, **blind}.items()},
             **{column: values for plan in plans.values() for column, values in plan.detail.items()}}
    uses = {"proxy": "mba" in cfg.attacks and cfg.mask_selection == "proxy",
            "helper": "interrogation" in cfg.attacks and cfg.question_source == "helper"}
    return RagResult({
        "type": TYPE, "system": system.describe(), "control": None if control is None else control.describe(),
        "proxy": {"path": proxy.path, "fingerprint": proxy.fingerprint} if uses["proxy"] and proxy is not None
        else None,
        "helper": _describe(helper) if uses["helper"] and helper is not None else None,
        "config": asdict(cfg), "n_members": len(members), "n_nonmembers": len(nonmembers), "overlap": overlap,
        "attacks": attacks, "control_attacks": controls, "set_check": check,
        "verdict": rag_verdict(attacks, check),
        "queries": {"per_document": per_document, "system": asked, "control": asked if control is not None else 0},
        "runtime_s": time.perf_counter() - start, "records": table})


def _short(helper, max_new_tokens: int):
    """A model helper answering with at most ``max_new_tokens`` (a function of prompts answers as it is)."""
    answering = getattr(helper, "answering", None)
    return answering(max_new_tokens) if answering is not None else helper


def _describe(helper) -> dict:
    """What identifies the helper model in ``results.json``; a model's also says how many new tokens it answers its
    own questions within (``answers_within``: :data:`~lmaudit.rag.interrogation.TRUTH_TOKENS`)."""
    describe = getattr(helper, "describe", None)
    if describe is None:
        return {"function": getattr(helper, "__qualname__", repr(helper))}
    return {**describe(), "answers_within": _short(helper, interrogation.TRUTH_TOKENS).max_new_tokens}


def rag_verdict(attacks: dict, check: dict) -> str:
    """What the run says of the store, read from the intervals: "cannot tell" when the documents differ without the
    system (a blind baseline, or the no-retrieval control, tells them apart); else "members detected" when an attack's
    AUC interval lies above 0.5, above the best blind baseline's and above the control's (each that was run);
    else "no evidence"."""
    if check.get("differ") or (check.get("reference") or {}).get("differ"):
        return "cannot tell: the documents differ without the system (see set_check)"
    if any(not m.get("auc_ci95") for m in attacks.values()):
        return "no verdict: no interval was computed (n_bootstrap = 0)"
    for name, m in attacks.items():
        compared = {"chance": m["auc_ci95"][0] > 0.5, **{what: m[k]["beyond"] for k, what in
                    (("vs_blind", "the blind baselines"), ("vs_prior", "the control without retrieval")) if m.get(k)}}
        if all(compared.values()):
            unchecked = [what for k, what in (("vs_blind", "the blind baselines"),
                                              ("vs_prior", "a control without retrieval")) if not m.get(k)]
            return (f"members detected: {name}'s AUC lies above {', '.join(compared)}"
                    + (f" ({' and '.join(unchecked)} not run: what the sets differ by alone is not ruled out)"
                       if unchecked else ""))
    return "no evidence: no attack's AUC interval lies above chance and every check that was run"


class RagResult(RunResult):
    """A RAG membership audit: ``to_frame()`` one row per document (its label and every attack's score, the
    control's too); ``payload["attacks"]`` the metrics per attack."""

    def attack_frame(self) -> pd.DataFrame:
        """One row per attack: AUC and its interval, TPR at 1% FPR, queries per document, the control's AUC."""
        rows = []
        for name, m in self.payload["attacks"].items():
            prior = m.get("vs_prior") or {}
            rows.append({"attack": name, "auc": m["auc"], "auc_low": (m["auc_ci95"] or [None, None])[0],
                         "auc_high": (m["auc_ci95"] or [None, None])[1], "tpr@1%fpr": m["tpr@1%fpr"],
                         "tpr@10%fpr": m["tpr@10%fpr"], "queries_per_document": m["queries_per_document"],
                         "control_auc": self.payload["control_attacks"].get(name, {}).get("auc"),
                         "beyond_control": prior.get("beyond"),
                         "vs_blind": (m.get("vs_blind") or {}).get("diff"),
                         "beyond_blind": (m.get("vs_blind") or {}).get("beyond")})
        return pd.DataFrame(rows)

    def headline(self) -> str:
        best = max(self.payload["attacks"].items(), key=lambda kv: kv[1]["auc"])
        where = self.payload["system"].get("url") or "the local pipeline"
        return (f"best attack on {where}: {best[0]} AUC {best[1]['auc']:.3f} over {self.payload['n_members']} "
                f"members and {self.payload['n_nonmembers']} non-members; {self.payload['verdict']}")

    def _write(self, out: Path, report: bool) -> Path:
        body = {k: v for k, v in self.payload.items() if k != "records"}
        return write_results(out, body, kind=TYPE, tables={"records.csv": pd.DataFrame(self.payload["records"])},
                             report=report)


def _num(value) -> str:
    return "n/a" if value is None else f"{value:.3f}"  # a TPR the non-members cannot resolve is None


def _pct(interval) -> str:
    return "n/a" if not interval else f"[{interval[0]:.3f}, {interval[1]:.3f}]"


def _diff(entry: dict | None) -> str:
    if not entry:
        return "-"
    return f"{entry['diff']:+.3f} {_pct(entry.get('ci95'))}" + (" beyond" if entry.get("beyond") else "")


def rag_report(run: Path, res: dict, *, where: Path | None = None, show_pii: bool = False) -> Report:
    """The report of a RAG membership audit: the verdict, per attack its figures beside the control's and the blind
    baselines', the set checks, and the ROC curves of the attacks and the control (from ``records.csv``)."""
    system = res["system"]
    header = ["attack", "AUC", "95% CI", "TPR@10%FPR", "TPR@1%FPR", "queries/doc", "without retrieval",
              "Δ vs control", "Δ vs blind"]
    rows = [[name, f"{m['auc']:.3f}", _pct(m.get("auc_ci95")), _num(m.get("tpr@10%fpr")), _num(m.get("tpr@1%fpr")),
             str(m["queries_per_document"]),
             f"{res['control_attacks'][name]['auc']:.3f}" if name in res["control_attacks"] else "-",
             _diff(m.get("vs_prior")), _diff(m.get("vs_blind"))] for name, m in res["attacks"].items()]
    check = res.get("set_check") or {}
    blind = [[name, f"{b['auc']:.3f}", _pct(b.get("auc_ci95")), f"{b['held_out_p']:.3g}"]
             for name, b in (check.get("baselines") or {}).items()]
    verdict = res.get("verdict", "no verdict recorded")
    sections = [Section("Verdict", verdict + ". Each interval is a 95% stratified bootstrap interval "
                        f"({res['config']['n_bootstrap']:,} resamples); 'beyond' marks a difference whose interval "
                        "lies above 0.", table=(header, rows))]
    if blind:
        sections.append(Section("Do the documents alone tell the sets apart?",
                                "The blind baselines classify the documents alone (out of fold); the sets differ "
                                "without the system when a held-out test finds one above chance "
                                f"(Bonferroni-adjusted p = {check['p_adjusted']:.3g} against {check['alpha']}).",
                                table=(["baseline", "AUC", "95% CI", "held-out p"], blind)))
    records = run / "records.csv"
    if records.exists():
        frame = pd.read_csv(records)
        curves = {c: frame[c].to_numpy() for c in frame.columns if c in res["attacks"] or c.endswith(CONTROL)}
        sections.append(Section("ROC curves", "Each attack on the system and on the generator without retrieval.",
                                figures=[Figure("roc", "ROC of every attack, with and without retrieval",
                                                roc_curves(frame["label"].to_numpy(), curves))]))
    facts = {"system": str(system.get("url") or "local pipeline"), "retrieval depth": str(system.get("top_k")),
             "store size": str(system.get("store_size")), "members": str(res["n_members"]),
             "non-members": str(res["n_nonmembers"]), "questions asked": str(res["queries"]["system"]),
             **facts_common(res)}
    return Report("lmaudit RAG membership audit", f"Folder: {where or run}", facts, sections)


JOB = register_job(Job("rag_mia", TYPE, "rag-mia", RagResult, run_rag_mia, RagConfig, rag_report))
