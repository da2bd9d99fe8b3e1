"""Reports: every plot renders, the HTML is self-contained, runs write their report."""

import json
import re

import numpy as np
import pandas as pd
import pytest

from lmaudit.errors import LmauditError
from lmaudit.report import plots
from lmaudit.report.build import build_report, write_report

PNG = b"\x89PNG\r\n\x1a\n"


def synthetic_run(folder, *, with_examples=True):
    rng = np.random.default_rng(0)
    labels = np.r_[np.ones(60), np.zeros(60)].astype(int)
    scores = {"loss": rng.normal(size=120) + labels, "q_skew": rng.normal(size=120) + 2 * labels}
    pd.DataFrame({"id": [f"s{i}" for i in range(120)], "label": labels, **scores}).to_parquet(folder / "scores.parquet")
    attacks = {n: {"params": {"k": 0.2}, "auc": 0.8, "auc_ci95": [0.7, 0.9], "tpr@10%fpr": 0.5, "tpr@1%fpr": 0.1,
                   "tpr@0.1%fpr": 0.05, "forwards_per_sample": 16} for n in scores}
    res = {"lmaudit_version": "0.1.0", "git_commit": "abc", "created": "2026-01-01T00:00:00+00:00",
           "packages": {"torch": "2.13.0"}, "config": {"seed": 3, "params": {}},
           "target": {"path": "/models/t", "fingerprint": "f00d", "kind": "dlm"},
           "reference": {"path": "/models/r", "fingerprint": "beef"}, "n_members": 60, "n_nonmembers": 60,
           "attacks": attacks, "timings_s": {"probe": 1.5}}
    (folder / "results.json").write_text(json.dumps(res))
    if with_examples:
        (folder / "examples.json").write_text(json.dumps({"q_skew": {
            "member": rng.exponential(size=50).tolist(), "nonmember": rng.normal(size=50).tolist(),
            "member_score": 0.9, "nonmember_score": 0.0}}))
    return folder


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
