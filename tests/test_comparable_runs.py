"""Runs compared or read back only when the figures mean what they say: PrivLeak of comparable runs, results
folders checked against their manifests, texts given as lists, escaped and masked reports, readable tables."""

from __future__ import annotations

import json
import re
import warnings
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from helpers import TEST_PRESET_ARGS, assert_ok, assert_user_error, lmaudit, make_texts, write_jsonl
from lmaudit.data.loaders import TextSet
from lmaudit.errors import DataError, LmauditError, SettingError
from lmaudit.metrics import auc, summarize
from lmaudit.runs.mia_result import MIAResult, RunConfig, text_digests
from lmaudit.runs.privleak import privleak, privleak_against
from report_folders import mia_folder

N = 40  # members and non-members of the synthetic runs


def _run(texts: list[str], scores: np.ndarray, *, kind: str = "ar", fingerprint: str = "unlearned",
         ids: list[str] | None = None, digests: bool = True, params: dict | None = None, **config) -> MIAResult:
    """A run of N members then N non-members (``texts``) scored ``scores`` by ``loss``."""
    labels = np.r_[np.ones(N), np.zeros(N)].astype(np.int64)
    attacks = {"loss": {"params": params or {}, "forwards_per_sample": 1,
                        **summarize(labels, scores, n_resamples=20, seed=0)}}
    return MIAResult(config=RunConfig(n_bootstrap=200, **config),
                     target={"path": f"/models/{fingerprint}", "fingerprint": fingerprint, "kind": kind},
                     reference=None, n_members=N, n_nonmembers=N, attacks=attacks, scores={"loss": scores},
                     labels=labels, ids=ids or [f"r{i}" for i in range(2 * N)], timings_s={},
                     digests=text_digests(TextSet.from_texts(texts)) if digests else [])


def _pair(seed: int = 0):
    """(texts, the unlearned model's scores, the retrained model's scores of the same texts): the retrained
    model tells members apart a little (AUC ≈ 0.6), the unlearned one more."""
    rng = np.random.default_rng(seed)
    texts = make_texts(2 * N, seed=700 + seed)
    labels = np.r_[np.ones(N), np.zeros(N)]
    retrained = rng.normal(size=2 * N) + 0.4 * labels
    unlearned = retrained + 0.6 * labels + rng.normal(scale=0.3, size=2 * N)
    return texts, unlearned, retrained


def test_privleak_pairs_records_by_content_and_gives_the_right_figure():
    texts, unlearned, retrained = _pair()
    labels = np.r_[np.ones(N), np.zeros(N)]
    right = (auc(labels, unlearned) - auc(labels, retrained)) / auc(labels, retrained)
    order = np.random.default_rng(1).permutation(2 * N)  # the retrained run lists its records in another order
    other = _run([texts[i] for i in order], retrained[order], fingerprint="retrained",
                 ids=[f"other{i}" for i in range(2 * N)])  # and gives them other ids
    other.labels = other.labels[order]
    got = privleak_against(_run(texts, unlearned), other)["attacks"]["loss"]
    assert np.isclose(got["privleak"], right) and right > 0.2


@pytest.mark.parametrize("case", ["other texts, same ids", "no digests", "dlm against ar", "same model",
                                  "other parameters", "other token limit", "other long-text mode"])
def test_privleak_refuses_runs_that_are_not_comparable(case):
    """Before, every one of these was accepted with a figure (other texts under the same ids: a PrivLeak computed
    from unrelated scores; the same model: 0)."""
    texts, unlearned, retrained = _pair()
    result = _run(texts, unlearned)
    other_texts = make_texts(2 * N, seed=999)
    other = {
        "other texts, same ids": lambda: _run(other_texts, np.random.default_rng(5).normal(size=2 * N),
                                              fingerprint="retrained"),
        "no digests": lambda: _run(texts, retrained, fingerprint="retrained", digests=False),
        "dlm against ar": lambda: _run(texts, retrained, fingerprint="retrained", kind="dlm"),
        "same model": lambda: _run(texts, retrained),
        "other parameters": lambda: _run(texts, retrained, fingerprint="retrained", params={"k": 0.5}),
        "other token limit": lambda: _run(texts, retrained, fingerprint="retrained", max_length=16),
        "other long-text mode": lambda: _run(texts, retrained, fingerprint="retrained", long_texts="window"),
    }[case]()
    needle = {"other texts, same ids": "scores other texts", "no digests": "no per-text digests",
              "dlm against ar": "DLM model", "same model": "the same model", "other parameters": "loss parameters",
              "other token limit": "--max-tokens", "other long-text mode": "--long-texts"}[case]
    with pytest.raises(DataError, match=needle) as raised:
        privleak_against(result, other, "runs/retrained")
    assert "runs/retrained" in str(raised.value)
    assert raised.value.hint


