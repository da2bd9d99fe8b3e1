"""The Python interface: the same jobs as the commands, with the same inputs and the same errors."""

import json

import numpy as np
import pytest

import lmaudit
from helpers import make_texts, write_jsonl
from lmaudit.data.loaders import TextSet
from lmaudit.errors import LmauditError
from lmaudit.runs.mia import RunConfig


def test_mia_from_one_labelled_file_equals_two_files(tmp_path, tiny_model_dir):
    mem, non = make_texts(10, seed=1), make_texts(10, seed=2)
    labelled = tmp_path / "all.jsonl"
    labelled.write_text("".join(json.dumps({"input": t, "label": lab}) + "\n"
                                for t, lab in [*((t, 1) for t in mem), *((t, 0) for t in non)]))
    cfg = RunConfig(attacks=["loss", "min_k"], n_bootstrap=50)
    a = lmaudit.mia(tiny_model_dir, write_jsonl(tmp_path / "m.jsonl", mem), write_jsonl(tmp_path / "n.jsonl", non),
                    config=cfg)
    b = lmaudit.mia(tiny_model_dir, data=labelled, label_field="label", text_field="input", config=cfg)
    assert (b.n_members, b.n_nonmembers) == (10, 10)
    for name in ("loss", "min_k"):  # the same texts in the same roles: the same scores
        assert b.attacks[name]["auc"] == pytest.approx(a.attacks[name]["auc"])
        assert b.scores[name] == pytest.approx(a.scores[name], abs=1e-6)


@pytest.mark.parametrize("kwargs, message", [
    (dict(members="m.jsonl"), "missing option nonmembers="),
    (dict(data="all.jsonl"), "data= needs label_field="),
    (dict(members="m.jsonl", nonmembers="n.jsonl", data="all.jsonl", label_field="label"), "mutually exclusive"),
])
def test_mia_says_which_argument_is_wrong_before_loading_a_model(tmp_path, kwargs, message):
    with pytest.raises(LmauditError, match=message):
        lmaudit.mia(tmp_path / "no-model-here", **kwargs)


def test_the_commands_and_the_python_interface_write_the_same_extraction(tmp_path, tiny_model_dir):
    """One wiring: ``lmaudit extract`` calls ``lmaudit.extract`` (the copies once disagreed on ``model``)."""
    from helpers import assert_ok
    from helpers import lmaudit as cli

    data = write_jsonl(tmp_path / "d.jsonl", make_texts(4, seed=3))
    cfg = lmaudit.ExtractConfig(mask="suffix:4", trajectories=2, n=10)
    assert_ok(cli("extract", "--model", tiny_model_dir, "--data", data, "--mask", "suffix:4", "--trajectories", "2",
                  "--n", "10", "--out", tmp_path / "cli", "--no-report"))
    lmaudit.extract(tiny_model_dir, data, config=cfg).write(tmp_path / "api")
    by_cli, by_api = (json.loads((tmp_path / d / "results.json").read_text()) for d in ("cli", "api"))
    assert by_cli["model"] == by_api["model"] == str(tiny_model_dir)
    assert by_cli["summary"] == by_api["summary"]


@pytest.mark.parametrize("make, message", [
    (lambda: lmaudit.ReconstructConfig(alpha=5), r"alpha must be in \[0, 1\]"),
    (lambda: lmaudit.ReconstructConfig(skew_signal="both"), "unknown skew signal 'both'"),
    (lambda: lmaudit.AuditConfig(method="smim"), "unknown method 'smim'"),
    (lambda: lmaudit.AuditConfig(features="logits"), "unknown features 'logits'"),
])
def test_settings_are_checked_when_the_config_is_made_from_python_too(make, message):
    with pytest.raises(LmauditError, match=message):
        make()


def test_a_written_run_reads_back_with_its_table_verdict_and_scores(tmp_path, tiny_model_dir):
    cfg = RunConfig(attacks=["loss", "min_k"], n_bootstrap=20)
    mem, non = write_jsonl(tmp_path / "m.jsonl", make_texts(20, seed=1)), write_jsonl(tmp_path / "n.jsonl",
                                                                                     make_texts(20, seed=2))
    result = lmaudit.mia(tiny_model_dir, mem, non, config=cfg)
    result.write(tmp_path / "run")
    back = lmaudit.load_results(tmp_path / "run")
    assert repr(back) == repr(result) and "Exposure:" in repr(back) and "20 members vs 20 non-members" in repr(back)
    frame = back.to_frame()
    assert list(frame["attack"]) == sorted(result.attacks, key=lambda n: -result.attacks[n]["auc"])
    assert frame.loc[0, "auc"] == max(m["auc"] for m in result.attacks.values())
    assert back.scores["min_k"] == pytest.approx(result.scores["min_k"])
    assert back.write(tmp_path / "again").name == "results.json"  # an MIA run read back writes again, whole
    audit = lmaudit.audit_set(tiny_model_dir, mem, non, write_jsonl(tmp_path / "s.jsonl", make_texts(20, seed=7)),
                              config=lmaudit.AuditConfig(bootstrap=20))
    audit.write(tmp_path / "audit")
    read = lmaudit.load_results(tmp_path / "audit")
    assert read.type == "set-audit" and "Set-level audit: ρ =" in repr(read)
    assert list(read.to_frame()["method"]) == list(audit.payload["methods"])
    with pytest.raises(LmauditError, match="was read from"):
        read.write(tmp_path / "other")


