"""Reports: every plot renders, the HTML is self-contained, runs write their report."""

import html
import json
import re
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from helpers import assert_ok, lmaudit, synthetic_run
from lmaudit import api as lmaudit_api
from lmaudit.errors import LmauditError
from lmaudit.folders import write_manifest
from lmaudit.report import plots
from lmaudit.report.build import build_report, write_report
from report_folders import audit_folder, experiment_folder, extraction_folder, mia_folder, pii_folder

lmaudit_api.load_jobs()  # each job declares the report of its results' type, as the interface loads them

PNG = b"\x89PNG\r\n\x1a\n"


def is_png(data: bytes) -> bool:
    return data.startswith(PNG) and len(data) > 5000


def test_every_plot_function_renders_a_png():
    rng = np.random.default_rng(1)
    labels = np.r_[np.ones(50), np.zeros(50)].astype(int)
    scores = {"a": rng.normal(size=100) + labels, "b": rng.normal(size=100)}
    assert is_png(plots.roc_curves(labels, scores))
    assert is_png(plots.roc_curves(labels, scores, log=True))
    assert is_png(plots.score_histograms(labels, scores))
    assert is_png(plots.delta_distributions(rng.exponential(size=40), rng.normal(size=40), member_score=1.0,
                                            nonmember_score=0.0))
    curves = {"loss": {str(e): {"auc": [0.5 + 0.05 * e, 0.01]} for e in (1, 2, 3)}}
    assert is_png(plots.auc_vs_epochs(curves))
    assert is_png(plots.gain_by_ratio({"0.25": rng.normal(1, 1, 200), "0.75": rng.normal(0.3, 1, 200)}))


def test_html_embeds_every_plot_and_nothing_external(tmp_path):
    run = synthetic_run(tmp_path)
    report = build_report(run)
    html_path = write_report(run)
    page = html_path.read_text()
    assert page.count("data:image/png;base64,") == len(report.figures) == 4  # roc, roc log, histograms, Δ examples
    assert not re.search(r"(src|href)\s*=\s*['\"](?!data:)", page)  # no external resource
    assert "http://" not in page and "https://" not in page and "<script" not in page
    for fact in ("/models/t", "f00d", "/models/r", "60 members", "torch 2.13.0", "abc"):
        assert fact in page
    md = (run / "report.md").read_text()
    assert "| q_skew |" in md and "report_files/roc.png" in md
    assert all(is_png((run / "report_files" / f"{f.name}.png").read_bytes()) for f in report.figures)


def test_report_of_an_unknown_folder_is_a_clear_error(tmp_path):
    with pytest.raises(LmauditError, match="no results.json"):
        build_report(tmp_path)
    (tmp_path / "results.json").write_text("{}")
    with pytest.raises(LmauditError, match="not a results file"):
        build_report(tmp_path)


REPO = Path(__file__).resolve().parents[1]
COMMITTED_RESULTS = sorted(d for d in (REPO / "results").glob("*/") if (d / "results.json").exists())


def test_there_are_committed_results_to_render():
    assert len(COMMITTED_RESULTS) >= 10, COMMITTED_RESULTS


@pytest.mark.parametrize("folder", COMMITTED_RESULTS, ids=lambda d: d.name)
def test_every_committed_results_folder_renders_its_report(tmp_path, folder):
    """The report of each committed results folder builds from what is committed (rendered in a copy)."""
    before = {f: f.stat().st_mtime_ns for f in folder.rglob("*")}
    copy = Path(shutil.copytree(folder, tmp_path / folder.name))
    for old in ("report.html", "report.md"):
        (copy / old).unlink(missing_ok=True)
    shutil.rmtree(copy / "report_files", ignore_errors=True)
    res = json.loads((copy / "results.json").read_text())
    report = build_report(copy)
    page = write_report(copy).read_text()
    name = res["experiment"]["name"]
    assert name == folder.name and f"<h1>lmaudit experiment: {name}</h1>" in page
    assert page.count("<table>") >= 1 and "<td>" in page
    stored = res.get("tables", [])
    assert stored and [s.table for s in report.sections if s.table] == [(t["header"], t["rows"]) for t in stored]
    for t in stored:  # every cell of every stored table is on the page
        assert all(html.escape(cell) in page for row in t["rows"] for cell in row)
    assert page.count("data:image/png;base64,") == len(res.get("figures", [])) == len(report.figures)
    assert {f: f.stat().st_mtime_ns for f in folder.rglob("*")} == before  # nothing written into the repository


