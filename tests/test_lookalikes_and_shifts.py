"""Sets that differ without the model, and copies that only look new: dataset inference runs the set checks and
says "cannot tell"; invisible characters and look-alike letters do not make a copy a new text; the blind baselines
find a single planted token; prompt/response pairs against plain texts are flagged."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

from helpers import assert_ok, assert_user_error, lmaudit, make_texts, write_jsonl
from lmaudit.audit.blind import BASELINES, blind_scores, held_out_p
from lmaudit.data.loaders import Record, TextSet
from lmaudit.data.overlap import check_sets, ngram_overlap, normal_form, shared
from lmaudit.metrics import auc
from lmaudit.report.dataset_inference import inference_summary

PROSE = make_texts(40, seed=91, min_words=14, max_words=24)
_RNG = np.random.default_rng(3)
CODE = [f"def step_{i}(x, y={int(_RNG.integers(1, 99))}):\n"
        f"    return [v * {int(_RNG.integers(2, 9))} for v in x if v > y]"
        for i in range(40)]  # another source: code the tiny model never saw either


def zero_width(text: str) -> str:
    """Three zero-width spaces after the first three spaces."""
    return text.replace(" ", " \u200b", 3)


def soft_hyphens(text: str) -> str:
    """Five soft hyphens after the first five "e"s."""
    return text.replace("e", "e\u00ad", 5)


def cyrillic(text: str) -> str:
    """Latin a and o replaced by their Cyrillic look-alikes."""
    return text.replace("a", "\u0430").replace("o", "\u043e")


# --- invisible characters and look-alike letters ---------------------------------------------------------------


@pytest.mark.parametrize("copy", [zero_width, soft_hyphens, cyrillic])
def test_a_copy_with_invisible_characters_or_look_alikes_is_the_same_text(copy):
    members = TextSet.from_texts(PROSE, prefix="m")
    copies = TextSet.from_texts([copy(t) for t in PROSE], prefix="c")
    assert all(c != t for c, t in zip(copies.texts, PROSE))  # every copy differs character for character
    # before: exact 0, normalised 0 (every copy a new text); near-copies 15 (zero-width), 1 (soft hyphens), 0
    assert shared(members, copies) == {"exact": 0, "normalised": 40, "share": 1.0,
                                       "ids": [["m0", "c0"], ["m1", "c1"], ["m2", "c2"]]}
    found = ngram_overlap(members, copies)["13"]
    assert found["near_copies"] == found["scored"] == 40 and found["mean"] == 1.0


def test_normal_form_removes_every_default_ignorable_and_maps_look_alikes_but_keeps_case():
    plain = "copy paste an apple"
    hidden = "".join(chr(c) for c in (0x00AD, 0x034F, 0x061C, 0x115F, 0x17B4, 0x180E, 0x200B, 0x200D, 0x200E, 0x202E,
                                      0x2060, 0x2064, 0x3164, 0xFE0F, 0xFEFF, 0xFFA0, 0xFFF0, 0x1BCA0, 0x1D173,
                                      0xE0001, 0xE0FFF))
    assert normal_form(f"co{hidden}py pa{hidden}ste an ap{hidden}ple") == plain
    # Cyrillic с, о, р, у, а, е; full-width ｐ; mathematical bold 𝐚
    assert normal_form("\u0441\u043e\u0440\u0443 \uff50\U0001d41aste \u0430n \u0430pple") == normal_form(plain)
    assert normal_form("Apple") != normal_form("apple")  # case is kept
    assert normal_form("copy pasta") != normal_form("copy paste")  # another letter is another text
    assert normal_form("e\u0301") == normal_form("\u00e9") and normal_form(" a \t b\n") == "a b"


def test_mia_refuses_members_against_their_own_invisible_copies_and_says_so_when_allowed(tmp_path, tiny_model_dir):
    """Before: exit 0, "Exposure: severe", AUC 1.000 on members against their own zero-width copies."""
    members = write_jsonl(tmp_path / "m.jsonl", PROSE)
    copies = write_jsonl(tmp_path / "c.jsonl", [zero_width(t) for t in PROSE])
    res = lmaudit("mia", "--model", tiny_model_dir, "--members", members, "--nonmembers", copies, "--attacks", "loss",
                  "--bootstrap", 0, "--out", tmp_path / "out", "--no-report")
    assert_user_error(res, "40 text(s) of nonmembers", str(copies), str(members), "with invisible characters removed")
    allowed = lmaudit("mia", "--model", tiny_model_dir, "--members", members, "--nonmembers", copies, "--attacks",
                      "loss", "--bootstrap", 0, "--out", tmp_path / "allowed", "--no-report", "--allow-overlap")
    assert_ok(allowed)
    said = " ".join(allowed.output.split())
    assert "(on sets that share texts)" in said and "Caveat: the sets share texts (40 shared by members and" in said
    got = json.loads((tmp_path / "allowed" / "results.json").read_text())
    assert got["overlap"]["pairs"]["members/nonmembers"]["normalised"] == 40
    assert got["overlap"]["ngrams"]["13"]["near_copies"] == 40


def test_dataset_inference_and_audit_set_refuse_look_alike_copies(tmp_path, tiny_model_dir):
    """Before: dataset inference on look-alike copies said "trained" (p = 1e-14 on the demo's texts)."""
    suspect = write_jsonl(tmp_path / "s.jsonl", PROSE)
    copies = write_jsonl(tmp_path / "c.jsonl", [cyrillic(t) for t in PROSE])
    res = lmaudit("dataset-inference", "--model", tiny_model_dir, "--suspect", suspect, "--validation", copies,
                  "--attacks", "loss", "--splits", 2, "--out", tmp_path / "di", "--no-report")
    assert_user_error(res, "40 text(s) of suspect", str(copies), "look-alike letters mapped)")
    other = write_jsonl(tmp_path / "o.jsonl", make_texts(40, seed=93, min_words=14, max_words=24))
    res = lmaudit("audit-set", "--model", tiny_model_dir, "--members", suspect, "--nonmembers", copies, "--suspect",
                  other, "--bootstrap", 10, "--out", tmp_path / "audit", "--no-report")
    assert_user_error(res, "40 text(s) of nonmembers", str(copies))
    allowed = lmaudit("audit-set", "--model", tiny_model_dir, "--members", suspect, "--nonmembers", copies,
                      "--suspect", other, "--bootstrap", 10, "--out", tmp_path / "allowed", "--no-report",
                      "--allow-overlap")
    assert_ok(allowed)
    assert "Caveat: the sets share texts (40 shared by members and nonmembers" in " ".join(allowed.output.split())


# --- dataset inference on two sources the model never saw --------------------------------------------------------


def test_dataset_inference_on_two_sources_cannot_tell(tmp_path, tiny_model_dir):
    """Prose against code, both unseen by the tiny model: the test fires (p ≈ 1e-9) because the sources differ.
    Before: "trained on the suspect set" with exit 0 and no check (what --no-blind without a reference still
    gives); now the blind baselines and the reference's own scores tell the sets apart and the verdict is
    "cannot tell"."""
    suspect, validation = write_jsonl(tmp_path / "s.jsonl", PROSE), write_jsonl(tmp_path / "v.jsonl", CODE)
    args = ("dataset-inference", "--model", tiny_model_dir, "--suspect", suspect, "--validation", validation,
            "--attacks", "loss,zlib,min_k", "--splits", 10)
    unchecked = lmaudit(*args, "--out", tmp_path / "unchecked", "--no-report", "--no-blind")
    assert_ok(unchecked)
    raw = json.loads((tmp_path / "unchecked" / "results.json").read_text())
    assert raw["test"]["p_combined"] < 1e-6 and raw["verdict"] == "trained"  # the old reading, with no check
    assert raw["set_check"]["skipped"] == "blind = False"

    res = lmaudit(*args, "--out", tmp_path / "di", "--reference", tiny_model_dir)
    assert_ok(res)
    got = json.loads((tmp_path / "di" / "results.json").read_text())
    assert got["test"]["p_combined"] == raw["test"]["p_combined"]  # the same test: only its reading changes
    check = got["set_check"]
    assert got["verdict"] == "cannot tell" and check["differ"] is True and set(check["baselines"]) == set(BASELINES)
    assert check["auc"] > 0.95 and check["p_adjusted"] < 1e-4
    prior = check["reference"]
    assert prior["differ"] is True and set(prior["attacks"]) == {"loss", "zlib", "min_k"} and prior["auc"] > 0.9
    assert {"vs_blind", "vs_prior"} <= set(got["attacks"]["loss"])
    said = " ".join(res.output.split())
    assert said.startswith("Dataset inference: cannot tell: the sets differ without the model (p = ")
    assert "Dataset inference: trained" not in said
    assert "The suspect and validation sets differ without the model: the blind baseline blind_" in said
    assert "The reference model, which never saw either set, already tells them apart" in said
    import pandas as pd

    scores = pd.read_parquet(tmp_path / "di" / "scores.parquet")
    y = (scores["set"] == "suspect").to_numpy().astype(int)
    assert np.isclose(auc(y, scores[check["best"]].to_numpy()), check["auc"])
    assert np.isclose(auc(y, scores["reference:loss"].to_numpy()), prior["attacks"]["loss"]["auc"])
    report = (tmp_path / "di" / "report.md").read_text()
    assert "Do the sets differ without the model?" in report and "cannot tell" in report


def test_dataset_inference_verdict_is_never_confident_on_sets_that_differ():
    def payload(decided: bool, differ: bool, prior: bool = False, formats: bool = False) -> dict:
        check = {"baselines": {"blind_ngrams": {"auc": 0.9, "held_out_p": 1e-6}}, "best": "blind_ngrams",
                 "auc": 0.9, "auc_ci95": None, "p_adjusted": 2e-6, "differ": differ,
                 "formats": {"suspect": "pairs", "validation": "plain", "differ": formats}}
        if prior:
            check["reference"] = {"attacks": {"loss": {"auc": 0.8, "p": 1e-5}}, "best": "loss", "auc": 0.8,
                                  "auc_ci95": [0.7, 0.9], "p_adjusted": 1e-5, "differ": True}
        spread = {"p_median": 1e-5 if decided else 0.3, "p_combined": 2e-5 if decided else 0.6,
                  "p_spread": [1e-6, 1e-4], "p_values": [1e-5]}
        return {"test": spread, "control": {**spread, "p_combined": 0.8}, "splits": 1, "n_suspect": 40,
                "n_validation": 40, "decision": {"0.01": decided, "0.05": decided}, "set_check": check}

    assert inference_summary(payload(True, False)).headline.startswith("Dataset inference: trained on the suspect")
    assert inference_summary(payload(True, False)).level == "severe"
    for case in (payload(True, True), payload(False, True), payload(True, False, prior=True),
                 payload(True, False, formats=True)):
        summary = inference_summary(case)
        assert summary.headline.startswith("Dataset inference: cannot tell: the sets differ without the model")
        assert summary.level is None and "it cannot tell" in " ".join(summary.points)
    said = " ".join(inference_summary(payload(True, False, formats=True)).points)
    assert "The suspect set is prompt/response pairs and the validation set plain texts" in said


# --- a single planted token ---------------------------------------------------------------------------------------


def _docs() -> list[str]:
    from lmaudit.data.corpus import pydoc_corpus

    return [d.text for d in pydoc_corpus().documents]


def test_blind_baselines_find_one_planted_year_and_stay_near_chance_on_sets_drawn_alike():
    """100 + 100 paragraphs of the language reference, drawn alike; members open with "In 2019, ", non-members
    with "In 2024, ". Before: blind_ngrams AUC 0.945, blind_features 0.515 (seed 0; 0.896 and 0.568 on the
    issue's demo texts)."""
    docs = _docs()
    y = np.r_[np.ones(100), np.zeros(100)].astype(int)
    for seed in (0, 1):
        alike = list(np.random.default_rng(seed).choice(docs, 200, replace=False))
        shifted = [f"In 2019, {t}" for t in alike[:100]] + [f"In 2024, {t}" for t in alike[100:]]
        for baseline in BASELINES:
            assert auc(y, blind_scores(shifted, y, baseline, seed=seed)) >= 0.97, (seed, baseline)
            assert held_out_p(shifted, y, baseline, seed=seed) < 1e-6
            assert abs(auc(y, blind_scores(alike, y, baseline, seed=seed)) - 0.5) < 0.15, (seed, baseline)
            assert held_out_p(alike, y, baseline, seed=seed) > 0.05


# --- prompt/response pairs against plain texts --------------------------------------------------------------------


def test_pairs_against_plain_texts_are_flagged(tmp_path, tiny_model_dir):
    pairs = [Record(f"p{i}", t, "Question: " + make_texts(1, seed=i, min_words=4, max_words=6)[0] + " Answer: ")
             for i, t in enumerate(PROSE)]
    plain = TextSet.from_texts(make_texts(40, seed=94, min_words=14, max_words=24), prefix="n", source="plain.jsonl")
    with pytest.warns(UserWarning, match=r"members \(pairs.jsonl\) are prompt/response pairs but nonmembers "
                                         r"\(plain.jsonl\) are plain texts: the format alone tells"):
        found = check_sets({"members": TextSet(pairs, source="pairs.jsonl"), "nonmembers": plain},
                           [("members", "nonmembers")])
    assert found["formats"] == {"members": "pairs", "nonmembers": "plain"} and len(found["notes"]) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # one form: no note, no warning
        assert check_sets({"a": plain, "b": TextSet.from_texts(PROSE)}, [("a", "b")])["notes"] == []

    members = tmp_path / "m.jsonl"
    members.write_text("".join(json.dumps({"prompt": r.context, "response": r.target}) + "\n" for r in pairs))
    nonmembers = write_jsonl(tmp_path / "n.jsonl", plain.texts)
    res = lmaudit("mia", "--model", tiny_model_dir, "--members", members, "--nonmembers", nonmembers, "--attacks",
                  "loss", "--bootstrap", 0, "--out", tmp_path / "mia", "--no-report")
    assert_ok(res)
    said = " ".join(res.output.split())
    assert "(sets of different formats: see the caveat)" in said
    assert f"Caveat: members ({members}) are prompt/response pairs but nonmembers ({nonmembers}) are plain" in said
    got = json.loads((tmp_path / "mia" / "results.json").read_text())
    assert got["overlap"]["formats"] == {"members": "pairs", "nonmembers": "plain"}
    assert got["overlap"]["notes"][0].startswith("members (")
    di = lmaudit("dataset-inference", "--model", tiny_model_dir, "--suspect", members, "--validation", nonmembers,
                 "--attacks", "loss", "--splits", 2, "--out", tmp_path / "di", "--no-report", "--no-blind")
    assert_ok(di)
    got = json.loads((tmp_path / "di" / "results.json").read_text())
    assert got["verdict"] == "cannot tell" and got["set_check"]["formats"]["differ"] is True
    assert "The suspect set is prompt/response pairs and the validation set plain texts" in " ".join(di.output.split())