def test_probe_records_rescore_with_other_parameters_exactly_as_a_run_would(tmp_path, tiny_model_dir, monkeypatch):
    """lmaudit.probe keeps the probes' statistics; lmaudit.score re-scores them with no model at all."""
    monkeypatch.setenv("LMAUDIT_CACHE", str(tmp_path / "cache"))
    mem, non = make_texts(8, seed=11), make_texts(8, seed=12)
    texts = TextSet.from_texts(mem + non)
    records = lmaudit.probe(tiny_model_dir, texts, config=RunConfig(attacks=["loss", "min_k", "gap_k"]))
    assert len(records) == 16 and records.attacks == ["loss", "min_k", "gap_k"]
    assert "16 texts, 1 probe(s) (ARRequest)" in repr(records)
    run = lmaudit.mia(tiny_model_dir, TextSet.from_texts(mem), TextSet.from_texts(non),
                      config=RunConfig(attacks=["loss", "min_k", "zlib"], params={"min_k": {"k": 0.5}},
                                       n_bootstrap=20))
    scores = lmaudit.score(records, ["loss", "min_k", "zlib"], params={"min_k": {"k": 0.5}})
    for name in ("loss", "min_k", "zlib"):  # zlib was not asked for at probe time: it reads the same AR probe
        assert scores[name] == pytest.approx(run.scores[name], abs=1e-9)
    assert not (scores["min_k"] == pytest.approx(lmaudit.score(records, ["min_k"])["min_k"]))  # k changed them
    with pytest.raises(LmauditError, match="attack 'min_k' has no parameter"):
        lmaudit.score(records, ["min_k"], params={"min_k": {"kk": 1}})
    with pytest.raises(LmauditError, match="params name attack"):
        lmaudit.score(records, ["loss"], params={"min_k": {"k": 0.5}})
    with pytest.raises(LmauditError, match="needs a reference model"):
        lmaudit.score(records, ["reference"])


def test_the_scores_of_unlabelled_texts_are_those_a_run_gives_them(tiny_model_dir):
    """lmaudit.score_texts scores one set as lmaudit.mia scores it; lmaudit.audit_features estimates ρ from features
    as lmaudit.audit_set does from the scores it measured."""
    mem, non = make_texts(8, seed=11), make_texts(8, seed=12)
    cfg = RunConfig(attacks=["loss", "min_k", "reference"], n_bootstrap=20)
    run = lmaudit.mia(tiny_model_dir, mem, non, reference=tiny_model_dir, config=cfg)
    scores = lmaudit.score_texts(tiny_model_dir, TextSet.from_texts(mem + non), reference=tiny_model_dir, config=cfg)
    assert sorted(scores) == ["loss", "min_k", "reference"]
    for name, values in scores.items():
        assert values == pytest.approx(run.scores[name], abs=1e-9)
    audit = lmaudit.audit_set(tiny_model_dir, mem[:6], non[:6], mem[6:] + non[6:],
                              config=lmaudit.AuditConfig(method="smi", features="scores", attacks=["loss", "min_k"],
                                                         bootstrap=20))
    feats = {name: np.column_stack([v for _, v in sorted(lmaudit.score_texts(
        tiny_model_dir, texts, config=RunConfig(attacks=["loss", "min_k"])).items())]) for name, texts in
        (("m", mem[:6]), ("n", non[:6]), ("u", mem[6:] + non[6:]))}
    est = lmaudit.audit_features(feats["m"], feats["n"], feats["u"],
                                 config=lmaudit.AuditConfig(method="smi", bootstrap=20))
    assert est["smi"]["rho"] == pytest.approx(audit["methods"]["smi"]["rho"], abs=1e-12)
    with pytest.raises(LmauditError, match="method duci reads shadow models"):
        lmaudit.audit_features(feats["m"], feats["n"], feats["u"], config=lmaudit.AuditConfig(method="duci"))


def test_a_masked_attack_whose_plan_the_records_lack_is_refused_naming_it(tmp_path, tiny_dlm_dir, monkeypatch):
    monkeypatch.setenv("LMAUDIT_CACHE", str(tmp_path / "cache"))
    texts = TextSet.from_texts(make_texts(4, seed=13))
    records = lmaudit.probe(tiny_dlm_dir, texts, config=RunConfig(attacks=["loss"], budget=2))
    again = lmaudit.score(records)["loss"]
    assert again.shape == (4,) and again == pytest.approx(lmaudit.score(records, ["loss"])["loss"])
    records.budget = 4  # a budget the records were not probed with asks for another mask plan
    with pytest.raises(LmauditError, match="attack 'loss' .* reads a probe these records do not hold"):
        lmaudit.score(records, ["loss"])


