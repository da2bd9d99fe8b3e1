"""Experiment files and types: validation, rebuilding committed folders, a new type in one module, and a
miniature run of each experiment type."""

import json
import math
import os
import shutil
from dataclasses import dataclass, fields
from pathlib import Path

import numpy as np
import pytest

from helpers import assert_ok, assert_user_error, lmaudit, mini_experiment
from lmaudit.attacks import list_attacks
from lmaudit.errors import LmauditError
from lmaudit.experiments import registry
from lmaudit.experiments.config import BaseConfig
from lmaudit.experiments.outputs import rebuild_outputs
from lmaudit.experiments.registry import (
    get_experiment_type,
    list_experiment_types,
    load_experiment,
    register_experiment,
)
from lmaudit.experiments.runner import run_experiment
from lmaudit.report import plots
from lmaudit.report.build import build_report, write_report

REPO = Path(__file__).resolve().parents[1]
COMMITTED = sorted((REPO / "experiments").glob("*.toml"))
GPU_CONFIGS = sorted((REPO / "experiments" / "gpu").glob("*.toml"))  # run on a GPU, not here


def test_committed_experiment_files_load_into_their_types_schema():
    assert len(COMMITTED) >= 11
    for f in COMMITTED:
        cfg = load_experiment(f)
        assert cfg.name == f.stem and type(cfg) is get_experiment_type(cfg.type).config


POWER = sorted((REPO / "experiments" / "power").glob("*.toml"))  # the issue-sized real-model runs, too long here


def test_each_power_config_is_its_committed_run_at_the_papers_size_on_the_1m_token_dlm():
    committed = {f.stem: load_experiment(f) for f in COMMITTED}
    adapted = committed["real-dlm-adaptation-1m"]
    dlm = [f for f in POWER if load_experiment(f).kind == "dlm"]
    assert len(dlm) == 7
    for f in dlm:
        cfg = load_experiment(f)
        small = committed[f.stem]  # same name: its results replace the committed run's
        assert cfg.name == small.name and cfg.type == small.type and cfg.base == adapted.base == "smollm2-135m"
        assert [getattr(cfg, k) for k in ("adapt_tokens", "adapt_lr", "adapt_block", "adapt_batch_size")] == [
            getattr(adapted, k) for k in ("adapt_tokens", "adapt_lr", "adapt_block", "adapt_batch_size")]
        assert cfg.n_members >= 200 and cfg.n_nonmembers >= 200
        differ = {k.name for k in fields(cfg) if getattr(cfg, k.name) != getattr(small, k.name)}
        if cfg.type in ("extraction-steps", "pii-extraction"):
            assert cfg.extract["trajectories"] >= 32 > small.extract["trajectories"]
            assert {k for k in cfg.extract if cfg.extract[k] != small.extract.get(k)} == {"trajectories"}
            allowed = {"extract"}
        else:
            assert len(cfg.seeds) >= 3 and cfg.budget == 16
            allowed = {"seeds", "budget"}
        # the rest as the committed run, so that the rows read the larger run the way they read the small one
        assert differ <= {"description", "adapt_tokens", "n_members", "n_nonmembers", *allowed}, (f.name, differ)


def test_each_ar_power_config_is_its_committed_run_with_more_texts_alone():
    committed = {f.stem: load_experiment(f) for f in COMMITTED}
    ar = [load_experiment(f) for f in POWER if load_experiment(f).kind == "ar"]
    assert [cfg.name for cfg in ar] == ["real-pretraining-share"]
    for cfg in ar:
        small = committed[cfg.name]  # same name: its results replace the committed run's
        assert cfg.type == small.type and cfg.base == small.base == "smollm2-135m"
        assert cfg.n_members > small.n_members and cfg.n_nonmembers > small.n_nonmembers
        differ = {k.name for k in fields(cfg) if getattr(cfg, k.name) != getattr(small, k.name)}
        assert differ == {"description", "n_members", "n_nonmembers"}, differ


def test_every_registered_type_has_a_committed_experiment_file():
    assert {load_experiment(f).type for f in COMMITTED + GPU_CONFIGS} == {t.name for t in list_experiment_types()}


