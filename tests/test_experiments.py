"""Experiment files: validation, and a miniature run of each experiment type."""

import json
from pathlib import Path

import pytest

from lmaudit.errors import LmauditError
from lmaudit.experiments import load_experiment, run_experiment

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
    f.write_text("\n".join(f"{k} = {json.dumps(v)}" for k, v in base.items()) + "\n")
    return load_experiment(f)


def test_mini_mia_experiment_writes_table(tmp_path):
    folder = run_experiment(mini(tmp_path, type="mia"), out_root=tmp_path / "results", command="lmaudit run mini.toml")
    res = json.loads((folder / "results.json").read_text())
    assert set(res["rows"]) == {"q_skew", "loss", "min_k", "min_k_pp", "gap_k", "calibration", "secmi_dlm", "sama"}
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