def test_tab_completion_lists_the_jobs():
    assert {"mia", "probe", "score", "load_results", "RunConfig", "attacks"} <= set(dir(lmaudit))


def test_the_training_jobs_return_what_they_trained_and_never_write_over_an_input(tmp_path, tiny_model_dir,
                                                                                  monkeypatch):
    from lmaudit.folders import sha256_file

    monkeypatch.setenv("LMAUDIT_CACHE", str(tmp_path / "cache"))
    data = TextSet.from_texts(make_texts(16, seed=21))
    ft = lmaudit.finetune(tiny_model_dir, data, tmp_path / "ft", epochs=2, lr=3e-2, block=32, batch_size=8, lora=4)
    assert ft.type == "model" and ft.training["lora"]["rank"] == 4 and ft.training["stage"] == "finetune"
    assert repr(ft).startswith(f"<TrainedModel {tmp_path / 'ft'}: finetune ar dft, LoRA rank 4, training loss ")
    row = ft.to_frame().iloc[0]
    assert (row["lr"], row["batch_size"], row["steps"]) == (3e-2, 8, ft.training["steps"])
    assert ft.load().fingerprint != lmaudit.load_model(tiny_model_dir).fingerprint
    weights = tiny_model_dir / "model.safetensors"
    before = sha256_file(weights)
    with pytest.raises(LmauditError, match="out '.*' is model"):
        lmaudit.finetune(tiny_model_dir, data, tiny_model_dir, epochs=1)
    with pytest.raises(LmauditError, match="lies inside model"):
        lmaudit.unlearn(ft.path, data, data, ft.path / "inside", method="gradient_ascent")
    assert sha256_file(weights) == before
    sh = lmaudit.shadows(tiny_model_dir, data, tmp_path / "sh", k=2, epochs=1, lr=3e-2, block=32, batch_size=8)
    assert sh.type == "shadows" and len(sh.load().paths) == 2 and "2 shadow models" in repr(sh)


def test_generate_continues_each_prompt_as_the_command_prints_it(tmp_path, tiny_model_dir, tiny_dlm_dir):
    from helpers import assert_ok
    from helpers import lmaudit as cli

    prompts = write_jsonl(tmp_path / "p.jsonl", make_texts(2, seed=31))
    for folder in (tiny_model_dir, tiny_dlm_dir):
        rows = lmaudit.generate(folder, prompts, gen_length=4, steps=4, seed=3)
        assert list(rows.columns) == ["id", "prompt", "continuation"] and len(rows) == 2
        assert rows.equals(lmaudit.generate(folder, prompts, gen_length=4, steps=4, seed=3))  # seeded
        out = cli("generate", "--model", folder, "--prompt-file", prompts, "--gen-length", 4, "--steps", 4, "--seed", 3)
        assert_ok(out)
        for row in rows.itertuples():
            assert row.continuation.strip() in " ".join(out.stdout.split())


def test_epsilon_from_python_equals_the_command(tmp_path, tiny_model_dir):
    from helpers import assert_ok
    from helpers import lmaudit as cli

    run = lmaudit.mia(tiny_model_dir, TextSet.from_texts(make_texts(12, seed=41)),
                      TextSet.from_texts(make_texts(12, seed=42)), config=RunConfig(attacks=["loss", "zlib"],
                                                                                    n_bootstrap=20))
    run.write(tmp_path / "run")
    folder = tmp_path / "run"
    res = lmaudit.epsilon(folder, delta=1e-4, seed=1)
    assert res.type == "epsilon-lower-bound" and list(res.to_frame()["attack"]) == ["loss", "zlib"]
    best = max(b["epsilon"] for b in res["attacks"].values())
    assert f"largest ε_lb {best:.3f}" in repr(res)
    res.write(tmp_path / "api")
    assert_ok(cli("epsilon", folder, "--delta", "1e-4", "--seed", 1, "--out", tmp_path / "cli"))
    by_api, by_cli = (json.loads((tmp_path / d / "epsilon.json").read_text()) for d in ("api", "cli"))
    assert by_api["attacks"] == by_cli["attacks"] and by_api["git_commit"] == by_cli["git_commit"]


def test_a_named_attack_without_the_models_it_reads_is_refused_naming_the_option():
    from lmaudit.attacks.selection import select_attacks

    with pytest.raises(LmauditError, match=r"attack\(s\) lira, rmia need shadow models"):
        select_attacks(["loss", "lira", "rmia"], "ar", has_reference=True)
    with pytest.raises(LmauditError, match=r"attack\(s\) reference need a reference model"):
        select_attacks(["reference", "lira"], "ar", has_shadows=True)
    chosen = select_attacks(["reference", "lira"], "ar", has_reference=True, has_shadows=True)
    assert [s.name for s in chosen.specs] == ["reference", "lira"] and not chosen.skipped