@pytest.mark.parametrize("text, needle", [
    ('name = "x"\ntype = "mia"\nepoch = 3\n', r"bad.toml: unknown key 'epoch'.*did you mean 'epochs'"),
    ('name = "x"\ntype = "mia"\nvariants = {}\n', r"unknown key 'variants' for an experiment of type 'mia'.*"
                                                   r"'variants' is a key of type ablation"),
    ('name = "x"\ntype = "extraction-steps"\nbudget = 16\n',
     r"unknown key 'budget'.*ablation, checkpoint, dp-audit, epochs, mask-ratio"),
    ('name = "x"\ntype = "nonsense"\n', "type 'nonsense' is not one of"),
    ('name = "x"\ntype = "mask-ratios"\n', "did you mean 'mask-ratio'"),
    ('name = "x"\ntype = "mia"\nseeds = 3\n', r"key 'seeds' must be list\[int\], got int"),
    ('name = "x"\ntype = "mia"\nseeds = ["a"]\n', r"key 'seeds' must be list\[int\], got list\[str\]"),
    ('name = "x"\ntype = "mia"\nn_members = true\n', "key 'n_members' must be int, got bool"),
    ('name = "x"\ntype = "mia"\nattacks = "loss"\n', r"key 'attacks' must be list\[str\] \| None, got str"),
    ('type = "mia"\n', "missing key 'name'"),
    ('name = "../../x"\ntype = "mia"\n', r"name '\.\./\.\./x' is not a plain folder name"),
    ('name = "/tmp/x"\ntype = "mia"\n', "is not a plain folder name"),
    ('name = ".."\ntype = "mia"\n', "is not a plain folder name"),
    ('name = ""\ntype = "mia"\n', "is not a plain folder name"),
])
def test_bad_experiment_files(tmp_path, text, needle):
    f = tmp_path / "bad.toml"
    f.write_text(text)
    with pytest.raises(LmauditError, match=needle):
        load_experiment(f)


def test_an_int_is_a_valid_float_key(tmp_path):
    f = tmp_path / "ok.toml"
    f.write_text('name = "x"\ntype = "extraction-relaxed"\nbudget_p = 1\nextract = { mask = "suffix:4" }\n')
    cfg = load_experiment(f)
    assert cfg.budget_p == 1 and cfg.extract == {"mask": "suffix:4"} and cfg.n_relaxed == 30


def test_rebuilding_the_committed_folders_reproduces_them(tmp_path):
    """Every committed results folder holds the tables, figures and table.md its stored values rebuild to."""
    folders = sorted(d for d in (REPO / "results").iterdir() if (d / "results.json").exists())
    assert {d.name for d in folders} <= {f.stem for f in COMMITTED}  # each folder is a committed file's run
    for d in folders:
        copy = shutil.copytree(d, tmp_path / d.name)
        (copy / "table.md").unlink()
        rebuild_outputs(copy)
        assert (copy / "table.md").read_text() == (d / "table.md").read_text(), d.name
        assert (copy / "results.json").read_text() == (d / "results.json").read_text(), d.name
        figures = json.loads((d / "results.json").read_text())["figures"]
        assert all((d / f["file"]).exists() and (d / f["file"]).read_bytes()[:4] == b"\x89PNG" for f in figures)


def test_tables_command_rebuilds_a_folder_and_its_report(tmp_path):
    folder = shutil.copytree(REPO / "results" / "dlm-dft", tmp_path / "dlm-dft")
    rec = json.loads((folder / "results.json").read_text())
    for name in ("table.md", "report.md"):
        (folder / name).unlink()
    del rec["tables"], rec["figures"]  # as the folders written before tables were stored
    (folder / "results.json").write_text(json.dumps(rec))
    with pytest.raises(LmauditError, match="lmaudit tables"):
        build_report(folder)
    assert_ok(lmaudit("tables", folder))
    assert (folder / "table.md").read_text() == (REPO / "results" / "dlm-dft" / "table.md").read_text()
    q = rec["rows"]["q_skew"]
    assert f"| q_skew | {100 * q['auc'][0]:.1f} ± {100 * q['auc'][1]:.1f} |" in (folder / "report.md").read_text()
    assert_user_error(lmaudit("tables", tmp_path), str(tmp_path), "no results.json")  # a one-line error


# --- a new experiment type is one module: its keys, runner, tables and figures ---

@dataclass
class WordCountConfig(BaseConfig):
    words: int = 3  # a key of this type only


def _run_word_count(ws, cfg: WordCountConfig) -> dict:
    members, nonmembers = ws.data(cfg.seeds[0])
    head = lambda ts: [" ".join(r.target.split()[: cfg.words]) for r in ts.records]  # noqa: E731
    return {"heads": {"members": head(members), "nonmembers": head(nonmembers)}}


def _word_count_tables(record: dict):
    rows = [[name, str(len(h)), f"{np.mean([len(t.split()) for t in h]):.2f}"] for name, h in record["heads"].items()]
    return [(f"Words in the first {record['experiment']['words']} of each text.", ["set", "texts", "mean words"], rows)]


