"""The Q-Skew regime study: the out-of-domain pydoc source, the cell grid, the Δ statistics, and a miniature run."""

import dataclasses
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from scipy import stats as sps

from helpers import assert_ok, assert_user_error, lmaudit, mini_experiment
from lmaudit.data.corpus import is_prose, pydoc_corpus
from lmaudit.data.loaders import TextSet
from lmaudit.errors import LmauditError
from lmaudit.experiments.outputs import rebuild_outputs
from lmaudit.experiments.registry import load_experiment
from lmaudit.experiments.runner import run_experiment
from lmaudit.experiments.types.regimes import ROWS, VERSUS, cell_settings, delta_stats, q_skew_records
from lmaudit.experiments.workspace import Workspace
from lmaudit.metrics import auc
from lmaudit.probes.masked import MaskedSideTask, probe_masked
from lmaudit.probes.masks import MaskPlan
from synthetic_dlm import synthetic_masked

REPO = Path(__file__).resolve().parents[1]


# --- the out-of-domain source ---

def test_pydoc_corpus_is_prose_paragraphs_split_half_and_half():
    c = pydoc_corpus()
    assert c.pool("pretrain") == [] and {d.pool for d in c.documents} == {"member", "nonmember"}
    n_mem, n_non = len(c.pool("member")), len(c.pool("nonmember"))
    assert 300 <= min(n_mem, n_non) and abs(n_mem - n_non) < 0.15 * (n_mem + n_non)
    assert all(len(d.text) >= 120 and d.text == " ".join(d.text.split()) and is_prose(d.text) for d in c.documents)
    assert len({d.text.lower() for d in c.documents}) == len(c.documents)
    assert [(d.id, d.pool) for d in pydoc_corpus().documents] == [(d.id, d.pool) for d in c.documents]  # stable
    assert c.manifest["pools"] == {"member": n_mem, "nonmember": n_non} and c.manifest["source"] == "pydoc"
    mem, non = c.passages("member", 200, max_chars=250), c.passages("nonmember", 200, max_chars=250)
    assert not set(mem) & set(non)  # 200 + 200 distinct passages: the regime study's default size


@pytest.mark.parametrize("text, prose", [
    ("The assert statement is a convenient way to insert debugging assertions into a program.", True),
    ("   Called when an attribute assignment is attempted, instead of the normal mechanism.", True),
    ('assert_stmt ::= "assert" expression ["," expression]', False),
    ("object.__lt__(self, other) object.__le__(self, other) object.__eq__(self, other)", False),
    ("+-----------+-----------+\n| Operation | Result    |\n+-----------+-----------+", False),
])
def test_is_prose(text, prose):
    assert is_prose(text) is prose


def test_corpus_build_source_option():
    result = lmaudit("corpus", "build", "--source", "pydoc")
    assert_ok(result)
    assert json.loads(result.stdout)["content_hash"] == pydoc_corpus().manifest["content_hash"]
    assert_user_error(lmaudit("corpus", "build", "--source", "wiki"), "--source must be one of corpus, pydoc")


def test_workspace_data_from_pydoc(tmp_path):
    cfg = load_experiment(REPO / "experiments" / "dlm-regimes.toml")
    cfg.n_members, cfg.n_nonmembers = 30, 20
    ws = Workspace(cfg, source="pydoc")
    members, nonmembers = ws.data(0)  # the docstring corpus is never built for them
    pools = {d.text: d.pool for d in pydoc_corpus().documents}
    assert (len(members), len(nonmembers)) == (30, 20) and members.source == "pydoc:member"
    assert all(any(t.startswith(r.target) and pools[t] == "member" for t in pools) for r in members.records[:5])
    assert not {r.target for r in members.records} & {r.target for r in nonmembers.records}
    with pytest.raises(LmauditError, match="mode 'dft' only"):
        ws.cell(mode="ift").data(0)
    assert "corpus" not in ws.__dict__
    with pytest.raises(LmauditError, match="packages and vocab_size stay"):
        ws.cell(vocab_size=300)
    with pytest.raises(LmauditError, match="unknown data source 'wiki'"):
        Workspace(cfg, source="wiki")


# --- the grid ---

