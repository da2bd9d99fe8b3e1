"""Experiment files: validation, and a miniature run of each experiment type."""

import json
from pathlib import Path

import pytest

from lmaudit.attacks import list_attacks
from lmaudit.errors import LmauditError
from lmaudit.experiments.config import load_experiment
from lmaudit.experiments.runner import run_experiment

REPO = Path(__file__).resolve().parents[1]


def test_committed_experiment_files_are_valid():
    files = sorted((REPO / "experiments").glob("*.toml"))
    assert {f.stem for f in files} >= {"dlm-dft", "dlm-ift", "dlm-ablation", "dlm-misaligned-ref", "dlm-epochs",
                                       "dlm-mask-ratio"}
    for f in files:
        assert load_experiment(f).name == f.stem


@pytest.mark.parametrize("text, needle", [
    ('name = "x"\ntype = "mia"\nepoch = 3\n', "unknown key 'epoch'.*did you mean 'epochs'"),
    ('name = "x"\ntype = "nonsense"\n', "type 'nonsense'"),
    ('name = "x"\ntype = "mia"\nseeds = 3\n', "key 'seeds' must be list"),
    ('type = "mia"\n', "missing key 'name'"),
])
def test_bad_experiment_files(tmp_path, text, needle):
    f = tmp_path / "bad.toml"
    f.write_text(text)
    with pytest.raises(LmauditError, match=needle):
        load_experiment(f)


@pytest.fixture(scope="module")
def shared_cache(tmp_path_factory):
    return tmp_path_factory.mktemp("experiment-cache")


@pytest.fixture(autouse=True)
def _reuse_corpus_and_models(shared_cache, monkeypatch):
    """One cache for this module: the corpus, tokenizer and base model are built once."""
    monkeypatch.setenv("LMAUDIT_CACHE", str(shared_cache))


def mini(tmp_path, **kw):
    import scipy

    f = tmp_path / "mini.toml"
    base = dict(name="mini", kind="dlm", pretrain_tokens=4000, adapt_tokens=2000, n_members=6, n_nonmembers=6, epochs=2, seeds=[0],
                budget=3, vocab_size=500, packages=[str(Path(scipy.__file__).parent / "optimize")])
    base.update(kw)

    def toml(v):
        if isinstance(v, dict):
            return "{ " + ", ".join(f"{k} = {toml(x)}" for k, x in v.items()) + " }"
        return json.dumps(v)

    f.write_text("\n".join(f"{k} = {toml(v)}" for k, v in base.items()) + "\n")
    return load_experiment(f)


def test_mini_mia_experiment_writes_table(tmp_path):
    folder = run_experiment(mini(tmp_path, type="mia"), out_root=tmp_path / "results", command="lmaudit run mini.toml")
    res = json.loads((folder / "results.json").read_text())
    assert set(res["rows"]) == {s.name for s in list_attacks("dlm")}
    assert len(res["rows"]["q_skew"]["per_seed"]) == 1 and res["rows"]["q_skew"]["auc"][1] == 0.0
    table = (folder / "table.md").read_text()
    assert "| q_skew |" in table and "lmaudit run mini.toml" in table


@pytest.mark.slow
def test_mini_epochs_and_mask_ratio_write_plots(tmp_path):
    folder = run_experiment(mini(tmp_path, name="ep", type="epochs", attacks=["loss", "q_skew"]), out_root=tmp_path)
    curves = json.loads((folder / "results.json").read_text())["curves"]
    assert set(curves) == {"loss", "q_skew"} and set(curves["loss"]) == {"1", "2"}
    assert (folder / "auc_vs_epochs.png").stat().st_size > 5000
    folder = run_experiment(mini(tmp_path, name="mr", type="mask-ratio", mask_ratios=[0.25, 0.75]), out_root=tmp_path)
    ratios = json.loads((folder / "results.json").read_text())["ratios"]
    assert set(ratios) == {"0.25", "0.75"} and all(r["n_tokens"] > 0 for r in ratios.values())
    assert (folder / "gain_by_mask_ratio.png").stat().st_size > 5000