def _word_count_figures(record: dict):
    means = [np.mean([len(t.split()) for t in h]) for h in record["heads"].values()]
    png = plots.grouped_bars(list(record["heads"]), {"words": (means, [0.0] * len(means))}, ylabel="words",
                             title="word count")
    return [("words", "Mean words per set", png)]


@pytest.fixture
def word_count(monkeypatch):
    list_experiment_types()  # the real types are registered before the registry is swapped for a copy
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    return register_experiment("word-count", config=WordCountConfig, run=_run_word_count, tables=_word_count_tables,
                               figures=_word_count_figures)


def test_a_new_experiment_type_is_one_registration(tmp_path, word_count):
    with pytest.raises(ValueError, match="already registered"):
        register_experiment("word-count", config=WordCountConfig, run=_run_word_count, tables=_word_count_tables)
    with pytest.raises(LmauditError, match=r"mini.toml: unknown key 'n_shadows'.*key of type unlearning-audit"):
        mini(tmp_path, type="word-count", n_shadows=2)
    with pytest.raises(LmauditError, match=r"unknown key 'words' for an experiment of type 'mia'.*type word-count"):
        mini(tmp_path, type="mia", words=2)
    cfg = mini(tmp_path, name="wc", type="word-count", words=2)
    assert type(cfg) is WordCountConfig and cfg.words == 2
    folder = run_experiment(cfg, out_root=tmp_path / "results", command="lmaudit run wc.toml")
    res = json.loads((folder / "results.json").read_text())
    assert len(res["heads"]["members"]) == 6 and all(len(t.split()) <= 2 for t in res["heads"]["members"])
    row = ["members", "6", f"{np.mean([len(t.split()) for t in res['heads']['members']]):.2f}"]
    assert res["tables"][0]["rows"][0] == row \
        and res["figures"] == [{"file": "words.png", "caption": "Mean words per set"}]
    table = (folder / "table.md").read_text()
    assert "Words in the first 2 of each text." in table and "| " + " | ".join(row) + " |" in table
    assert "![Mean words per set](words.png)" in table and (folder / "words.png").read_bytes()[:4] == b"\x89PNG"
    report = build_report(folder)
    assert [s.table for s in report.sections if s.table] == [(["set", "texts", "mean words"], res["tables"][0]["rows"])]
    assert [f.name for f in report.figures] == ["words"]
    write_report(folder)
    assert "| " + " | ".join(row) + " |" in (folder / "report.md").read_text()


def test_a_type_config_must_extend_the_base(word_count):
    @dataclass
    class Loose:
        words: int = 3

    with pytest.raises(ValueError, match="subclass of BaseConfig"):
        register_experiment("loose", config=Loose, run=_run_word_count, tables=_word_count_tables)


# --- a miniature run of each experiment type ---

@pytest.fixture(scope="module")
def shared_cache(tmp_path_factory):
    return tmp_path_factory.mktemp("experiment-cache")


@pytest.fixture(autouse=True)
def _reuse_corpus_and_models(shared_cache, monkeypatch):
    """One cache for this module: the corpus, tokenizer and base model are built once."""
    monkeypatch.setenv("LMAUDIT_CACHE", str(shared_cache))


mini = mini_experiment


def test_mini_mia_experiment_writes_table(tmp_path):
    folder = run_experiment(mini(tmp_path, type="mia", budget=3), out_root=tmp_path / "results",
                            command="lmaudit run mini.toml")
    res = json.loads((folder / "results.json").read_text())
    assert set(res["rows"]) == {s.name for s in list_attacks("dlm")}
    q = res["rows"]["q_skew"]
    assert [{k: s[k] for k in ("auc", "tpr@10%fpr", "tpr@1%fpr")} for s in q["per_seed"]] == \
        [{k: q[k][0] for k in ("auc", "tpr@10%fpr", "tpr@1%fpr")}] and q["auc"][1] == 0.0
    lo, hi = q["per_seed"][0]["auc_ci95"]  # the seed's own interval travels with its AUC
    assert lo <= q["per_seed"][0]["auc"] <= hi
    rows = res["tables"][0]["rows"]
    assert [r[0] for r in rows] == sorted(res["rows"], key=lambda n: -res["rows"][n]["auc"][0])  # best AUC first
    table = (folder / "table.md").read_text()
    assert f"| q_skew | {100 * q['auc'][0]:.1f} ± 0.0 |" in table and "lmaudit run mini.toml" in table
    assert "6 members vs 6 non-members; 3 forwards" in table
    assert "nan" not in table and " n/a |" in table and "1% FPR needs ≥ 100" in table  # 6 non-members: no TPR@1%


