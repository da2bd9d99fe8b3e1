"""Build the report of a run folder written by ``mia``, ``demo`` or ``run``."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pandas as pd

from lmaudit.errors import LmauditError, warn
from lmaudit.folders import MANIFEST, missing_folder_hint, verify_folder
from lmaudit.metrics import auc
from lmaudit.models.kinds import UNREAD_SETTINGS
from lmaudit.report import plots
from lmaudit.report.cells import (
    BLIND_NOTE,
    PRIOR_NOTE,
    READING_NOTE,
    metric_rows,
)
from lmaudit.report.document import Figure, Report, Section, write
from lmaudit.report.kinds import REPORTS
from lmaudit.report.privacy import privacy_section
from lmaudit.report.records import folder_texts, records_section
from lmaudit.report.summary import (
    audit_summary,
    experiment_summary,
    mia_summary,
    pii_summary,
    strongest_attack,
)
from lmaudit.report.tables import asr_rows, audit_rows, facts_common
from lmaudit.report.validity import ngram_sentence


def read_scores(path: Path, res: dict) -> pd.DataFrame:
    """``scores.parquet`` of a mia run, refused unless it holds every attack of ``results.json`` for every record."""
    try:
        scores = pd.read_parquet(path)
    except Exception as exc:  # pyarrow raises several types for a damaged or non-parquet file
        raise LmauditError(f"{path}: unreadable ({type(exc).__name__})",
                           hint="re-run the mia command that wrote this folder") from None
    missing = [c for c in ("id", "label", *res["attacks"]) if c not in scores.columns]
    n = res["n_members"] + res["n_nonmembers"]
    if missing or len(scores) != n or int(scores["label"].sum()) != res["n_members"]:
        what = f"no column {', '.join(missing)}" if missing else f"{len(scores)} rows for {n} records"
        raise LmauditError(f"{path} does not match results.json ({what})",
                           hint="the two files come from different runs; re-run the mia command that wrote this folder")
    return scores


def read_results(path: Path) -> dict:
    """A ``results.json`` as a dict; a truncated or hand-broken file is a one-line error naming it."""
    try:
        res = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise LmauditError(f"{path}: not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg}); the file is "
                           "truncated or was edited", hint="re-run the command that wrote this folder") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise LmauditError(f"{path}: cannot be read ({getattr(exc, 'strerror', None) or exc})") from None
    if not isinstance(res, dict):
        raise LmauditError(f"{path}: expected a JSON object, got {type(res).__name__}",
                           hint="re-run the command that wrote this folder")
    return res


def check_recorded_aucs(run: Path) -> None:
    """For a folder without a manifest: every AUC ``results.json`` states must be the AUC of the scores in
    ``scores.parquet`` (recomputed), so a hand-edited figure is never reported as measured."""
    for folder in (run, run / "dlm"):
        path = folder / "results.json"
        if not path.is_file() or not (folder / "scores.parquet").is_file():
            continue
        res = read_results(path)
        if not isinstance(res.get("attacks"), dict) or "target" not in res:
            continue
        scores = read_scores(folder / "scores.parquet", res)
        labels = scores["label"].to_numpy()
        for name, m in res["attacks"].items():
            measured, recorded = auc(labels, scores[name].to_numpy()), m.get("auc") if isinstance(m, dict) else None
            if isinstance(recorded, bool) or not isinstance(recorded, (int, float)) or \
                    not np.isclose(measured, recorded, rtol=0, atol=1e-6):
                raise LmauditError(f"{path}: {name}'s AUC is {recorded!r} but its scores in scores.parquet give "
                                   f"{measured:.6f}", hint="the folder has no manifest and its files disagree; re-run "
                                                          "the command that wrote it")


def mia_sections(run: Path, res: dict, *, prefix: str = "") -> list[Section]:
    """Sections of one membership-inference run: summary table, ROC, histograms, Q-Skew examples."""

    scores = read_scores(run / "scores.parquet", res)
    labels = scores["label"].to_numpy()
    names = list(res["attacks"])
    by_attack = {n: scores[n].to_numpy() for n in names}
    blind = (res.get("set_check") or {}).get("baselines") or {}
    prior = ((res.get("set_check") or {}).get("reference") or {}).get("attacks") or {}
    header, rows = metric_rows(res["attacks"], res.get("set_check"), details=True)
    n_boot = res.get("config", {}).get("n_bootstrap", 1000)
    kind = res["target"].get("kind", "ar").upper()
    tag = prefix.lower().replace(" ", "_")
    caveats = [[n, note] for n, m in res["attacks"].items() for note in m.get("notes", [])]
    sections = [
        Section(f"{prefix}Membership inference ({kind})",
                f"{res['n_members']} members vs {res['n_nonmembers']} non-members; higher score = more likely a "
                f"member. Intervals are 95% stratified bootstraps ({n_boot:,} resamples, shared by every attack; "
                f"a TPR's interval is in brackets, in %). {READING_NOTE}"
                + (f" {BLIND_NOTE}" if blind else "") + (f" {PRIOR_NOTE}" if prior else "")
                + (f" {ngram_sentence(res.get('overlap'))}" if ngram_sentence(res.get("overlap")) else ""),
                table=(header, rows)),
        Section(f"{prefix}ROC curves", "Linear axes show the bulk; log-log axes show the low false-positive regime "
                "that matters for an audit.",
                figures=[Figure(f"{tag}roc", "ROC, linear axes", plots.roc_curves(labels, by_attack)),
                         Figure(f"{tag}roc_log", "ROC, log-log axes", plots.roc_curves(labels, by_attack, log=True))]),
        Section(f"{prefix}Score distributions",
                figures=[Figure(f"{tag}hist", "Member vs non-member scores",
                                plots.score_histograms(labels, by_attack))]),
    ]
    if res.get("privleak"):
        sections.insert(1, privleak_section(res["privleak"], prefix))
    if caveats:  # right under the table they qualify
        sections.insert(1, Section(f"{prefix}Caveats",
                                   table=(["attack", "what makes its figures unreliable"], caveats)))
    examples = run / "examples.json"
    if examples.exists():  # per attack: the values its statistic reads, for a typical member and non-member
        for name, ex in json.loads(examples.read_text()).items():
            what = ex.get("values",
                          "Per-token gaps Δ between target and reference log-probabilities under cyclic masks")
            sections.append(Section(
                f"{prefix}{name}: what the statistic sees",
                f"{what}, for the member and the non-member whose {name} scores are the medians of their sets.",
                figures=[Figure(f"{tag}{name}_examples", "Distributions of a typical member and non-member",
                                plots.delta_distributions(np.asarray(ex["member"]), np.asarray(ex["nonmember"]),
                                                          member_score=ex["member_score"],
                                                          nonmember_score=ex["nonmember_score"]))]))
    return sections


def privleak_section(found: dict, prefix: str = "") -> Section:
    """MUSE's PrivLeak of every attack against the retrained model's run, with its paired interval."""
    def cell(m: dict) -> str:
        if m.get("privleak") is None:
            return f"undefined ({m.get('undefined') or 'no figure'})"
        ci = m.get("ci95")
        return f"{100 * m['privleak']:+.1f}%" + (f" [{100 * ci[0]:+.1f}, {100 * ci[1]:+.1f}]" if ci else
                                                 f" ({m['ci_note']})" if m.get("ci_note") else "")

    def number(x) -> str:
        return "n/a" if x is None else f"{x:.3f}"

    rows = [[n, number(m.get("auc_unlearned")), number(m.get("auc_retrained")), cell(m)]
            for n, m in sorted(found["attacks"].items(), key=lambda kv: -abs(kv[1].get("privleak") or 0))]
    return Section(f"{prefix}PrivLeak against the retrained model",
                   f"Against {found['retrained']}: PrivLeak = (AUC − AUC retrained) / AUC retrained on the same texts "
                   "(MUSE), with a paired 95% interval. Near 0: as private as retraining; positive: the model still "
                   "tells the forget set apart (under-unlearning); negative: it treats it as more foreign than a "
                   "model that never saw it (over-unlearning).",
                   table=(["attack", "AUC", "AUC retrained", "PrivLeak [95% CI]"], rows))


def _precision(model: dict) -> str:
    """", bfloat16 on cuda:0" for a model record that says how it ran (older results do not)."""
    return f", {model['dtype']} on {model['device']}" if model.get("dtype") else ""


def _long_texts(long: dict | None) -> str:
    """"; 3 members and 1 non-member over 2048 tokens, truncated" (nothing when none were, or for older results)."""
    if not long or not (long.get("members") or long.get("nonmembers")):
        return ""
    done = "scored in overlapping windows" if long["mode"] == "window" else "truncated to their first tokens"
    return f"; {long['members']} member(s) and {long['nonmembers']} non-member(s) over {long['limit']} tokens, {done}"


def _served(model: dict) -> str:
    """"; served model NAME, identity …, top-20 log-probabilities (approximate: mu, sigma)" for a served model."""
    served = model.get("served")
    if not isinstance(served, dict):
        return ""
    access = served.get("access")
    what = f"top-{served['top_k']} log-probabilities" if served.get("top_k") else f"{access} access"
    approx = f" (approximate from them: {', '.join(served['approximate'])})" if served.get("approximate") else ""
    identity = str(model.get("fingerprint", "")).removeprefix("served:")
    return f"; served model {served.get('model')!r}, identity {identity}, {what}{approx}"


def mia_facts(res: dict) -> dict[str, str]:
    ref = res.get("reference")
    cfg = res.get("config", {})
    kind = res["target"]["kind"]
    shown = {k: v for k, v in cfg.items() if k != "params" and k not in UNREAD_SETTINGS.get(kind, ())}
    return {
        "target": f"{res['target']['path']} ({kind}{_precision(res['target'])}, "
                  f"fingerprint {res['target']['fingerprint']}{_served(res['target'])})",
        "reference": "none" if not ref else f"{ref['path']} (fingerprint {ref['fingerprint']}{_served(ref)})",
        "data": f"{res['n_members']} members, {res['n_nonmembers']} non-members" + _long_texts(res.get("long_texts")),
        "seed": str(cfg.get("seed")),
        "configuration": json.dumps(shown),
        **facts_common(res),
    }


def experiment_report(run: Path, res: dict) -> Report:
    """The report of an experiment folder, from the ``tables`` and ``figures`` its ``results.json`` holds.

    Any experiment type renders the same way: one section per table (its caption as the
    text), the figures (PNG files beside ``results.json``) after the last table. A folder
    written before tables were stored is an error with a hint to rebuild it.
    """
    exp = res["experiment"]
    if "tables" not in res:
        raise LmauditError(f"{run / 'results.json'}: the experiment's tables are not stored in it",
                           hint=f"rebuild them with 'lmaudit tables {run}'")
    tabs = res["tables"]
    figs = []
    for f in res.get("figures", []):
        png = run / f["file"]
        if not png.exists():
            raise LmauditError(f"{run}: figure {f['file']} is missing", hint=f"rebuild it with 'lmaudit tables {run}'")
        figs.append(Figure(Path(f["file"]).stem, f["caption"], png.read_bytes()))
    sections = [Section("Results" if i == 0 else "Results (continued)", t["caption"],
                        table=(t["header"], unresolved_cells(t["header"], t["rows"])),
                        figures=figs if i == len(tabs) - 1 else [])
                for i, t in enumerate(tabs)]
    if figs and not tabs:
        sections.append(Section("Figures", figures=figs))
    facts = {"command": res.get("command", ""), "run time": f"{res['runtime_s'] / 60:.1f} min",
             "seeds": ", ".join(map(str, exp["seeds"])),
             "model": f"{exp['kind']} {exp.get('model') or exp.get('base') or exp['preset']}",
             "data": f"{exp['n_members']} / {exp['n_nonmembers']} records ({exp['mode']})",
             "configuration": json.dumps(exp), **facts_common(res)}
    return Report(f"lmaudit experiment: {exp['name']}", exp["description"], facts, sections,
                  summary=experiment_summary(res))


_TPR_HEADER = re.compile(r"^TPR@(\d+(?:\.\d+)?)%FPR$")


def unresolved_cells(header: list[str], rows: list[list[str]]) -> list[list[str]]:
    """Rows with a TPR cell that is not a number (NaN: too few non-members to resolve the FPR) written as
    "n/a (needs ≥ N non-members)", as the membership-inference tables write it."""
    needs = {i: f"n/a (needs ≥ {round(100 / float(m.group(1))):,} non-members)"
             for i, h in enumerate(header) if (m := _TPR_HEADER.match(h))}
    if not needs:
        return rows
    return [[needs[i] if i in needs and cell.strip().lower().startswith("nan") else cell for i, cell in enumerate(r)]
            for r in rows]


def mia_report(run: Path, res: dict, *, where: Path, show_pii: bool = False) -> Report:
    """A membership-inference report: the verdict, then per part (the demo's DLM part in ``dlm/``) the tables,
    the most exposed records and the figures."""
    parts = [(run, res, "")]
    dlm = run / "dlm"
    if (dlm / "results.json").exists():  # the demo's diffusion-LM part
        parts.append((dlm, read_results(dlm / "results.json"), "DLM: "))
    texts = folder_texts(run)  # the demo's DLM part scores the first of the same members
    sections, exposed, labelled = [], {}, []
    for folder, part, prefix in parts:
        part_sections = mia_sections(folder, part, prefix=prefix)
        scores = read_scores(folder / "scores.parquet", part)
        label = f"{part['target'].get('kind', 'ar').upper()} target"
        table, exposed[label] = records_section(scores, strongest_attack(part["attacks"]), part["n_nonmembers"],
                                                texts, prefix=prefix, show_pii=show_pii)
        at = next((i for i, s in enumerate(part_sections) if s.title == f"{prefix}ROC curves"), len(part_sections))
        best = strongest_attack(part["attacks"])
        check = privacy_section(scores["label"].to_numpy(), scores[best].to_numpy(), best, part["target"],
                                prefix=prefix)
        sections += part_sections[:at] + [table, check] + part_sections[at:]
        labelled.append((label, part))
    if res.get("timings_s"):
        sections.append(Section("Timings", table=(["step", "seconds"],
                                                  [[k, f"{v:.1f}"] for k, v in res["timings_s"].items()])))
    return Report("lmaudit membership-inference report", f"Run folder: {where}", mia_facts(res), sections,
                  summary=mia_summary(labelled, exposed))


def build_report(run_dir: str | Path, *, shown_as: str | Path | None = None, show_pii: bool = False) -> Report:
    """The report of a run folder; ``shown_as`` is the folder's name in the report (its final place, when the
    folder is being built elsewhere); ``show_pii`` shows e-mail addresses and phone numbers in record previews."""
    run = Path(run_dir)
    where = Path(shown_as) if shown_as else run
    path = run / "results.json"
    if not path.exists():
        hint = missing_folder_hint(run) if not run.exists() else None
        raise LmauditError(f"{run}: no results.json", hint=hint or "pass a folder written by lmaudit mia, demo or run")
    res = read_results(path)
    if "experiment" in res:
        return experiment_report(run, res)
    # a membership run written before results named their type is known by its keys
    kind = res.get("type") or ("mia" if "attacks" in res and "target" in res else None)
    if kind not in REPORTS:
        raise LmauditError(f"{path}: not a results file lmaudit knows how to report",
                           hint=f"results of type {', '.join(sorted(REPORTS))} or an experiment")
    return REPORTS[kind](run, res, where=where, show_pii=show_pii)


def set_audit_report(run: Path, res: dict, *, where: Path, show_pii: bool = False) -> Report:
    duci = "duci" in res["methods"]
    text = _duci_text(res) if duci else (
        f"{res['n_suspect']} suspect texts ({res['data']['suspect']}) against {res['n_members']} members and "
        f"{res['n_nonmembers']} non-members; {res['features']['kind']} features (d = {res['features']['dim']}), "
        "standardised on the reference sets. ρ is the fraction of the suspect set that behaves like "
        "non-members; the interval holds the 5th–95th percentiles of bootstrap resamples of the suspect set. "
        "An unclipped ρ far outside [0, 1] flags a suspect set that resembles neither reference.")
    facts = {"model": f"{res['model']} ({res['kind']}, fingerprint {res['fingerprint']})",
             "configuration": json.dumps(res["config"])}
    title, heading = (("lmaudit set-level audit (DUCI)", "Used proportion (DUCI)") if duci else
                      ("lmaudit set-level audit", "Set-level audit (SMI / SMI-M)"))
    return Report(title, f"Run folder: {where}", facts, [Section(heading, text, table=audit_rows(res))],
                  summary=audit_summary(res))


def _duci_text(res: dict) -> str:
    est = res["methods"]["duci"]
    return (f"{res['n_suspect']} suspect texts ({res['data']['suspect']}) scored by the {est['attack']} attack on the "
            f"model and on {res['n_shadows']} shadow models ({res['shadows']}) that each trained on a known part of "
            "them. A text is called a member above the threshold that best separates the shadows' training texts "
            "from the others (TPR − FPR largest, pooled over the shadows); the share called members is corrected to "
            "p̂ = (share − FPR) / (TPR − FPR), the proportion of the suspect set used in training (DUCI, Tong et al., "
            "2025). 1 − p̂ is on the scale of SMI's ρ (the unused share). The interval holds the 2.5th–97.5th "
            "percentiles of bootstrap resamples of the texts, each with its shadow scores (the threshold and rates "
            "chosen again on each).")


def pii_report(run: Path, res: dict, *, where: Path, show_pii: bool = False) -> Report:
    cfg = res["config"]
    text = (f"{res['n_records']} redacted records ({cfg['field']}); {cfg['candidates']} generations per record "
            f"({res['mean_candidates']:.1f} distinct candidates on average); the true value was among the "
            f"candidates for {res['coverage']['percent']:.0f}% of records. PII values are not shown in this report.")
    facts = {"model": str(res["model"]), "reference": str(res["reference"]), "alpha": str(res["alpha"]),
             "configuration": json.dumps(cfg)}
    return Report("lmaudit PII reconstruction", f"Run folder: {where}", facts,
                  [Section("Top-1 attack success rate per ranking signal", text, table=asr_rows(res))],
                  summary=pii_summary(res))






def verify_run(run_dir: str | Path, *, verify: bool = True) -> None:
    """Refuse a run folder whose files no longer belong together (checked against its manifest, naming the file);
    a folder without a manifest (written by hand, or by an older lmaudit) is accepted with a warning once every AUC
    its ``results.json`` states is that of its scores (:func:`check_recorded_aucs`). ``verify=False``: a warning
    that nothing is checked."""
    if not verify:
        warn(f"{run_dir}: read without checking its files against {MANIFEST} (verify=False): a figure "
                      "edited by hand comes back as if measured")
    elif Path(run_dir).is_dir() and verify_folder(run_dir) is None:
        warn(f"{run_dir} has no {MANIFEST}: cannot check that its files come from one run; its AUCs are "
                      "checked against its scores")
        check_recorded_aucs(Path(run_dir))


def write_report(run_dir: str | Path, *, shown_as: str | Path | None = None, verify: bool = True,
                 show_pii: bool = False) -> Path:
    """Write ``report.html`` and ``report.md`` into ``run_dir``; return the HTML path.

    With ``verify``, the folder's files are first checked against its manifest (:func:`verify_run`): a folder
    whose files no longer belong together is refused, naming the file; one without a manifest (written by hand,
    or by an older lmaudit) is reported with a warning.
    """
    if verify:
        verify_run(run_dir)
    html_path, _ = write(build_report(run_dir, shown_as=shown_as, show_pii=show_pii), Path(run_dir))
    return html_path