def test_privleak_of_a_retrained_auc_of_zero_or_nan_is_undefined_not_a_crash():
    y = np.r_[np.ones(N), np.zeros(N)].astype(int)
    zero = privleak(y, np.arange(2 * N, dtype=float), -y.astype(float), n_resamples=50)  # before: ZeroDivisionError
    assert zero["privleak"] is None and zero["ci95"] is None and zero["auc_retrained"] == 0.0
    assert "AUC is 0" in zero["undefined"]
    with pytest.raises(LmauditError, match="score.s. are NaN"):  # NaN scores are refused by the AUC itself
        privleak(y, np.arange(2 * N, dtype=float), np.full(2 * N, np.nan), n_resamples=50)
    texts, unlearned, _ = _pair()
    with pytest.warns(UserWarning, match="PrivLeak of loss: the retrained model's AUC is 0"):
        got = privleak_against(_run(texts, unlearned), _run(texts, -(np.r_[np.ones(N), np.zeros(N)]),
                                                                fingerprint="retrained"))
    json.dumps(got, allow_nan=False)  # written as is to results.json
    from lmaudit.report.build import privleak_section

    assert "undefined (the retrained model's AUC is 0" in privleak_section(got).table[1][0][3]


def test_privleak_interval_is_none_when_resamples_reach_a_retrained_auc_of_zero():
    y = np.r_[np.ones(4), np.zeros(4)].astype(int)
    retrained = np.array([0.1, 0.2, 0.3, 0.9, 0.4, 0.5, 0.6, 0.7])  # AUC 0.25: some resamples give 0
    got = privleak(y, np.arange(8, dtype=float), retrained, n_resamples=200)
    assert got["privleak"] == pytest.approx((auc(y, np.arange(8)) - 0.25) / 0.25)
    assert got["ci95"] is None and "unbounded" in got["ci_note"]


@pytest.fixture(scope="module")
def retrained_model_dir(tmp_path_factory, tokenizer):
    """A second tiny model (another seed): the "retrained" model of the command-line tests."""
    from lmaudit.models.presets import Preset, build_ar_model

    path = tmp_path_factory.mktemp("retrained_ar")
    build_ar_model(Preset("test", **TEST_PRESET_ARGS), tokenizer, seed=1).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def test_mia_refuses_a_retrained_folder_whose_scores_were_edited(tmp_path, tiny_model_dir, retrained_model_dir):
    members = write_jsonl(tmp_path / "m.jsonl", make_texts(24, seed=61))
    nonmembers = write_jsonl(tmp_path / "n.jsonl", make_texts(24, seed=62))
    common = ("--members", members, "--nonmembers", nonmembers, "--attacks", "loss", "--bootstrap", 50,
              "--no-blind", "--no-report")
    assert_ok(lmaudit("mia", "--model", retrained_model_dir, *common, "--out", tmp_path / "retrained"))
    assert_ok(lmaudit("mia", "--model", tiny_model_dir, *common, "--retrained", tmp_path / "retrained",
                      "--out", tmp_path / "run"))
    got = json.loads((tmp_path / "run" / "results.json").read_text())["privleak"]["attacks"]["loss"]
    assert got["privleak"] is not None and got["auc_retrained"] != got["auc_unlearned"]  # two models
    scores = tmp_path / "retrained" / "scores.parquet"
    frame = pd.read_parquet(scores)
    assert frame["digest"].nunique() == 48  # one content digest per text
    frame["loss"] = frame["loss"].to_numpy()[::-1]
    frame.to_parquet(scores)  # before: accepted, with a PrivLeak from the edited scores
    refused = lmaudit("mia", "--model", tiny_model_dir, *common, "--retrained", tmp_path / "retrained",
                      "--out", tmp_path / "bad")
    assert_user_error(refused, "scores.parquet", "changed since the run wrote it")
    assert not (tmp_path / "bad").exists()
    same = lmaudit("mia", "--model", tiny_model_dir, *common, "--retrained", tmp_path / "run", "--out",
                   tmp_path / "same")
    assert_user_error(same, "the same model")


