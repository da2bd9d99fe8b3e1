"""The same numbers on a fresh clone: the corpus is shipped data, results name what they were built from, CLAIMS.md
marks a row read from another corpus, and a re-run is compared with the committed results by verdict, seed spread
and corpus."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from lmaudit.claims.table import build_claims
from lmaudit.data import corpus as corpus_mod
from lmaudit.data import snapshot
from lmaudit.data.corpus import DEFAULT_PACKAGES, build_corpus
from lmaudit.errors import DataError
from lmaudit.experiments.demo_values import compare_demo
from lmaudit.experiments.reproduce import QUICK, SPREADS, compare_folders, stored_config
from lmaudit.utils import stable_hash

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "results"


def test_the_default_corpus_is_the_shipped_one_whatever_is_installed(monkeypatch):
    monkeypatch.setattr(corpus_mod, "extract_documents", lambda *a, **k: pytest.fail("read the installed packages"))
    corpus = build_corpus()
    assert corpus.fingerprint == snapshot.embedded_hash() == "d89b32e730feb2c5bd58ba60d88047fd"
    assert stable_hash([(d.id, d.pool) for d in corpus.documents]) == corpus.fingerprint  # the content, not a label
    assert len(corpus.documents) == snapshot.embedded_manifest()["n_documents"] == 12627
    assert corpus.manifest["packages"]["transformers"] == "5.24.0" and corpus.manifest["source"] == "embedded"
    assert {p.stem.split("-")[0] for p in (snapshot.EMBEDDED / "LICENSES").glob("*.txt")} == set(DEFAULT_PACKAGES)


def test_a_damaged_shipped_corpus_is_refused_never_read_as_another(tmp_path, monkeypatch):
    shutil.copytree(snapshot.EMBEDDED, tmp_path / "embedded")
    packed = tmp_path / "embedded" / snapshot.DOCUMENTS_FILE
    data = bytearray(packed.read_bytes())
    data[len(data) // 2] ^= 0xFF
    packed.write_bytes(bytes(data))
    monkeypatch.setattr(snapshot, "EMBEDDED", tmp_path / "embedded")
    snapshot.embedded_records.cache_clear()
    snapshot.embedded_manifest.cache_clear()
    try:
        with pytest.raises(DataError, match="differs from the one its manifest names"):
            build_corpus()
    finally:
        snapshot.embedded_records.cache_clear()
        snapshot.embedded_manifest.cache_clear()


def test_installed_packages_that_give_another_corpus_are_said_to(monkeypatch, capsys, tmp_path):
    def other(packages, min_chars):
        return [corpus_mod.Document(id="x" * 16, package="numpy", source="a.py:1:f", text="y" * 400, pool="member")]

    monkeypatch.setattr(corpus_mod, "extract_documents", other)
    monkeypatch.setattr(corpus_mod, "_versions", lambda packages: {p: "0" for p in packages})
    found = build_corpus(installed=True, root=tmp_path)
    assert found.fingerprint != snapshot.embedded_hash()
    assert "differs from the embedded one the committed results were built from" in capsys.readouterr().err


def _copy_results(tmp_path: Path, names) -> Path:
    root = tmp_path / "results"
    for name in names:
        shutil.copytree(RESULTS / name, root / name)
    return root


def test_a_rerun_equal_to_the_committed_results_agrees_and_a_moved_figure_or_corpus_does_not(tmp_path):
    names = ["dlm-dft", "set-validity"]
    rerun = _copy_results(tmp_path, names)
    same = compare_folders(RESULTS, rerun, names)
    assert [c.agrees for c in same] == [True, True]
    dft = same[0]
    assert len(dft.figures) == 24 and all(f.difference == 0 and f.spread is not None for f in dft.figures)
    assert dft.verdicts and dft.same_verdicts and dft.same_corpus
    record = json.loads((rerun / "dlm-dft" / "results.json").read_text())
    table = record["tables"][0]
    row = next(r for r in table["rows"] if r[0] == "q_skew")
    mean, std = (float(x) for x in row[1].split(" ± "))
    row[1] = f"{mean + SPREADS * std + 0.5:.1f} ± {std}"  # moved beyond two seed spreads
    record["corpus"] = "c7c5724c37504e859547ef34ffd13c18"
    (rerun / "dlm-dft" / "results.json").write_text(json.dumps(record))
    moved = compare_folders(RESULTS, rerun, ["dlm-dft"])[0]
    assert not moved.agrees and not moved.same_corpus
    assert [f.where for f in moved.figures if not f.within] == ["q_skew / AUC"]
    assert any("DIFFERS" in line for line in moved.lines())


def test_every_quick_experiment_can_be_rebuilt_from_its_committed_configuration():
    for name in QUICK:
        record = json.loads((RESULTS / name / "results.json").read_text())
        cfg = stored_config(record, RESULTS / name / "results.json")
        assert cfg.name == name and cfg.seeds == record["experiment"]["seeds"]
        assert record["corpus"] == snapshot.embedded_hash()  # the quick subset was built from the shipped corpus


def test_claims_mark_a_row_read_from_another_corpus(tmp_path):
    names = [p.parent.name for p in RESULTS.glob("*/results.json")]
    root = _copy_results(tmp_path, names)
    record = json.loads((root / "dlm-dft" / "results.json").read_text())
    record["corpus"] = "c7c5724c37504e859547ef34ffd13c18"
    (root / "dlm-dft" / "results.json").write_text(json.dumps(record))
    text = build_claims(root)
    assert f"built from the embedded corpus `{snapshot.embedded_hash()[:8]}…`" in text
    row = next(line for line in text.splitlines() if line.startswith("| Q-Skew beats every baseline in AUC, domain"))
    assert "[dlm-dft](dlm-dft/table.md) (corpus `c7c5724c…`)" in row and "from another corpus than the header's" in row
    assert "from another corpus than the header's" not in build_claims(_copy_results(tmp_path / "clean", ["dlm-dft"]))


def test_the_committed_demo_values_name_the_shipped_corpus_and_a_fresh_copy_agrees(tmp_path):
    stored = json.loads((RESULTS / "demo-quick.json").read_text())
    assert stored["built_from"]["corpus"] == snapshot.embedded_hash() and stored["seeds"] == [0, 1, 2]
    assert set(stored["values"]) == set(stored["spread"]) and len(stored["values"]) >= 30
    # a demo folder holding exactly the committed values agrees; one AUC moved beyond the spread does not
    folder = tmp_path / "demo"
    for part, sub in (("ar", ""), ("dlm", "dlm/")):
        attacks = {}
        for key, value in stored["values"].items():
            p, attack, metric = key.split("/")
            if p == part:
                attacks.setdefault(attack, {})[metric] = value
        (folder / sub).mkdir(parents=True, exist_ok=True)
        (folder / sub / "results.json").write_text(json.dumps({"attacks": attacks,
                                                                "built_from": stored["built_from"]}))
    assert compare_demo(folder, RESULTS / "demo-quick.json").agrees
    record = json.loads((folder / "results.json").read_text())
    record["attacks"]["loss"]["auc"] += 2 * SPREADS * max(stored["spread"]["ar/loss/auc"], 0.01)
    (folder / "results.json").write_text(json.dumps(record))
    assert [f.where for f in compare_demo(folder, RESULTS / "demo-quick.json").figures if not f.within] == \
        ["ar/loss/auc"]


@pytest.mark.slow  # the quick demo itself (about 2 minutes on 2 cores, its tiny models cached after)
def test_a_fresh_quick_demo_agrees_with_the_committed_values(tmp_path):
    from lmaudit.experiments.demo import QUICK as QUICK_DEMO
    from lmaudit.experiments.demo import run_demo

    run_demo(tmp_path / "demo", QUICK_DEMO)
    found = compare_demo(tmp_path / "demo", RESULTS / "demo-quick.json")
    assert found.same_corpus and found.agrees, "\n".join(found.lines())