def test_caveats_of_an_attack_are_shown_under_the_table(tmp_path):
    run = synthetic_run(tmp_path)
    res = json.loads((run / "results.json").read_text())
    res["attacks"]["loss"]["notes"] = ["every sample has the same score: the attack could not tell the texts apart"]
    (run / "results.json").write_text(json.dumps(res))
    write_manifest(run, "run")
    html = write_report(run).read_text()
    assert "Caveats" in html and "could not tell the texts apart" in html
    assert html.index("Caveats") < html.index("ROC curves")
    (tmp_path / "clean").mkdir()
    clean = synthetic_run(tmp_path / "clean")
    assert "Caveats" not in write_report(clean).read_text()


KINDS = {"mia": lambda p: mia_folder(p)[0], "audit-set": audit_folder, "extract": extraction_folder, "pii": pii_folder,
         "experiment": experiment_folder}


@pytest.mark.parametrize("kind", KINDS)
def test_every_report_kind_opens_with_its_summary(tmp_path, kind):
    """The verdict comes first: after the title, before the facts and every section, in HTML and Markdown."""
    folder = KINDS[kind](tmp_path / kind)
    report = build_report(folder)
    page = write_report(folder).read_text()
    md = (folder / "report.md").read_text()
    s = report.summary
    assert s is not None and s.points
    start = page.index("<section id='summary'")
    assert page.index("</h1>") < start < page.index("<dl>") < page.index("<h2>", page.index("</section>"))
    assert all(html.escape(p) in page for p in s.points)
    assert md.index(f"## {s.headline}") < md.index("- **")  # before the facts
    if kind != "audit-set":  # a level, and the rule that set it, stated in the report
        assert s.level in ("low", "moderate", "high", "severe") and f"level-{s.level}" in page
        assert "How the level is set" in page and html.escape(s.rule) in page


def test_most_exposed_records_mask_pii_unless_show_pii(tmp_path):
    folder, result = mia_folder(tmp_path / "run")
    page = write_report(folder).read_text()
    assert "Most exposed records" in page
    assert page.index("Most exposed records") < page.index("ROC curves")
    assert "jane.roe@example.org" not in page and "301-2288" not in page
    assert "[email, 20 chars]" in page and "[phone, 17 chars]" in page
    frame = pd.read_parquet(folder / "scores.parquet")
    top = frame.loc[frame["rank"] == 1, "id"].item()
    section = next(s for s in build_report(folder).sections if s.title == "Most exposed records")
    header, rows = section.table
    assert header[-1] == "text (preview)" and len(rows) == 20 and rows[0][:2] == ["1", top]
    assert rows[0][3] == "0.000 (0/120)" and "[email, 20 chars]" in rows[0][4]  # the PII text is the top member's
    out = lmaudit("report", "--show-pii", folder)
    assert_ok(out)
    shown = (folder / "report.html").read_text()
    assert "jane.roe@example.org" in shown and "+1 (555) 301-2288" in shown


def test_most_exposed_records_are_ids_only_without_texts_in_the_folder(tmp_path):
    folder, _ = mia_folder(tmp_path / "run", with_texts=False)
    section = next(s for s in build_report(folder).sections if s.title == "Most exposed records")
    assert section.table[0] == ["rank", "id", "min_k score", "p (non-members scoring ≥)"]
    assert "holds no members.jsonl" in section.text


def test_a_folder_written_before_p_values_were_stored_reports_them(tmp_path):
    """Older scores.parquet files have no p_value/rank: the report computes them from the scores."""
    folder = synthetic_run(tmp_path)
    report = build_report(folder)
    section = next(s for s in report.sections if s.title == "Most exposed records")
    scores = pd.read_parquet(folder / "scores.parquet")
    best = scores[scores.label == 1].sort_values("loss", ascending=False).iloc[0]
    nonmembers = scores.loc[scores.label == 0, "loss"].to_numpy()
    p = float(np.mean(nonmembers >= best["loss"]))
    assert section.table[1][0][:2] == ["1", best["id"]] and section.table[1][0][3].startswith(f"{p:.3f} (")


def test_report_kinds_are_a_registry_and_an_unknown_type_is_refused(tmp_path):
    import lmaudit.api  # noqa: F401  (the jobs declare their report kinds)
    from lmaudit.report.build import build_report
    from lmaudit.report.kinds import REPORTS, register_report

    assert {"mia", "demo", "set-audit", "extraction", "pii-reconstruction"} <= set(REPORTS)
    (tmp_path / "results.json").write_text(json.dumps({"type": "tea-leaves"}))
    with pytest.raises(LmauditError, match="not a results file lmaudit knows how to report"):
        build_report(tmp_path)
    with pytest.raises(LmauditError, match="registered twice"):
        register_report("mia")(lambda *a, **k: None)