def test_compare_pairs_every_row_against_one_with_intervals(tmp_path):
    folder = run_experiment(mini(tmp_path, name="cmp", type="mia", budget=3, seeds=[0, 1],
                                 attacks=["q_skew", "loss", "calibration"], compare="q_skew"), out_root=tmp_path)
    res = json.loads((folder / "results.json").read_text())
    assert res["paired"]["compare"] == "q_skew" and set(res["paired"]["vs"]) == {"loss", "calibration"}
    for other, per_seed in res["paired"]["vs"].items():
        assert [p["seed"] for p in per_seed] == [0, 1]
        for i, p in enumerate(per_seed):  # the paired difference is the difference of the rows' own AUCs
            want = res["rows"]["q_skew"]["per_seed"][i]["auc"] - res["rows"][other]["per_seed"][i]["auc"]
            assert p["diff"] == pytest.approx(want, abs=1e-9)
            assert p["ci95"][0] <= p["diff"] <= p["ci95"][1] and p["ci95"][1] > p["ci95"][0]
            assert p["tpr@1%fpr"] is None and p["tpr@5%fpr"] is None  # 6 non-members resolve neither FPR
    lo, hi = res["rows"]["loss"]["per_seed"][0]["auc_ci95"]  # each seed's own interval travels with its AUC
    assert lo <= res["rows"]["loss"]["per_seed"][0]["auc"] <= hi
    p = res["paired"]["vs"]["loss"][1]
    lo, hi = p["ci95"]
    verdict = "q_skew ahead" if lo > 0 else "loss ahead" if hi < 0 else "tied"
    assert (f"| loss | 1 | {100 * p['diff']:+.1f} | [{100 * lo:+.1f}, {100 * hi:+.1f}] | {verdict} |"
            in (folder / "table.md").read_text())


def test_mini_dlm_adaptation_measures_mask_filling_before_and_after(tmp_path):
    folder = run_experiment(mini(tmp_path, name="adapt", type="dlm-adaptation", beside_embedded=False,
                                 ratios=[0.25, 0.75]), out_root=tmp_path)
    res = json.loads((folder / "results.json").read_text())
    (row,) = res["rows"].values()
    assert set(row["before"]) == set(row["after"]) == {"0.25", "0.75"} and row["training"]["tokens"] > 0
    for stage in ("before", "after"):
        assert all(0 <= row[stage][r]["accuracy"] <= 1 and row[stage][r]["nll"] > 0 for r in ("0.25", "0.75"))
    assert row["after"]["0.25"]["nll"] < row["before"]["0.25"]["nll"]  # diffusion training taught it something
    assert f"{100 * row['after']['0.75']['accuracy']:.1f}%" in (folder / "table.md").read_text()


def test_recall_runs_alone_so_the_paired_rows_keep_every_non_member(tmp_path):
    folder = run_experiment(mini(tmp_path, name="peers", type="mia", kind="ar", n_nonmembers=9, passage_chars=150,
                                 attacks=["loss", "gap_k", "recall", "gradnorm"],
                                 params={"recall": {"shots": 2}, "gradnorm": {"parameters": "last:1"}},
                                 compare="gap_k"), out_root=tmp_path)
    res = json.loads((folder / "results.json").read_text())
    assert set(res["rows"]) == {"loss", "gap_k", "recall", "gradnorm"}
    assert set(res["paired"]["vs"]) == {"loss", "gradnorm"}  # recall scored 7 non-members, the others 9


@pytest.mark.parametrize("kw", [dict(type="mia", attacks=["loss"], compare="q_skew"),
                                dict(type="ablation", variants={"full": {"attack": "q_skew"}}, compare="Full"),
                                dict(type="misaligned-ref", attacks=["q_skew"], compare="golden / sama")])
def test_a_compare_that_is_no_row_is_refused_before_training(tmp_path, kw):
    with pytest.raises(LmauditError, match=f"compare = '{kw['compare']}' is not a row of this experiment"):
        run_experiment(mini(tmp_path, **kw), out_root=tmp_path)


