"""Relearning and quantisation checks of an unlearning (lmaudit.runs.unlearning_check, lmaudit unlearning-check)."""

import json
from pathlib import Path

import numpy as np
import pytest

import lmaudit
from helpers import lmaudit as run_cli
from helpers import make_texts, write_jsonl
from lmaudit.data.loaders import TextSet
from lmaudit.errors import DataError, LmauditError, SettingError
from lmaudit.runs.unlearning_check import CheckConfig, compare, split_forget


def _sets(n_forget=20):
    forget = TextSet.from_texts(make_texts(n_forget, seed=301))
    nonmembers = TextSet.from_texts(make_texts(12, seed=302))
    return forget, nonmembers


def test_the_relearning_part_is_a_seeded_share_of_the_forget_set_disjoint_from_the_audited_part():
    forget, non = _sets()
    relearn, audited = split_forget(forget, None, non, CheckConfig(relearn_fraction=0.25, seed=3))
    assert (len(relearn), len(audited)) == (5, 15)
    assert set(relearn.texts) | set(audited.texts) == set(forget.texts)
    assert not set(relearn.texts) & set(audited.texts)
    again, _ = split_forget(forget, None, non, CheckConfig(relearn_fraction=0.25, seed=3))
    other, _ = split_forget(forget, None, non, CheckConfig(relearn_fraction=0.25, seed=4))
    assert again.texts == relearn.texts and other.texts != relearn.texts


def test_relearning_texts_that_overlap_the_audited_forget_set_or_the_nonmembers_are_refused():
    forget, non = _sets()
    # the same text with its spaces doubled is the same text: refused, naming the set it is in
    copied = TextSet.from_texts(make_texts(3, seed=303) + [forget.texts[4].replace(" ", "  ")])
    with pytest.raises(DataError, match="1 relearning text.*audited forget texts"):
        split_forget(forget, copied, non, CheckConfig())
    with pytest.raises(DataError, match="also among the non-members"):
        split_forget(forget, TextSet.from_texts([non.texts[0]]), non, CheckConfig())
    own = TextSet.from_texts(make_texts(3, seed=303))
    relearn, audited = split_forget(forget, own, non, CheckConfig())
    assert relearn is own and audited is forget  # given texts: the whole forget set is audited
    with pytest.raises(DataError, match="leave 3 to audit"):
        split_forget(TextSet.from_texts(make_texts(4, seed=305)), None, non, CheckConfig(relearn_fraction=0.25))


def test_settings_are_checked_before_any_model_loads():
    with pytest.raises(SettingError, match="unknown quantisation 'q3'.*q8_0, q4_0"):
        CheckConfig(quantize=["q3"])
    with pytest.raises(SettingError, match="steps"):
        CheckConfig(steps=0)
    assert CheckConfig(relearn=False, quantize=["q4_0"]).checks == ["q4_0"]


def _fake(points_u, points_r, noise, seed=0):
    """Points and replicates of one statistic "s" under both models, before and after a check "c"."""
    rng = np.random.default_rng(seed)
    points, reps = {}, {}
    for model, (before, after) in (("unlearned", points_u), ("retrained", points_r)):
        shared = rng.normal(0, noise, 500)  # resampling noise common to a model's two variants (paired)
        points[model] = {"as is": {"s": before}, "c": {"s": after}}
        reps[model] = {"as is": {"s": before + shared}, "c": {"s": after + shared + rng.normal(0, noise / 4, 500)}}
    return points, reps


def test_a_return_is_read_beyond_the_retrained_models_own_change_by_the_one_interval_rule():
    # both models gain 0.2 under the check: no return, however large the gain
    row = compare(*_fake((0.5, 0.7), (0.5, 0.7), 0.02), ["c"])["c"]["s"]
    assert row["unlearned"]["diff"] == pytest.approx(0.2) and row["beyond"]["diff"] == pytest.approx(0.0)
    assert row["beyond"]["ci95"][0] < 0 < row["beyond"]["ci95"][1] and row["verdict"] == "no evidence of a return"
    # the unlearned model gains 0.25 more than the retrained one: came back
    row = compare(*_fake((0.5, 0.95), (0.5, 0.7), 0.02), ["c"])["c"]["s"]
    assert row["beyond"]["diff"] == pytest.approx(0.25) and row["beyond"]["ci95"][0] > 0
    assert row["verdict"] == "came back"
    assert row["after"]["diff"] == pytest.approx(0.25)
    # it gains less than the retrained one
    row = compare(*_fake((0.5, 0.5), (0.5, 0.7), 0.02), ["c"])["c"]["s"]
    assert row["verdict"] == "less than retrained"