@pytest.mark.slow
def test_mini_extraction_steps_and_pii_experiments(tmp_path):
    folder = run_experiment(mini(tmp_path, name="st", type="extraction-steps",
                                 extract={"mask": "random:0.3", "steps": ["1", "2", "max"], "trajectories": 4}),
                            out_root=tmp_path)
    res = json.loads((folder / "results.json").read_text())
    assert set(res["steps"]) == {"1", "2", "max"} and res["steps"]["1"]["median_delta_log_p"] == [0.0, 0.0]
    assert res["steps"]["2"]["forwards_per_record"] > 0 and (folder / "log_p_by_steps.png").exists()
    assert "median Δ log p̂" in (folder / "table.md").read_text()
    folder = run_experiment(mini(tmp_path, name="pii", type="pii-extraction", pii_fields=["email"], block=128,
                                 extract={"trajectories": 2}), out_root=tmp_path)
    res = json.loads((folder / "results.json").read_text())
    assert set(res["pii_rows"]) == {"email / AR", "email / DLM one-step", "email / DLM max-step"}
    entry = res["pii_rows"]["email / AR"][0]
    assert {"discoverable@p=0.5", "discoverable@p=0.99", "median_log_p_train", "median_log_p_unseen"} <= set(entry)
    assert len(res["likelihood_shift"]["email / AR"]["train"]) == 6


def test_mini_extraction_relaxed_experiment(tmp_path):
    folder = run_experiment(mini(tmp_path, name="rx", type="extraction-relaxed", block=128, n_relaxed=3, n_members=4,
                                 extract={"mask": "suffix:6", "trajectories": 2, "relaxed": 6, "samples": 8}),
                            out_root=tmp_path)
    res = json.loads((folder / "results.json").read_text())
    assert set(res["relaxed"]) == {"AR", "DLM"} and len(res["relaxed"]["DLM"]["eps"]) == 7
    assert res["relaxed"]["AR"]["empirical"][-1] == 1.0  # every generation is within |M| of the target
    assert set(res["budget"]["fractions"]) == {"AR", "DLM one-step", "DLM max-step"}
    fr = res["budget"]["fractions"]["AR"]
    assert all(a <= b for a, b in zip(fr, fr[1:]))  # more queries never extract less
    assert (folder / "budget.png").exists() and (folder / "relaxed_dlm.png").exists()


def test_mini_unlearning_audit_experiment(tmp_path):
    folder = run_experiment(mini(tmp_path, name="ul", type="unlearning-audit", kind="ar", n_members=24, n_nonmembers=24,
                                 forget_fractions=[0.25], n_shadows=2, unlearn={"epochs": 1.0}), out_root=tmp_path)
    res = json.loads((folder / "results.json").read_text())
    methods = {k.split(" / ")[1] for k in res["unlearning"]}
    audits = {k.split(" / ")[2] for k in res["unlearning"]}
    assert methods == {"none", "retrain", "gradient_ascent", "npo", "finetune"}
    assert audits == {"smi", "smi-m", "smi-scores", "smi-m-scores", "threshold-loss", "threshold-reference",
                      "threshold-lira"}
    assert all(0 <= v["mean"] <= 1 or v["mean"] != v["mean"] for v in res["unlearning"].values())
    assert res["cost_s"]["lira_shadow_training"] >= 0 and (folder / "rho_by_method.png").exists()
    assert "gold standard" in (folder / "table.md").read_text()


def test_mini_pii_reconstruction_experiment(tmp_path):
    folder = run_experiment(mini(tmp_path, name="rc", type="pii-reconstruction", pii_fields=["email"], block=128,
                                 n_targets=3, n_calibration=2,
                                 reconstruct={"candidates": 3, "mask_length": 6, "steps": 3}), out_root=tmp_path)
    res = json.loads((folder / "results.json").read_text())
    assert set(res["asr"]) == {"ce", "skew_pii", "skew_context", "combined"}
    assert len(res["asr"]["ce"]["email"]) == 1 and 0 <= res["fields"]["email"]["alpha"][0] <= 1
    assert "Top-1 attack success rate" in (folder / "table.md").read_text()