def test_mini_epochs_and_mask_ratio_write_plots(tmp_path):
    folder = run_experiment(mini(tmp_path, name="ep", type="epochs", budget=3, attacks=["loss", "q_skew"]),
                            out_root=tmp_path)
    curves = json.loads((folder / "results.json").read_text())["curves"]
    assert set(curves) == {"loss", "q_skew"} and set(curves["loss"]) == {"1", "2"}
    assert f"| loss | {100 * curves['loss']['1']['auc'][0]:.1f} | " in (folder / "table.md").read_text()
    assert (folder / "auc_vs_epochs.png").stat().st_size > 5000
    folder = run_experiment(mini(tmp_path, name="mr", type="mask-ratio", budget=3, mask_ratios=[0.25, 0.75]),
                            out_root=tmp_path)
    res = json.loads((folder / "results.json").read_text())
    assert set(res["ratios"]) == {"0.25", "0.75"} and "gains" not in res  # the gains go to gains.npz
    with np.load(folder / "gains.npz") as z:
        gains = {k: z[k] for k in z.files}
    assert set(gains) == {"ratio_0.25", "ratio_0.75"}
    for r, s in res["ratios"].items():  # the same member tokens for every ratio; the summary is of the stored gains
        assert len(gains[f"ratio_{r}"]) == s["n_tokens"] == res["ratios"]["0.25"]["n_tokens"] > 0
        assert s["median_gain"] == pytest.approx(float(np.median(gains[f"ratio_{r}"])), abs=1e-6)
        assert s["mean_gain_per_exposure"] == pytest.approx(s["mean_gain"] / (float(r) * 2))
    assert (folder / "gain_by_mask_ratio.png").stat().st_size > 5000


def test_mini_extraction_steps_and_pii_experiments(tmp_path):
    folder = run_experiment(mini(tmp_path, name="st", type="extraction-steps",
                                 extract={"mask": "random:0.3", "steps": ["1", "2", "max"], "trajectories": 4}),
                            out_root=tmp_path)
    res = json.loads((folder / "results.json").read_text())
    assert set(res["steps"]) == {"1", "2", "max"} and res["steps"]["1"]["median_delta_log_p"] == [0.0, 0.0]
    assert res["steps"]["1"]["forwards_per_record"] == 1.0 and res["steps"]["2"]["forwards_per_record"] == 2.0
    assert (folder / "log_p_by_steps.png").exists() and "median Δ log p̂" in (folder / "table.md").read_text()
    folder = run_experiment(mini(tmp_path, name="pii", type="pii-extraction", pii_fields=["email"], block=128,
                                 extract={"trajectories": 2}), out_root=tmp_path)
    res = json.loads((folder / "results.json").read_text())
    assert set(res["pii_rows"]) == {"email / AR", "email / DLM one-step", "email / DLM max-step"}
    entry = res["pii_rows"]["email / AR"][0]
    assert {"discoverable@p=0.5", "discoverable@p=0.99", "median_log_p_train", "median_log_p_unseen"} <= set(entry)
    assert entry["discoverable@p=0.99"] <= entry["discoverable@p=0.5"]  # a stricter p never discovers more
    lp = res["likelihood_shift"]["email / AR"]
    assert len(lp["train"]) == 6 and entry["median_log_p_train"] == pytest.approx(float(np.median(lp["train"])))
    # the DLM's p̂ carries its convergence in the number of orders; the AR p̂ is exact and carries none
    assert "convergence" not in entry and 0 <= res["pii_rows"]["email / DLM max-step"][0]["convergence"][
        "not_converged_fraction"] <= 1
    table = (folder / "table.md").read_text()
    last = {line.split(" | ")[0][2:]: line.rsplit(" | ", 1)[1] for line in table.splitlines()
            if line.startswith("| email")}
    assert "p̂ moved > 2× R/2 → R" in table and last["email / AR"] == last["email / DLM one-step"] == "exact |"
    assert last["email / DLM max-step"].endswith("% |")


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
    for v in res["unlearning"].values():  # one seed: the mean is that seed's ρ, NaN (undefined) counted
        (rho,) = v["per_seed"]
        assert v["n_undefined"] == int(math.isnan(rho))
        assert (math.isnan(v["mean"]) and math.isnan(rho)) or (v["mean"] == rho and v["std"] == 0.0)
    assert set(res["cost_s"]) == {"smi", "smi-m", "smi-scores", "smi-m-scores", "features", "lira_shadow_training",
                                  "lira_probes"}
    # per seed, every timing (one a model audited) and the shadows' training seconds from their training records
    (run,) = res["cost_runs"]
    assert run["seed"] == 0 and run["shadows_timed"] is True and len(run["lira_shadow_training"]) == 1
    assert len(run["smi"]) == len(run["features"]) == len(run["lira_probes"]) == 5  # 5 methods, one fraction
    assert run["lira_shadow_training"][0] == pytest.approx(res["cost_s"]["lira_shadow_training"])
    assert run["lira_shadow_training"][0] > 0
    # the thresholded MIAs keep a bootstrap 90% interval of ρ beside the set-level ones' (none where undefined)
    assert {k.split(" / ")[2] for k in res["threshold_intervals"]} == {"threshold-loss", "threshold-reference",
                                                                      "threshold-lira"}
    for key, ((lo, hi),) in res["threshold_intervals"].items():
        assert lo is None or 0 <= lo <= hi <= 1, key
    retrain = ", ".join(f"{a} {res['unlearning'][f'0.25 / retrain / {a}']['mean']:.2f}" for a in
                        ("smi", "smi-m", "smi-scores", "smi-m-scores", "threshold-loss", "threshold-reference",
                         "threshold-lira"))
    assert f"Retrain as measured by each audit: {retrain}." in (folder / "table.md").read_text()
    assert (folder / "rho_by_method.png").exists()
    # the set-level audits keep their 90% intervals (none where ρ is undefined)
    assert {k.split(" / ")[2] for k in res["intervals"]} == {"smi", "smi-m", "smi-scores", "smi-m-scores"}
    for key, ((lo, hi),) in res["intervals"].items():
        rho = res["unlearning"][key]["per_seed"][0]
        assert (lo is None) == math.isnan(rho) and (lo is None or 0 <= lo <= hi <= 1)
    from lmaudit.audit.coverage import coverage

    cov = coverage(res["intervals"])
    known = [(k, lo, hi) for k, ((lo, hi),) in res["intervals"].items()
             if k.split(" / ")[1] in ("none", "retrain") and lo is not None]
    point = [(lo, hi) for _, lo, hi in known if hi - lo < 1e-9 and min(abs(lo), abs(lo - 1)) < 1e-9]
    whole = [(lo, hi) for _, lo, hi in known if lo <= 1e-9 and hi >= 1 - 1e-9 and (lo, hi) not in point]
    want = sum(lo - 1e-9 <= {"none": 0.0, "retrain": 1.0}[k.split(" / ")[1]] <= hi + 1e-9 for k, lo, hi in known
               if (lo, hi) not in point and (lo, hi) not in whole)  # degenerate intervals are counted apart
    assert sum(c["covered"] for c in cov.values()) == want and all(c["n"] <= 2 for c in cov.values())
    assert sum(c["clipped"] for c in cov.values()) == len(point) \
        and sum(c["vacuous"] for c in cov.values()) == len(whole)
    # the table judges coverage on the intervals of the unclipped estimates, stored beside the clipped ones
    assert res["intervals_unclipped"].keys() == res["intervals"].keys() == res["rho_unclipped"].keys()
    for key, ((lo, hi),) in res["intervals_unclipped"].items():
        (rho_u,), rho = res["rho_unclipped"][key], res["unlearning"][key]["per_seed"][0]
        assert (lo is None) == math.isnan(rho) == math.isnan(rho_u) and (lo is None or lo <= hi)
        if "smi-m" in key and lo is not None:  # SMI-M clips its closed form
            assert rho == pytest.approx(min(max(rho_u, 0.0), 1.0))
    cov = coverage(res["intervals_unclipped"])
    assert f"| smi-m | {cov['smi-m']['covered']}/{cov['smi-m']['n']} |" in (folder / "table.md").read_text()
    assert "90% interval (of the unclipped estimate)" in (folder / "table.md").read_text()


