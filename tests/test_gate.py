"""The release gate: thresholds against the upper end of each 95% interval, the sets' validity, intact folders only."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import lmaudit
from helpers import assert_ok, assert_user_error
from helpers import lmaudit as cli
from lmaudit.errors import LmauditError
from lmaudit.runs.common import RunResult
from release_runs import plain_run, shifted_run

RULE = "each threshold is compared with the upper end of the figure's 95% interval"


@pytest.fixture(scope="module")
def runs(tmp_path_factory, tiny_model_dir):
    root = tmp_path_factory.mktemp("gate")
    return {"plain": plain_run(root, tiny_model_dir), "shifted": shifted_run(root, tiny_model_dir)}


def attacks_of(folder) -> dict:
    return json.loads((folder / "results.json").read_text())["attacks"]


def fail_lines(out) -> list[str]:
    return [line for line in out.stdout.splitlines() if line.startswith("FAIL ")]


def between(point: float, high: float) -> float:
    """A threshold above the point estimate and under the interval's upper end (3 decimals apart from both)."""
    t = round((point + high) / 2, 3)
    assert point < t < high and f"{t:.3f}" != f"{high:.3f}"
    return t


def test_a_gate_under_every_upper_bound_passes_and_writes_its_summary(runs, tmp_path):
    attacks = attacks_of(runs["plain"])
    top = max(m["auc_ci95"][1] for m in attacks.values())
    out = cli("gate", runs["plain"], "--max-auc", f"{top + 0.01:.3f}", "--max-tpr-at", "1%=0.5",
              "--json", tmp_path / "gate.json")
    assert_ok(out)
    assert fail_lines(out) == [] and f"gate passed: 5 checks over 1 run; {RULE}" in out.stdout
    summary = json.loads((tmp_path / "gate.json").read_text())
    assert summary["passed"] is True and summary["failed"] == 0 and summary["thresholds"]["max_tpr_at"] == {"1%": 0.5}
    auc = {c["subject"]: c for c in summary["checks"] if c["statistic"] == "AUC"}
    assert {a: c["upper_bound"] for a, c in auc.items()} == {a: m["auc_ci95"][1] for a, m in attacks.items()}
    assert {c["statistic"] for c in summary["checks"]} == {"AUC", "TPR@1%FPR", "set check"}
    # a threshold equal to the largest upper bound passes: "at or under"
    assert lmaudit.gate(runs["plain"], max_auc=top).passed


def test_an_upper_bound_over_the_threshold_fails_though_the_point_is_under_it(runs, tmp_path):
    attacks = attacks_of(runs["plain"])
    name, m = max(attacks.items(), key=lambda kv: kv[1]["auc_ci95"][1])
    (lo, hi), t = m["auc_ci95"], between(m["auc"], m["auc_ci95"][1])
    out = cli("gate", runs["plain"], "--max-auc", t)
    assert out.exception is None or isinstance(out.exception, SystemExit)
    assert out.exit_code == 1
    line = (f"FAIL {runs['plain']}: {name} AUC {m['auc']:.3f} (95% interval [{lo:.3f}, {hi:.3f}]): upper bound "
            f"{hi:.3f} > max-auc {t:g}")
    assert line in fail_lines(out)
    assert f"gate FAILED: {len(fail_lines(out))} of " in out.stdout and RULE in out.stdout
    found = lmaudit.gate(runs["plain"], max_auc=t)
    assert not found.passed and [c.line() for c in found.failures if c.subject == name] == [line]


def test_a_tpr_threshold_reads_the_upper_end_of_the_tpr_interval(runs):
    m = attacks_of(runs["plain"])["loss"]
    hi = m["tpr@10%fpr_ci95"][1]
    assert lmaudit.gate(runs["plain"], max_tpr_at={"10%": 1.0}).passed
    found = lmaudit.gate(runs["plain"], max_tpr_at={"0.1": between(m["tpr@10%fpr"], hi)})  # 0.1 is 10%
    [failed] = [c for c in found.failures if c.subject == "loss"]
    assert failed.statistic == "TPR@10%FPR" and failed.ci95[1] == hi and "max-tpr-at 10%=" in failed.line()


def test_a_tpr_the_run_could_not_measure_fails_unless_allowed(runs):
    run = runs["plain"]  # 100 non-members: no TPR at 0.1% FPR
    out = cli("gate", run, "--max-tpr-at", "0.1%=0.5")
    assert out.exit_code == 1
    assert fail_lines(out) == [f"FAIL {run}: every attack TPR@0.1%FPR unresolved: n/a (needs ≥ 1,000 non-members), "
                               "100 here; max-tpr-at 0.1%=0.5 cannot be checked (--allow-unresolved skips it)"]
    allowed = cli("gate", run, "--max-tpr-at", "0.1%=0.5", "--max-auc", "1", "--allow-unresolved")
    assert allowed.exit_code == 0 and fail_lines(allowed) == []
    assert any(x.startswith(f"note {run}: every attack TPR@0.1%FPR unresolved") for x in allowed.stdout.splitlines())
    # skipped, and nothing else to check: the run is not gated at all, so it fails
    nothing = cli("gate", run, "--max-tpr-at", "0.1%=0.5", "--allow-unresolved")
    assert nothing.exit_code == 1 and fail_lines(nothing) == [
        f"FAIL {run}: no threshold could be checked on this run's figures (a gate that checks nothing passes nothing)"]