@pytest.fixture(scope="module")
def check_files(tmp_path_factory, tiny_model_dir):
    """A model that never unlearned (fine-tuned on the forget set and the retain set) against one retrained on the
    retain set only."""
    folder = tmp_path_factory.mktemp("ucheck")
    forget, retain = make_texts(16, seed=311), make_texts(16, seed=312)
    write_jsonl(folder / "forget.jsonl", forget)
    write_jsonl(folder / "retain.jsonl", retain)
    write_jsonl(folder / "nonmembers.jsonl", make_texts(16, seed=313))
    lmaudit.finetune(tiny_model_dir, TextSet.from_texts(forget + retain), folder / "kept", epochs=6, lr=3e-3)
    lmaudit.finetune(tiny_model_dir, folder / "retain.jsonl", folder / "retrained", epochs=6, lr=3e-3)
    return folder


def test_the_command_checks_relearning_and_q8_0_and_writes_its_table_and_report(check_files, tmp_path, monkeypatch,
                                                                                tiny_model_dir):
    monkeypatch.setenv("LMAUDIT_CACHE", str(tmp_path / "cache"))
    f = check_files
    out = tmp_path / "check"
    result = run_cli("unlearning-check", "--model", str(f / "kept"), "--retrained", str(f / "retrained"),
                     "--forget", str(f / "forget.jsonl"), "--members", str(f / "retain.jsonl"),
                     "--nonmembers", str(f / "nonmembers.jsonl"), "--steps", "3", "--quantize", "q8_0",
                     "--bootstrap", "200", "--reference", str(tiny_model_dir), "--out", str(out))
    assert result.exit_code == 0, result.output
    res = json.loads((out / "results.json").read_text())
    assert (res["n_audited"], res["n_relearn"]) == (12, 4) and sorted(res["checks"]) == ["q8_0", "relearn"]
    values = res["values"]
    assert res["config"]["attacks"] == ["loss", "zlib", "min_k", "reference"] and res["reference"]
    assert values["unlearned"]["as is"]["reference"] > values["retrained"]["as is"]["reference"] + 0.1
    # the model that kept the forget set tells its audited part from non-members better than the retrained one
    assert values["unlearned"]["as is"]["loss"] > values["retrained"]["as is"]["loss"] + 0.1
    # Q8_0 changes the weights by well under 1%: the audit barely moves
    for model in ("unlearned", "retrained"):
        assert abs(values[model]["q8_0"]["loss"] - values[model]["as is"]["loss"]) < 0.05
    # the relearned models are new folders, cached: their training record says what they relearned
    relearned = res["models"]["retrained"]["relearn"]
    record = json.loads((Path(relearned) / "lmaudit_training.json").read_text())
    assert record["stage"] == "relearn" and record["train_config"]["epochs"] > 0
    assert "came back" in result.output or "no evidence of a return" in result.output
    assert (out / "report.html").is_file() and "unlearning check" in (out / "report.html").read_text()


def test_a_served_model_is_refused_before_any_work(check_files):
    with pytest.raises(LmauditError, match="served model"):
        lmaudit.unlearning_check("http://127.0.0.1:9/v1", check_files / "retrained", check_files / "forget.jsonl",
                                 check_files / "retain.jsonl", check_files / "nonmembers.jsonl")


def test_a_statistic_undefined_under_one_model_is_undefined_not_a_verdict():
    points, reps = _fake((0.5, float("nan")), (0.5, 0.7), 0.02)
    row = compare(points, reps, ["c"])["c"]["s"]
    assert row["verdict"] == "undefined" and row["beyond"] == {"diff": None, "ci95": [None, None]}
    assert row["retrained"]["diff"] == pytest.approx(0.2)


def test_the_reference_attack_without_a_reference_model_is_refused_before_any_work(check_files):
    with pytest.raises(LmauditError, match="attack reference needs a reference model"):
        lmaudit.unlearning_check(check_files / "kept", check_files / "retrained", check_files / "forget.jsonl",
                                 check_files / "retain.jsonl", check_files / "nonmembers.jsonl",
                                 config=CheckConfig(attacks=["loss", "reference"]))
    with pytest.raises(LmauditError, match="unknown ar attack 'lossy'"):
        lmaudit.unlearning_check(check_files / "kept", check_files / "retrained", check_files / "forget.jsonl",
                                 check_files / "retain.jsonl", check_files / "nonmembers.jsonl",
                                 config=CheckConfig(attacks=["lossy"]))


