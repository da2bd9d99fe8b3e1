"""The report's privacy guarantee check: a DP claim against the ε lower bound of the strongest attack."""

from __future__ import annotations

import json

import pytest

from helpers import synthetic_run
from lmaudit.folders import write_manifest
from lmaudit.privacy.bounds import epsilon_lower_bound
from lmaudit.report.build import write_report
from lmaudit.report.summary import strongest_attack


def _with_claim(run, claim):
    res = json.loads((run / "results.json").read_text())
    if claim is not None:
        res["target"]["dp"] = {"epsilon": claim, "delta": 1e-5}
    (run / "results.json").write_text(json.dumps(res))
    write_manifest(run, "run")
    return write_report(run).read_text()


@pytest.mark.parametrize("claim, sentence", [
    (None, "The model claims no differential-privacy guarantee"),
    (0.001, "The attacks contradict the claim"),
    (50.0, "Consistent with the claim"),
])
def test_the_check_reads_the_claim_against_the_bound(tmp_path, claim, sentence):
    html = _with_claim(synthetic_run(tmp_path), claim)
    assert "Privacy guarantee check" in html and sentence in html


def test_the_bound_shown_is_the_strongest_attacks(tmp_path):
    import pandas as pd

    run = synthetic_run(tmp_path)
    scores = pd.read_parquet(run / "scores.parquet")
    html = _with_claim(run, None)
    best = strongest_attack(json.loads((run / "results.json").read_text())["attacks"])
    bound = epsilon_lower_bound(scores["label"].to_numpy(), scores[best].to_numpy(), delta=1e-5, confidence=0.95,
                                seed=0)
    assert bound.epsilon > 0 and f"{bound.epsilon:.3g} at δ = 1e-05" in html and f"{best}, threshold" in html