def test_sets_that_differ_without_the_model_fail_unless_allowed(runs):
    run = runs["shifted"]
    check = json.loads((run / "results.json").read_text())["set_check"]
    assert check["differ"] is True
    out = cli("gate", run, "--max-auc", "1")  # no AUC can exceed 1: only the set check fails
    assert out.exit_code == 1
    [line] = fail_lines(out)
    assert line.startswith(f"FAIL {run}: members and non-members differ without the model: blind baseline "
                           f"{check['best']} AUC {check['auc']:.3f}")
    assert line.endswith("the attacks' AUCs are not evidence about the model (--allow-set-differences accepts the "
                         "run)")
    allowed = cli("gate", run, "--max-auc", "1", "--allow-set-differences")
    assert allowed.exit_code == 0 and fail_lines(allowed) == []
    assert any(x.startswith(f"note {run}: members and non-members differ") for x in allowed.stdout.splitlines())
    # the plain run's sets do not differ: the same gate passes it; each run is gated on its own
    both = lmaudit.gate([runs["plain"], run], max_auc=1.0)
    assert {c.run for c in both.failures} == {str(run)} and [r["passed"] for r in both.runs] == [True, False]


def test_a_thresholds_file_sets_thresholds_and_the_options_win(runs, tmp_path):
    strict = tmp_path / "gate.toml"
    strict.write_text('max_auc = 0.0\n[max_tpr_at]\n"10%" = 1.0\n')
    assert cli("gate", runs["plain"], "--thresholds", strict).exit_code == 1
    assert cli("gate", runs["plain"], "--thresholds", strict, "--max-auc", "1").exit_code == 0
    found = lmaudit.gate(runs["plain"], thresholds=strict, max_tpr_at={"1%": 1.0})
    assert set(found.thresholds.max_tpr_at) == {"tpr@10%fpr", "tpr@1%fpr"}  # merged per FPR


@pytest.mark.parametrize("text, needles", [
    ("max_aucc = 0.6\n", ["gate.toml: unknown key 'max_aucc'", "did you mean 'max_auc'?"]),
    ("max_auc = 2\n", ["gate.toml: max_auc must be in [0, 1], got 2"]),
    ('[max_tpr_at]\n"5%" = 0.1\n', ["gate.toml: max_tpr_at: no run stores a TPR at FPR '5%'", "10%, 1%, 0.1%"]),
    ("max_auc = [\n", ["gate.toml: malformed TOML"]),
])
def test_a_bad_thresholds_file_is_one_error_naming_the_file_and_key(runs, tmp_path, text, needles):
    (tmp_path / "gate.toml").write_text(text)
    assert_user_error(cli("gate", runs["plain"], "--thresholds", tmp_path / "gate.toml"), *needles)


def test_only_intact_results_folders_are_gated(runs, tmp_path):
    assert_user_error(cli("gate", tmp_path / "absent", "--max-auc", "0.9"), "absent: no such folder")
    changed = tmp_path / "changed"
    shutil.copytree(runs["plain"], changed)
    res = json.loads((changed / "results.json").read_text())
    res["attacks"]["loss"]["auc_ci95"][1] = 0.5  # a bound edited by hand
    (changed / "results.json").write_text(json.dumps(res))
    assert_user_error(cli("gate", changed, "--max-auc", "0.9"), "results.json: changed since the run wrote it")
    RunResult({"type": "set-audit", "methods": {}}).write(tmp_path / "audit")
    assert_user_error(cli("gate", tmp_path / "audit", "--max-auc", "0.9"),
                      "a set-audit folder, which no threshold of the gate applies to")


def test_thresholds_are_needed_and_checked(runs):
    assert_user_error(cli("gate", runs["plain"]), "no threshold given", "--max-auc", "--thresholds")
    assert_user_error(cli("gate", runs["plain"], "--max-tpr-at", "1%"), "--max-tpr-at '1%' is not of the form")
    assert_user_error(cli("gate", runs["plain"], "--max-tpr-at", "5%=0.1"), "no run stores a TPR at FPR '5%'")
    assert_user_error(cli("gate", runs["plain"], "--max-exposure", "8"),
                      "--max-exposure: none of the runs carries a canary exposure")
    with pytest.raises(LmauditError, match="max_exposure=: none of the runs"):
        lmaudit.gate(runs["plain"], max_exposure=8)