def test_mini_pii_reconstruction_experiment(tmp_path):
    bad = mini(tmp_path, name="rc", type="pii-reconstruction", reconstruct={"candidate": 3})
    with pytest.raises(LmauditError, match="unknown key 'reconstruct.candidate'"):  # before any model is built
        get_experiment_type("pii-reconstruction").run(None, bad)
    from lmaudit.experiments.types.pii_reconstruction import _for_field

    assert _for_field({"mask_length": {"email": [4, 6], "phone": 5}, "steps": 3}, "phone") == {"mask_length": 5,
                                                                                               "steps": 3}
    with pytest.raises(LmauditError, match="'reconstruct.steps' has no value for field 'phone'"):
        _for_field({"steps": {"email": 3}}, "phone")
    folder = run_experiment(mini(tmp_path, name="rc", type="pii-reconstruction", pii_fields=["email"], block=128,
                                 n_targets=3, n_calibration=2, repeats=2, n_unseen=2, ar=True,
                                 reconstruct={"candidates": 3, "mask_length": {"email": [4, 6], "phone": 5}, "steps": 3,
                                              "include_truth": True}), out_root=tmp_path)
    res = json.loads((folder / "results.json").read_text())
    assert res["mode"] == "inference" and set(res["asr"]) == set(res["generation_asr"]) == {
        "ce", "skew_pii", "skew_context", "combined", "combined_paper", "AR ce"}
    (coverage,) = res["fields"]["email"]["coverage"]
    for signal, by_field in res["generation_asr"].items():  # a percentage of 3 records, never above the coverage
        (asr,) = by_field["email"]
        assert round(asr * 3 / 100, 6) in (0, 1, 2, 3) and asr <= coverage, signal
    for signal, by_field in res["asr"].items():  # inference mode: the true value is a candidate of every record
        (asr,) = by_field["email"]
        assert round(asr * 3 / 100, 6) in (0, 1, 2, 3), signal
    sweep = res["alpha_sweep"]["email"]
    assert sweep["alpha"] == [0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0] and len(sweep["percent"]) == 1
    assert sweep["percent"][0][0] == res["asr"]["ce"]["email"][0]  # α = 0 ranks as ce alone, α = 1 as skew_pii
    assert sweep["percent"][0][-1] == res["asr"]["skew_pii"]["email"][0]
    assert 1 <= res["fields"]["email"]["mean_candidates"][0] <= 3  # distinct candidates of 3 generations
    assert set(res["unseen_asr"]) == set(res["asr"]) and len(res["fields"]["email"]["unseen_coverage"]) == 1
    assert len(res["fields"]["email"]["ar_coverage"]) == len(res["fields"]["email"]["ar_unseen_coverage"]) == 1
    table = (folder / "table.md").read_text()
    assert "Top-1 attack success rate (%) on 3 redacted" in table and "(inference mode)" in table
    assert "| email | email 95% interval |" in table and "generation mode" in table and "| 0.5 |" in table
    assert "Control: 2 messages per field never trained on" in table and "| AR ce |" in table
    assert "AR: true value among generated candidates (%)" in table
    for key, by_signal in (("asr", res["ranks"]), ("generation_asr", res["generation_ranks"])):
        for signal, by_field in by_signal.items():  # the stored ranks give the stored ASR
            (ranks,) = by_field["email"]
            assert len(ranks) == 3 \
                and 100 * sum(r == 1 for r in ranks) / 3 == pytest.approx(res[key][signal]["email"][0])
    assert "| inference | email | combined − ce |" in table and "| generation | email | ce − AR ce |" in table