def test_committed_grid_is_valid_and_each_cell_says_what_it_changes():
    cfg = load_experiment(REPO / "experiments" / "dlm-regimes.toml")
    cells = cell_settings(cfg)
    centre = cells["centre"]
    for label, s in cells.items():
        moved = {k for k in s if s[k] != centre[k]}
        assert label == "centre" or moved == set(cfg.cells[label]), label  # each cell says what it changes


@pytest.mark.parametrize("cells, needle", [
    ({"a": {"lrr": 1e-3}}, r"^cells\.a has no key 'lrr'"),
    ({"a": {"epochs": 2.5}}, r"^cells\.a\.epochs must be an integer ≥ 1, got 2\.5"),
    ({"a": {"epochs": True}}, r"^cells\.a\.epochs must be an integer ≥ 1, got True"),
    ({"a": {"preset": "huge"}}, r"^unknown preset 'huge'"),
    ({"a": {"lr": 0}}, r"^cells\.a\.lr must be a positive number, got 0"),
    ({"a": 3}, r"^cells\.a must be a table"),
])
def test_bad_cells_are_refused_as_the_file_is_read(cells, needle):
    """A cell's settings are declared (``CellSettings``): a bad one is refused when the experiment is read, naming
    the cell and the key."""
    cfg = load_experiment(REPO / "experiments" / "dlm-regimes.toml")
    with pytest.raises(LmauditError, match=needle):
        dataclasses.replace(cfg, cells=cells)


@pytest.mark.parametrize("cells, needle", [
    ({}, "no cells"),
    ({"a": {"source": "pydoc", "mode": "ift"}}, "pydoc source serves mode 'dft' only"),
])
def test_bad_cell_plans(cells, needle):
    """What no single setting says: a plan with no cell, or a cell whose settings do not go together."""
    cfg = dataclasses.replace(load_experiment(REPO / "experiments" / "dlm-regimes.toml"), cells=cells)
    with pytest.raises(LmauditError, match=needle):
        cell_settings(cfg)


def test_an_int_learning_rate_is_a_float():
    cfg = load_experiment(REPO / "experiments" / "dlm-regimes.toml")
    cfg.cells = {"a": {"lr": 1}}
    assert cell_settings(cfg)["a"]["lr"] == 1


def test_delta_stats_are_the_moments_of_q_skew_deltas():
    stats, _ = synthetic_masked(MaskPlan("cyclic", budget=6), 5, 5)
    got = delta_stats(stats)
    delta = stats.logp.astype(np.float64) - stats.ref_logp
    parts = np.split(delta, stats.offsets[1:-1])
    assert got["mean"] == pytest.approx([p.mean() for p in parts])
    assert got["std"] == pytest.approx([p.std() for p in parts])
    assert got["skew"] == pytest.approx([sps.skew(p) for p in parts])
    flat = stats.take([0])
    flat.logp[:] = flat.ref_logp + 0.5  # no spread: skewness 0, as Q-Skew scores it
    assert delta_stats(flat)["skew"].tolist() == [0.0]


# --- a miniature run ---

def mini(tmp_path, **kw):
    return mini_experiment(tmp_path, **{"type": "regimes", "budget": 3, **kw})