def test_canary_exposure_is_gated_by_its_upper_bound(runs, tmp_path):
    exposure = {"c1": {"exposure": 12.0, "exposure_ci95": [10.0, 14.0]}, "c2": {"exposure": 3.0,
                                                                             "exposure_ci95": [2.0, 4.0]}}
    RunResult({"type": "canary-exposure", "exposure": exposure}).write(tmp_path / "canaries")
    out = cli("gate", tmp_path / "canaries", runs["plain"], "--max-exposure", "13", "--max-auc", "1")
    assert out.exit_code == 1 and fail_lines(out) == [
        f"FAIL {tmp_path / 'canaries'}: canary c1 exposure 12.000 bits (95% interval [10.000, 14.000]): upper bound "
        "14.000 bits > max-exposure 13 bits"]
    assert cli("gate", tmp_path / "canaries", "--max-exposure", "14").exit_code == 0


def _edited_copy(run, folder, *, interval=None, manifest=True):
    """A copy of ``run`` with every attack's ``auc_ci95`` set to ``interval`` (when given) and its manifest
    removed (unless ``manifest``)."""
    shutil.copytree(run, folder)
    if interval is not None:
        res = json.loads((folder / "results.json").read_text())
        for m in res["attacks"].values():
            m["auc_ci95"] = list(interval)
        (folder / "results.json").write_text(json.dumps(res))
    if not manifest:
        (folder / "lmaudit_manifest.json").unlink()
    return folder


def test_a_folder_without_its_manifest_is_refused_unless_trusted(runs, tmp_path):
    bare = _edited_copy(runs["plain"], tmp_path / "bare", manifest=False)
    out = cli("gate", bare, "--max-auc", "1")
    assert out.exit_code != 0
    assert_user_error(out, f"{bare}: no lmaudit_manifest.json, so nothing shows that its figures are the ones the run "
                           "measured", "pass --trust-edited to read it anyway")
    with pytest.raises(LmauditError, match="pass trust_edited=True to read it anyway"):
        lmaudit.gate(bare, max_auc=1.0)
    # trusted: read (with a warning), its figures checked against its scores, which they match
    with pytest.warns(UserWarning, match="no lmaudit_manifest.json; read as trusted"):
        found = lmaudit.gate(bare, max_auc=1.0, trust_edited=True)
    assert found.passed and len(found.runs) == 1
    trusted = cli("gate", bare, "--max-auc", "1", "--trust-edited")
    assert trusted.exit_code == 0 and "gate passed: 3 checks over 1 run" in trusted.stdout


def test_intervals_edited_without_the_manifest_are_refused_even_when_trusted(runs, tmp_path):
    measured = attacks_of(runs["plain"])["loss"]["auc_ci95"]
    edited = _edited_copy(runs["plain"], tmp_path / "edited", interval=[0.1, 0.2], manifest=False)
    # every upper bound 0.2: the gate would pass any max-auc ≥ 0.2 were the intervals not computed again
    assert_user_error(cli("gate", edited, "--max-auc", "0.6"), "no lmaudit_manifest.json")
    out = cli("gate", edited, "--max-auc", "0.6", "--trust-edited")
    assert out.exit_code != 0 and "gate passed" not in out.stdout
    assert_user_error(out, f"{edited / 'results.json'}: loss's auc_ci95 is [0.100000, 0.200000] but its scores in "
                           f"scores.parquet give [{measured[0]:.6f}, {measured[1]:.6f}] (seed 0, 100 bootstrap "
                           "resamples)")


def test_figures_that_differ_from_the_scores_are_refused_though_the_manifest_lists_them(runs, tmp_path):
    # written whole by lmaudit (a valid manifest), but with figures that are not those of its scores
    result = lmaudit.load_results(runs["plain"])
    stored = result.attacks["min_k"]["tpr@1%fpr"]
    result.attacks["min_k"]["tpr@1%fpr"] = result.attacks["min_k"]["tpr@1%fpr_ci95"] = None
    result.write(tmp_path / "forged")
    with pytest.raises(LmauditError, match=rf"min_k's tpr@1%fpr is None but its scores in scores.parquet give "
                                           rf"{stored:.6f} \(seed 0, 100 bootstrap resamples\)"):
        lmaudit.gate(tmp_path / "forged", max_tpr_at={"1%": 0.5}, allow_unresolved=True)


def test_a_run_named_under_several_spellings_is_checked_once(runs, tmp_path, monkeypatch):
    run = runs["plain"]
    monkeypatch.chdir(run.parent.parent)
    relative = Path(run.parent.name) / run.name
    spellings = [str(run), f"{run}/", f"./{run.parent.name}/../{run.parent.name}/{run.name}", str(relative),
                 str(run / "results.json"), run.parent / ".." / run.parent.name / run.name]
    found = lmaudit.gate(spellings, max_auc=1.0)
    assert [r["folder"] for r in found.runs] == [str(run)]
    assert len(found.checks) == 3  # two attacks' AUCs and the set check, once
    out = cli("gate", *spellings, "--max-auc", "1")
    assert out.exit_code == 0 and "gate passed: 3 checks over 1 run;" in out.stdout
