"""The ``checkpoint`` experiment: given model folders and data files (the GPU configs' type), run here on tiny ones."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from helpers import AUTO_DEVICE, assert_ok, assert_user_error, lmaudit, make_texts, write_jsonl
from lmaudit.experiments.registry import load_experiment

REPO = Path(__file__).resolve().parents[1]
GPU = sorted((REPO / "experiments" / "gpu").glob("*.toml"))


@pytest.mark.parametrize("path", GPU, ids=[p.stem for p in GPU])
def test_the_gpu_configs_load_into_the_checkpoint_schema(path):
    cfg = load_experiment(path)
    assert cfg.type == "checkpoint" and cfg.model.startswith("models/") and cfg.dtype == "bfloat16"
    assert cfg.finetune == (cfg.kind == "dlm") and (cfg.lora == 16) == cfg.finetune


def test_a_gpu_config_without_its_model_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no models/ here
    assert_user_error(lmaudit("run", str(GPU[0]), "--out", str(tmp_path / "results")), "data/", "no such file")


def _config(tmp_path, model, **keys) -> Path:
    lines = ['name = "tiny-checkpoint"', 'type = "checkpoint"', 'description = "A tiny checkpoint."',
             f'model = "{model}"', "seeds = [0]", "n_members = 10", "n_nonmembers = 10"]
    lines += [f"{k} = {json.dumps(v)}" for k, v in {"attacks": ["loss", "zlib"], **keys}.items()]
    path = tmp_path / "exp.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_detection_on_a_labelled_file_equals_mia_on_two_files(tmp_path, tiny_model_dir):
    members, nonmembers = make_texts(12, seed=1), make_texts(12, seed=2)
    write_jsonl(tmp_path / "m.jsonl", members[:10])
    write_jsonl(tmp_path / "n.jsonl", nonmembers[:10])
    with open(tmp_path / "wiki.jsonl", "w") as fh:  # WikiMIA's shape, 12 of each: the experiment keeps the first 10
        for i in range(12):
            fh.write(json.dumps({"input": members[i], "label": 1}) + "\n"
                     + json.dumps({"input": nonmembers[i], "label": 0}) + "\n")
    exp = _config(tmp_path, tiny_model_dir, data=str(tmp_path / "wiki.jsonl"), text_field="input")
    assert_ok(lmaudit("run", str(exp), "--out", str(tmp_path / "results"), "--no-report"))
    record = json.loads((tmp_path / "results" / "tiny-checkpoint" / "results.json").read_text())
    assert record["data"]["n_members"] == record["data"]["n_nonmembers"] == 10
    assert record["corpus"] is None  # no embedded corpus was built
    (speed,) = record["throughput"]
    assert speed["tokens"] > 0 and speed["tokens_per_s"] > 0
    assert (speed["dtype"], speed["device"]) == ("float32", AUTO_DEVICE)
    assert_ok(lmaudit("mia", "--model", str(tiny_model_dir), "--members", str(tmp_path / "m.jsonl"), "--nonmembers",
                      str(tmp_path / "n.jsonl"), "--out", str(tmp_path / "mia"), "--attacks", "loss,zlib",
                      "--bootstrap", "200", "--no-report"))
    mia = json.loads((tmp_path / "mia" / "results.json").read_text())["attacks"]
    assert {n: r["auc"][0] for n, r in record["rows"].items()} == {n: m["auc"] for n, m in mia.items()}
    table = (tmp_path / "results" / "tiny-checkpoint" / "table.md").read_text()
    assert f"model `{tiny_model_dir}`" in table and "tokens/s" in table


def test_finetuning_with_lora_then_auditing_against_the_base(tmp_path, tiny_model_dir):
    write_jsonl(tmp_path / "m.jsonl", make_texts(10, seed=1))
    write_jsonl(tmp_path / "n.jsonl", make_texts(10, seed=2))
    exp = _config(tmp_path, tiny_model_dir, members=str(tmp_path / "m.jsonl"), nonmembers=str(tmp_path / "n.jsonl"),
                  finetune=True, lora=4, epochs=1, attacks=["loss", "reference"])
    assert_ok(lmaudit("run", str(exp), "--out", str(tmp_path / "results"), "--no-report"))
    record = json.loads((tmp_path / "results" / "tiny-checkpoint" / "results.json").read_text())
    assert set(record["rows"]) == {"loss", "reference"}  # the base is the reference
    assert all(0.0 <= r["auc"][0] <= 1.0 for r in record["rows"].values())