def test_a_name_that_leaves_the_output_root_writes_nothing(tmp_path):
    # through the Python interface too: the name is checked before any work, and nothing lands outside OUT
    cfg = load_experiment(REPO / "experiments" / "dlm-dft.toml")
    cfg.name = "../escaped"
    with pytest.raises(LmauditError, match="not a plain folder name"):
        run_experiment(cfg, out_root=tmp_path / "out")
    assert not (tmp_path / "escaped").exists() and not (tmp_path / "out").exists()


def test_mini_pretraining_detection_puts_members_in_the_stream_and_pairs_gap_k_with_min_k_pp(tmp_path):
    folder = run_experiment(mini(tmp_path, name="pt", type="pretraining-detection", kind="ar", n_members=8,
                                 n_nonmembers=8, repeats=[1, 3], ks=[0.1, 0.5], smooth=["none", "sequential"]),
                            out_root=tmp_path / "results", command="lmaudit run pt.toml")
    res = json.loads((folder / "results.json").read_text())
    assert {"seen 1×: gap_k", "seen 3×: gap_k k=0.5", "seen 3×: gap_k smooth=none", "seen 1×: perturbed min_k_pp"} \
        <= set(res["rows"])
    (one,) = res["paired"]["seen 3×"]
    assert one["seed"] == 0 and one["ci95"][0] <= one["diff"] <= one["ci95"][1]
    # 8 non-members resolve no FPR below 1/8: the TPR differences at 1% and 5% are None, not 0
    assert one["tpr@1%fpr"] is None and one["tpr@5%fpr"] is None
    models = sorted((Path(os.environ["LMAUDIT_CACHE"]) / "models").iterdir())
    included = [json.loads((m / "lmaudit_training.json").read_text()).get("included") for m in models]
    assert sorted(i["repeats"] for i in included if i) == [1, 3]  # one model per setting, members inside
    assert all(i["n_texts"] == 8 for i in included if i)
    assert "paired stratified bootstrap" in (folder / "table.md").read_text()