def test_load_results_refuses_edited_figures_unless_told_not_to_verify(tmp_path):
    import lmaudit as lm

    run, result = mia_folder(tmp_path / "run", with_texts=False)
    res = json.loads((run / "results.json").read_text())
    true_auc = res["attacks"]["min_k"]["auc"]
    res["attacks"]["min_k"]["auc"] = 0.999
    (run / "results.json").write_text(json.dumps(res))  # before: loaded with AUC 0.999
    with pytest.raises(LmauditError, match="results.json: changed since the run wrote it"):
        lm.load_results(run)
    with pytest.warns(UserWarning, match="verify=False"):
        assert lm.load_results(run, verify=False).attacks["min_k"]["auc"] == 0.999
    assert true_auc < 0.999
    other, _ = mia_folder(tmp_path / "negated", with_texts=False)
    frame = pd.read_parquet(other / "scores.parquet")
    frame["min_k"] = -frame["min_k"]
    frame.to_parquet(other / "scores.parquet")  # before: loaded, its scores now reading the other way round
    with pytest.raises(LmauditError, match="scores.parquet: changed since the run wrote it"):
        lm.load_results(other)


def test_load_results_checks_a_folder_without_manifest_against_its_scores(tmp_path):
    import lmaudit as lm

    run, _ = mia_folder(tmp_path / "run", with_texts=False)
    (run / "lmaudit_manifest.json").unlink()
    with pytest.warns(UserWarning, match="no lmaudit_manifest.json"):
        assert lm.load_results(run).n_members == 60
    res = json.loads((run / "results.json").read_text())
    res["attacks"]["loss"]["auc"] = 0.999
    (run / "results.json").write_text(json.dumps(res))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(LmauditError, match="loss's AUC is 0.999"):
            lm.load_results(run)


def test_mia_takes_lists_of_texts_and_names_a_wrong_argument(tiny_model_dir):
    import lmaudit as lm

    cfg = RunConfig(attacks=["loss"], n_bootstrap=20, blind=False)
    got = lm.mia(tiny_model_dir, make_texts(12, seed=1), make_texts(12, seed=2), config=cfg)  # before: TypeError
    assert (got.n_members, got.n_nonmembers) == (12, 12) and got.ids[0] == "members:0"
    assert got.ids[12] == "nonmembers:0" and len(set(got.digests)) == 24
    with pytest.raises(SettingError, match=r"nonmembers\[1\] is a int, not a text"):
        lm.mia(tiny_model_dir, make_texts(12, seed=1), ["a text", 3], config=cfg)
    with pytest.raises(SettingError, match="members must be a data file, a TextSet or a list of texts, got dict"):
        lm.mia(tiny_model_dir, {"text": "x"}, make_texts(12, seed=2), config=cfg)


def test_a_run_written_before_digests_still_loads(tmp_path):
    run, result = mia_folder(tmp_path / "run", with_texts=False)
    assert MIAResult.load(run).digests == []
    with_digests = replace(result, digests=[f"d{i}" for i in range(len(result.ids))])
    with_digests.write(tmp_path / "again")
    assert MIAResult.load(tmp_path / "again").digests == with_digests.digests


HOSTILE_IDS = ["<script>alert(1)</script>", "<img src=x onerror=alert(1)>", "jane.roe@example.org",
               "+1 (555) 301-2288", "[link](http://evil.example) *bold* `code` | cell"]


def _hostile_run(tmp_path, **changes):
    """A mia folder whose most exposed members carry the hostile ids, with ``changes`` to its result."""
    _, result = mia_folder(tmp_path / "base", with_texts=False)
    order = np.argsort(-result.scores["min_k"][:result.n_members])  # the members listed first
    ids = list(result.ids)
    for rank, hostile in zip(order, HOSTILE_IDS):
        ids[rank] = hostile
    replace(result, ids=ids, **changes).write(tmp_path / "run")
    return tmp_path / "run"