def test_mini_regimes_experiment(tmp_path, monkeypatch):
    cfg = mini(tmp_path, cells={"centre": {}, "pydoc, 1 epoch": {"source": "pydoc", "epochs": 1}})
    folder = run_experiment(cfg, out_root=tmp_path / "results", command="lmaudit run mini.toml")
    res = json.loads((folder / "results.json").read_text())
    cells = res["cells"]
    assert list(cells) == ["centre", "pydoc, 1 epoch"] and res["corpus"] is not None  # the cells' corpus, recorded
    assert cells["pydoc, 1 epoch"]["settings"] == {"lr": 1e-3, "epochs": 1, "preset": "tiny", "source": "pydoc",
                                                   "mode": "dft"}
    ws = Workspace(cfg)
    for cell in cells.values():
        assert set(cell) == {"settings", "per_seed", "auc", "paired", "delta"}
        (one,) = cell["per_seed"]
        assert set(one) == {"seed", "auc", "paired", "delta", "time_s"} and one["seed"] == 0
        assert set(one["auc"]) == set(ROWS) == set(cell["auc"]) and set(cell["paired"]) == set(VERSUS)
        for row in ROWS:
            assert cell["auc"][row] == [one["auc"][row]["auc"], 0.0] and 0 <= cell["auc"][row][0] <= 1
        for vs in VERSUS:  # the paired difference is of the two AUCs on the same samples
            diff, lo, hi = cell["paired"][vs]
            assert diff == pytest.approx(one["auc"]["q_skew"]["auc"] - one["auc"][vs]["auc"]) and lo <= diff <= hi
        # the Δ statistics against a direct computation on freshly probed records (no cache): same models, texts, plan
        s = cell["settings"]
        cws = ws.cell(source=s["source"], epochs=s["epochs"])
        members, nonmembers = cws.data(0)
        base = cws.base()
        target = cws.finetuned(base, members, 0)
        computed = []
        with monkeypatch.context() as m:  # the run's Δ statistics read the probe the run cached: no forward
            m.setattr(MaskedSideTask, "__call__", lambda *a, _c=computed, **k: _c.append(1))
            cached = q_skew_records(cws, target, base, members, nonmembers, 0, 3)
        assert computed == [] and cached.n_samples == 12
        tar, ref = cws.load(target), cws.load(base)
        records = probe_masked(tar, TextSet(members.records + nonmembers.records),
                               MaskPlan("cyclic", budget=3), reference=ref, seed=0, batch_size=32)
        assert np.array_equal(records.logp, cached.logp) and np.array_equal(records.position, cached.position)
        delta = np.split(records.logp.astype(np.float64) - records.ref_logp, records.offsets[1:-1])
        for part, rows in (("members", delta[:6]), ("nonmembers", delta[6:])):
            assert cell["delta"][part]["mean"] == pytest.approx(np.mean([d.mean() for d in rows]), abs=1e-6)
            assert cell["delta"][part]["std"] == pytest.approx(np.mean([d.std() for d in rows]), abs=1e-6)
            assert cell["delta"][part]["skew"] == pytest.approx(np.mean([sps.skew(d) for d in rows]), abs=1e-6)
            assert one["delta"][part]["per_text_skew"] == pytest.approx([sps.skew(d) for d in rows], abs=1e-6)
        labels = np.r_[np.ones(6), np.zeros(6)]  # the mean-of-Δ ablation ranks by exactly these per-sample means
        assert one["auc"]["q_skew mean Δ"]["auc"] == pytest.approx(auc(labels, [d.mean() for d in delta]))
        sep = cell["delta"]["separation"]
        for k, per_text in (("mean", np.array([d.mean() for d in delta])),
                            ("skew", np.array([sps.skew(d) for d in delta]))):
            m, o = per_text[:6], per_text[6:]  # Cohen's d across texts, and the raw statistic's AUC
            assert sep[f"d_{k}"] == pytest.approx((m.mean() - o.mean()) / np.sqrt((m.var() + o.var()) / 2), abs=1e-5)
            assert sep[f"auc_{k}"] == pytest.approx(auc(labels, per_text))
    auc_table, delta_table, sep_table = res["tables"]
    assert sep_table["header"] == ["cell", "d (mean Δ)", "d (skew Δ)", "AUC mean Δ", "AUC skew Δ"]
    assert sep_table["rows"][0][1] == f"{cells['centre']['delta']['separation']['d_mean']:.2f}"
    assert [r[0] for r in auc_table["rows"]] == [r[0] for r in delta_table["rows"]] == list(cells)
    assert auc_table["header"][2:8] == list(ROWS)
    centre = cells["centre"]
    d = [100 * v for v in centre["paired"]["calibration"]]
    row = auc_table["rows"][0]
    assert row[1] == "lr 0.001, 2 ep, tiny, corpus, dft" and row[8] == f"{d[0]:+.1f} [{d[1]:+.1f}, {d[2]:+.1f}]"
    assert delta_table["rows"][0][1] == f"{centre['delta']['members']['mean']:.3f}"
    assert [f["file"] for f in res["figures"]] == ["q_skew_vs_calibration.png", "separation.png"]
    assert (folder / "separation.png").read_bytes()[:4] == b"\x89PNG"
    assert (folder / "q_skew_vs_calibration.png").read_bytes()[:4] == b"\x89PNG"
    copy = shutil.copytree(folder, tmp_path / "copy")
    rebuild_outputs(copy)  # the tables and figure rebuild from the stored values
    assert (copy / "table.md").read_text() == (folder / "table.md").read_text()