def test_an_adapter_folder_is_checked_with_its_base_merged_for_quantisation(check_files, tiny_model_dir, tmp_path,
                                                                            monkeypatch):
    monkeypatch.setenv("LMAUDIT_CACHE", str(tmp_path / "cache"))
    kept = lmaudit.finetune(tiny_model_dir, check_files / "forget.jsonl", tmp_path / "kept_lora", epochs=2, lora=4)
    assert kept.training["lora"]["rank"] == 4
    checked = lmaudit.unlearning_check(tmp_path / "kept_lora", check_files / "retrained", check_files / "forget.jsonl",
                                       check_files / "retain.jsonl", check_files / "nonmembers.jsonl",
                                       config=CheckConfig(relearn=False, quantize=["q8_0"], bootstrap=50))
    quantised = Path(checked["models"]["unlearned"]["q8_0"])
    record = json.loads((quantised / "lmaudit_training.json").read_text())
    assert record["stage"] == "quantize" and not any("lora_" in name for name in record["quantized"])
    assert abs(checked["values"]["unlearned"]["q8_0"]["loss"] - checked["values"]["unlearned"]["as is"]["loss"]) < 0.05


def test_a_return_smaller_than_the_one_that_counts_is_no_return():
    # a return of 0.005 measured to ±0.002: real, but below min_return = 0.02
    points, reps = _fake((0.5, 0.505), (0.5, 0.5), 0.001)
    assert compare(points, reps, ["c"])["c"]["s"]["verdict"] == "came back"  # with no threshold it counts
    row = compare(points, reps, ["c"], threshold=0.02)["c"]["s"]
    assert row["verdict"] == "no return of 0.02 or more" and row["beyond"]["ci95"][1] < 0.02
    # a noisy one whose interval holds 0 and 0.02: no evidence either way
    points, reps = _fake((0.5, 0.51), (0.5, 0.5), 0.03)
    assert compare(points, reps, ["c"], threshold=0.02)["c"]["s"]["verdict"] == "no evidence of a return"


NOT_TRAINED = ("the forget set must be texts the model was trained on, the non-members texts neither model trained "
               "on; remove them from one of the files")


def test_a_forget_set_among_the_nonmembers_or_the_members_is_refused_before_any_model_is_read(tmp_path):
    forget = write_jsonl(tmp_path / "forget.jsonl", make_texts(8, seed=321))
    retain = write_jsonl(tmp_path / "retain.jsonl", make_texts(8, seed=322))
    held = write_jsonl(tmp_path / "heldout.jsonl", make_texts(7, seed=323) + [make_texts(8, seed=321)[5]])
    write_jsonl(tmp_path / "other.jsonl", make_texts(8, seed=324))
    absent = tmp_path / "no-model"  # never read: the sets are refused first
    # the forget set given as the non-members: nothing it could show would be about forgetting
    with pytest.raises(DataError) as same:
        lmaudit.unlearning_check(absent, absent, forget, retain, forget)
    assert str(same.value) == (f"{forget}: 8 forget text(s) are also among the non-members ({forget}), e.g. "
                               f"forget:1 = forget:1 (hint: {NOT_TRAINED})")
    with pytest.raises(DataError) as one:
        lmaudit.unlearning_check(absent, absent, forget, retain, held)
    assert str(one.value) == (f"{forget}: 1 forget text(s) are also among the non-members ({held}), e.g. "
                              f"forget:6 = heldout:8 (hint: {NOT_TRAINED})")
    # a forget text among the retain set: the retrained model trained on it too
    kept = write_jsonl(tmp_path / "kept.jsonl", make_texts(8, seed=322) + [make_texts(8, seed=321)[2]])
    with pytest.raises(DataError) as member:
        lmaudit.unlearning_check(absent, absent, forget, kept, held.with_name("other.jsonl"))
    assert str(member.value) == (f"{forget}: 1 forget text(s) are also among the members ({kept}), e.g. forget:3 = "
                                 "kept:9 (hint: the members (the retain set) are trained on by the retrained model "
                                 "too: a forget text among them is one the retrained model saw, so it is no model "
                                 "that never saw the forget set; remove them from one of the files)")
    with pytest.raises(DataError, match=r"retain.jsonl: 8 member\(s\) are also among the non-members"):
        lmaudit.unlearning_check(absent, absent, forget, retain, retain)


def test_the_command_refuses_a_forget_set_given_as_the_nonmembers(check_files, tmp_path):
    f = check_files
    result = run_cli("unlearning-check", "--model", str(f / "kept"), "--retrained", str(f / "retrained"),
                     "--forget", str(f / "nonmembers.jsonl"), "--members", str(f / "retain.jsonl"),
                     "--nonmembers", str(f / "nonmembers.jsonl"), "--quantize", "none", "--out",
                     str(tmp_path / "check"))
    assert isinstance(result.exception, DataError) and result.exit_code != 0
    assert str(result.exception).startswith(f"{f / 'nonmembers.jsonl'}: 16 forget text(s) are also among the "
                                            f"non-members ({f / 'nonmembers.jsonl'})")
    assert "No check brought the forget set back" not in result.output and not (tmp_path / "check").exists()