def test_reports_escape_markdown_and_html_in_every_field_ids_included(tmp_path):
    from lmaudit.report.build import write_report

    run = _hostile_run(tmp_path)
    page = write_report(run).read_text()
    md = (run / "report.md").read_text()
    for text in (md, page):  # before: report.md held the raw <script> and <img onerror> of the ids
        assert "<script" not in text and "<img src=x" not in text
    assert not re.search(r"(?<!\\)\]\(http://evil", md)  # no link opens
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in md and "&lt;img src=x onerror=alert(1)&gt;" in md
    assert "[link\\](http://evil.example) \\*bold\\* \\`code\\` \\| cell" in md
    assert re.search(r"\| \[0\.\d{3}, [01]\.\d{3}\] \|", md)  # an interval is not escaped: no link follows it
    assert "| min_k |" in md  # an underscore inside a word is not escaped


def test_pii_looking_ids_are_masked_unless_show_pii(tmp_path):
    from lmaudit.report.build import write_report

    run = _hostile_run(tmp_path)
    write_report(run)
    for name in ("report.md", "report.html"):  # before: both showed the e-mail address and the phone number
        text = (run / name).read_text()
        assert "jane.roe@example.org" not in text and "301-2288" not in text
        assert "email, 20 chars" in text and "phone, 17 chars" in text
    write_report(run, show_pii=True)
    assert "jane.roe@example.org" in (run / "report.md").read_text()


def test_pii_records_csv_masks_pii_looking_ids_unless_show_pii(tmp_path):
    from lmaudit.runs.pii import write_reconstruction

    payload = {"type": "pii-reconstruction", "records": {"id": ["jane.roe@example.org", "r2"], "rank": [1, 2]},
               "_cases": []}
    write_reconstruction(payload, tmp_path / "masked", show_pii=False)
    assert pd.read_csv(tmp_path / "masked" / "records.csv")["id"].tolist() == ["[email, 20 chars]", "r2"]
    write_reconstruction(payload, tmp_path / "shown", show_pii=True)
    assert pd.read_csv(tmp_path / "shown" / "records.csv")["id"].tolist() == ["jane.roe@example.org", "r2"]


def _shifted(low: bool) -> dict:
    """A run whose blind baseline tells the sets apart; min_k adds beyond it, a little (``low``) or much."""
    diff = 0.06 if low else 0.3
    check = {"baselines": {}, "best": "blind_ngrams", "auc": 0.84, "auc_ci95": [0.80, 0.88], "differ": True,
             "p": 0.001}
    attack = {"auc": 0.9, "auc_ci95": [0.85, 0.95], "tpr@1%fpr": None,
              "vs_blind": {"blind": "blind_ngrams", "diff": diff, "ci95": [diff - 0.05, diff + 0.05],
                           "beyond": True}}
    return {"attacks": {"min_k": attack}, "n_members": 200, "n_nonmembers": 200, "set_check": check}


