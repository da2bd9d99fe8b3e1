"""Reports: every plot renders, the HTML is self-contained, runs write their report."""

import html
import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from helpers import synthetic_run
from lmaudit.errors import LmauditError
from lmaudit.folders import write_manifest
from lmaudit.report import plots
from lmaudit.report.build import build_report, write_report

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