def test_run_writes_into_a_results_root_that_holds_other_experiments(tmp_path):
    root = tmp_path / "results"
    (root / "earlier").mkdir(parents=True)
    (root / "earlier" / "notes.txt").write_text("kept")
    mini(tmp_path, name="ep2", type="mia", budget=3, attacks=["loss"])
    assert_ok(lmaudit("run", str(tmp_path / "mini.toml"), "--out", str(root), "--no-report"))
    assert (root / "ep2" / "results.json").exists() and (root / "earlier" / "notes.txt").read_text() == "kept"
    (root / "ep2" / "mine.txt").write_text("x")  # the experiment's own folder is replaced whole: refused
    assert_user_error(lmaudit("run", str(tmp_path / "mini.toml"), "--out", str(root)),
                      "holds files lmaudit did not write")


def test_mini_dp_audit_bounds_every_dp_row_below_its_epsilon(tmp_path):
    folder = run_experiment(mini(tmp_path, name="dp", type="dp-audit", kinds=["ar"], epsilons=[2.0, 0.0], n_members=12,
                                 n_nonmembers=12, n_canaries=20, attacks=["loss", "min_k"], epochs=1),
                            out_root=tmp_path / "results", command="lmaudit run dp.toml")
    res = json.loads((folder / "results.json").read_text())
    dp_row, plain = res["rows"]
    assert dp_row["target_epsilon"] == 2.0 and 0 < dp_row["epsilon"] <= 2.0 + 1e-6 and plain["epsilon"] is None
    assert dp_row["violations"] == 0 and max(dp_row["mia_lb"], dp_row["canary_lb"]) <= dp_row["epsilon"]
    (seed0,) = [r for r in res["per_seed"] if r["target_epsilon"] == 2.0]
    assert seed0["delta"] == 1 / (12 + seed0["canary_bound"]["n_included"])  # δ = 1/n, n the training texts
    assert (folder / "epsilon_lb_vs_epsilon.png").read_bytes()[:4] == b"\x89PNG"
    assert "ε_lb ≤ ε" in (folder / "table.md").read_text()


def test_mini_set_validity_experiment_scores_both_splits_on_both_models(tmp_path):
    cfg = mini(tmp_path, type="set-validity", kind="ar", n_members=12, n_nonmembers=12, di_splits=3,
               attacks=["loss", "zlib", "reference"])
    folder = run_experiment(cfg, out_root=tmp_path / "results", command="lmaudit run mini.toml")
    res = json.loads((folder / "results.json").read_text())
    assert list(res["cells"]) == ["iid / fine-tuned", "iid / untouched", "shifted / fine-tuned", "shifted / untouched"]
    for label, (cell,) in res["cells"].items():
        assert (cell["prior"] is None) == label.endswith("untouched")  # the untouched base has no reference
        assert cell["best"]["attack"] in (("loss", "zlib") if label.endswith("untouched")
                                          else ("loss", "zlib", "reference"))
        assert set(cell["evidence"]) <= {"loss", "zlib", "reference"} and cell["headline"].startswith("Exposure")
        assert 0 < cell["dataset_inference"]["p"] <= 1 and cell["ngrams_13"]["scored"] <= 12
    rows = res["tables"][0]["rows"]
    assert [r[0] for r in rows] == list(res["cells"]) and rows[1][6] == "-" and len(rows[0]) == 11


def test_the_embedded_pair_pretrained_through_the_interface_is_the_one_the_jobs_use(monkeypatch, tmp_path):
    """dlm-adaptation pretrains the embedded AR model and DLM through ``lmaudit.pretrain`` (the interface), under the
    cache keys the jobs' own ``embedded_models`` uses: the same two folders, never a second pair of trainings."""
    from types import SimpleNamespace

    import lmaudit.api.training as interface
    from lmaudit.experiments.types.dlm_adaptation import embedded_pair
    from lmaudit.models import build
    from lmaudit.models.fingerprint import tokenizer_fingerprint
    from lmaudit.utils import stable_hash

    keys, real = [], build.cached_build

    def recorded(kind, key, make):  # a model: the folder its key names, nothing trained (the tokenizer is built)
        if kind != "models":
            return real(kind, key, make)
        keys.append(key)
        return tmp_path / stable_hash(key)

    monkeypatch.setattr(interface, "cached_build", recorded)
    monkeypatch.setattr(build, "cached_build", recorded)
    monkeypatch.setattr(interface.TrainedModel, "read", lambda folder: SimpleNamespace(path=folder))
    # every setting a key is made of, as given (the real key reads the base's weights, which nothing trained here)
    monkeypatch.setattr(build, "pretrain_key", lambda corpus, tokenizer, **settings: (
        corpus.fingerprint, tokenizer_fingerprint(tokenizer), sorted((k, str(v)) for k, v in settings.items())))
    assert embedded_pair() == build.embedded_models()
    assert len({stable_hash(k) for k in keys}) == 2  # an AR base and the DLM adapted from it