def test_on_shifted_sets_a_low_reading_is_cannot_tell_in_every_headline(tmp_path):
    from types import SimpleNamespace

    from lmaudit.report.build import build_report
    from lmaudit.report.summary import mia_summary
    from lmaudit.runs.mia_notes import verdict_text

    low = mia_summary([("", _shifted(low=True))])  # before: "Exposure: low (beyond a blind baseline: ...)"
    assert low.headline.startswith("Exposure: cannot tell (the sets differ without the model") and low.level is None
    none = mia_summary([("", {**_shifted(low=True), "attacks": {"min_k": {
        **_shifted(low=True)["attacks"]["min_k"], "vs_blind": {"diff": 0.0, "ci95": [-0.1, 0.1], "beyond": False}}}})])
    assert none.headline == low.headline  # no attack beyond: the same words (before: "not shown beyond ...")
    high = mia_summary([("", _shifted(low=False))])
    assert high.headline.startswith("Exposure: high (beyond a blind baseline") and high.level == "high"
    res = _shifted(low=True)
    terminal = verdict_text(SimpleNamespace(set_check=res["set_check"], overlap={}, **{k: res[k] for k in (
        "attacks", "n_members", "n_nonmembers")}))
    assert terminal.startswith("Exposure: cannot tell") and "Exposure: low" not in terminal
    # a report of a folder, with a part of each kind (the demo's AR and DLM): the worst shown is low only on
    # alike sets, so the headline still cannot tell
    alike = {**_shifted(low=True), "set_check": {}}
    alike["attacks"] = {"min_k": {"auc": 0.52, "auc_ci95": [0.45, 0.59], "tpr@1%fpr": None}}
    two = mia_summary([("AR target", _shifted(low=True)), ("DLM target", alike)])
    assert two.headline.startswith("Exposure: cannot tell") and "AR target (exposure cannot tell)" in " ".join(
        two.points)
    alike["attacks"]["min_k"].update(auc=0.95, auc_ci95=[0.92, 0.98])  # severe on alike sets: no caveat of the other
    assert mia_summary([("AR target", _shifted(low=True)), ("DLM target", alike)]).headline == "Exposure: severe"
    _, result = mia_folder(tmp_path / "base", with_texts=False)
    metrics = {n: {**m, "vs_blind": {"blind": "blind_ngrams", "diff": 0.06, "ci95": [0.01, 0.11], "beyond": True}}
               for n, m in result.attacks.items()}
    replace(result, attacks=metrics, set_check=_shifted(low=True)["set_check"]).write(tmp_path / "run")
    report = build_report(tmp_path / "run")
    assert report.summary.headline.startswith("Exposure: cannot tell") and report.summary.level is None


def test_mia_prints_whole_intervals_when_stdout_is_not_a_terminal(tmp_path, tiny_model_dir):
    members = write_jsonl(tmp_path / "m.jsonl", make_texts(24, seed=61))
    nonmembers = write_jsonl(tmp_path / "n.jsonl", make_texts(24, seed=62))
    out = lmaudit("mia", "--model", tiny_model_dir, "--members", members, "--nonmembers", nonmembers, "--attacks",
                  "loss,zlib,min_k_pp", "--bootstrap", 50, "--out", tmp_path / "run", "--no-report")
    assert_ok(out)
    res = json.loads((tmp_path / "run" / "results.json").read_text())
    assert "…" not in out.output  # before: "[-0.04…" and "blind_…" cut at 80 columns
    rows = [line for line in out.output.splitlines() if line.startswith("│ ")]
    for name, m in res["attacks"].items():
        row = next(line for line in rows if line.startswith(f"│ {name} "))  # one line per attack
        lo, hi = m["auc_ci95"]
        assert f"[{lo:.3f}, {hi:.3f}]" in row
    assert any("blind_ngrams (no model)" in line for line in rows)
    assert next(line for line in out.output.splitlines() if line.startswith("Exposure: ")).endswith(".")


def test_mia_refuses_other_texts_before_loading_the_model_and_the_same_model_with_privleak(tmp_path, tiny_model_dir,
                                                                                        monkeypatch):
    import lmaudit as lm
    import lmaudit.api

    texts, unlearned, retrained = _pair()
    folder = tmp_path / "retrained"
    _run(texts, retrained, fingerprint="retrained").write(folder)

    def no_load(*args, **kwargs):
        raise AssertionError("the model was loaded before the texts were found not comparable")

    cfg = RunConfig(attacks=["loss"], n_bootstrap=20, blind=False)
    with monkeypatch.context() as patched:
        patched.setattr(lmaudit.api.membership, "load_models", no_load)
        with pytest.raises(DataError, match="scores other texts than this run"):
            lm.mia(tiny_model_dir, make_texts(N, seed=1), make_texts(N, seed=2), config=cfg, retrained=folder)
    fingerprint = lm.load_model(tiny_model_dir).fingerprint
    _run(texts, retrained, fingerprint=fingerprint).write(tmp_path / "same")
    with pytest.raises(DataError, match=f"the same model as this run .fingerprint {fingerprint}"):
        lm.mia(tiny_model_dir, texts[:N], texts[N:], config=cfg, retrained=tmp_path / "same")
