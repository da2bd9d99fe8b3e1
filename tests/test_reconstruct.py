"""PII reconstruction: trimming, ranking, α fitting, record validation, and PII kept out of outputs."""

import json

import numpy as np
import pytest

from helpers import assert_ok, lmaudit
from lmaudit.data.loaders import Record, TextSet
from lmaudit.errors import DataError, LmauditError
from lmaudit.extraction.reconstruct import (
    combined,
    dedupe,
    fit_alpha,
    mask_value,
    rank_of,
    redact,
    redacted_records,
    trim,
    zscore,
)


def test_trim_and_dedupe():
    assert trim("amy.j@mail.org> wrote", "email") == "amy.j@mail.org"
    assert trim(" 555-301-2288 if anything", "phone") == "555-301-2288"
    assert trim("<bob> says", "email") == "bob"
    assert trim("   ", "email") is None
    assert dedupe(["a@b.co", None, "c@d.co", "a@b.co", ""]) == ["a@b.co", "c@d.co"]


def test_zscores_and_combination():
    np.testing.assert_allclose(zscore([1.0, 2.0, 3.0]), [-1.2247449, 0.0, 1.2247449], atol=1e-6)
    np.testing.assert_array_equal(zscore([2.0, 2.0]), [0.0, 0.0])
    ce, skew = np.array([-1.0, -2.0, -3.0]), np.array([0.0, 0.0, 5.0])
    np.testing.assert_allclose(combined(ce, skew, 0.0), zscore(ce))
    np.testing.assert_allclose(combined(ce, skew, 1.0), zscore(skew))
    values = ["a", "b", "c"]
    assert rank_of(combined(ce, skew, 0.0), values, "a") == 1
    assert rank_of(combined(ce, skew, 1.0), values, "c") == 1
    assert rank_of(ce, values, "zz") is None and rank_of(ce, values, None) is None


def test_fit_alpha_recovers_the_better_signal():
    rng = np.random.default_rng(0)
    cases = []
    for _ in range(30):
        values = [f"v{i}" for i in range(8)]
        truth = int(rng.integers(8))
        ce = rng.normal(0, 1, 8)  # uninformative
        skew = rng.normal(0, 0.3, 8)
        skew[truth] += 2.0  # informative
        cases.append({"values": values, "truth": values[truth], "ce": ce, "skew": skew})
    alpha, hits = fit_alpha(cases)
    _, ce_only = fit_alpha(cases, grid=[0.0])
    assert alpha > 0.5 and hits >= 27 and ce_only <= 10
    flipped = [{**c, "ce": c["skew"], "skew": c["ce"]} for c in cases]
    alpha, hits = fit_alpha(flipped)
    assert alpha < 0.5 and hits >= 27


def test_records_need_exactly_one_placeholder():
    ok = TextSet([Record("a", "mail [REDACTED] now", fields={"email": "x@y.org"})], source="f.jsonl")
    (rec,) = redacted_records(ok, "email")
    assert (rec.left, rec.right, rec.truth) == ("mail ", " now", "x@y.org")
    for text, n in (("no marker", 0), ("[REDACTED] and [REDACTED]", 2)):
        with pytest.raises(DataError, match=f"record 'b' has {n} '\\[REDACTED\\]' placeholders"):
            redacted_records(TextSet([Record("b", text)], source="f.jsonl"), "email")
    with pytest.raises(LmauditError, match="unknown field 'ssn'"):
        redacted_records(ok, "ssn")
    red = redact(TextSet([Record("c", "write to x@y.org today", fields={"email": "x@y.org"})]), "email")
    assert red.records[0].text == "write to [REDACTED] today" and red.records[0].fields["email"] == "x@y.org"


def test_mask_value_shows_neither_characters_nor_shape():
    assert mask_value("kim_lee@example.com", "email") == "[email, 19 chars]"
    assert mask_value("555-301-2288", "phone") == "[phone, 12 chars]"
    assert mask_value(None, "email") == "-"
    for value in ("kim_lee@example.com", "555-301-2288"):
        masked = mask_value(value, "email")
        assert not any(ch in masked for ch in "@_-.5") and value[0] not in masked


def _records(tmp_path):
    rows = [{"id": f"r{i}", "text": f"From: Ann Lee <[REDACTED]>\nthe model data train token layer. Bye {i}",
             "email": f"annlee{i}@mailbox.org"} for i in range(3)]
    path = tmp_path / "red.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path, [r["email"] for r in rows]


def test_pii_cli_never_shows_values_without_the_flag(tmp_path, tiny_dlm_dir):
    path, truths = _records(tmp_path)
    out = tmp_path / "hidden"
    args = ["pii", "--model", str(tiny_dlm_dir), "--reference", str(tiny_dlm_dir), "--records", str(path),
            "--candidates", "4", "--mask-length", "6", "--alpha", "0.5"]
    res = lmaudit(*args, "--out", str(out))
    assert_ok(res)
    payload = json.loads((out / "results.json").read_text())
    assert set(payload["asr"]) == {"ce", "skew_pii", "skew_context", "combined"} and payload["n_records"] == 3
    written = "".join(p.read_text() for p in out.rglob("*") if p.is_file() and p.suffix in (".json", ".csv", ".md",
                                                                                            ".html", ".jsonl"))
    for truth in truths:
        for blob in (res.stdout, res.stderr, written):
            assert truth not in blob and truth.split("@")[0] not in blob
    assert f"true [email, {len(truths[0])} chars]" in res.stdout  # the masked form is what the terminal shows
    shown = lmaudit(*args, "--out", str(tmp_path / "shown"), "--show-pii", "--no-report")
    assert_ok(shown)
    assert truths[0] in shown.stdout
    assert truths[0] in (tmp_path / "shown" / "candidates.jsonl").read_text()


def test_window_keeps_context_around_long_candidates(tokenizer):
    from lmaudit.extraction.reconstruct import PIIRecord
    from lmaudit.runs.pii import _window

    rec = PIIRecord("r", "the model data train token layer ", " value array matrix function", "x")
    ids, is_field = _window(tokenizer, rec, "tensor", 20)
    assert len(ids) <= 21 and is_field.sum() >= 1 and (~is_field).sum() >= 4
    assert is_field.argmax() > 0 and not is_field[-1]  # context on both sides
    long_value = " ".join(["shape"] * 30)
    ids, is_field = _window(tokenizer, rec, long_value, 20)
    assert (~is_field).sum() == 4 and is_field.sum() == len(tokenizer(long_value, add_special_tokens=False)["input_ids"])
    ids, is_field = _window(tokenizer, PIIRecord("r", "", " value array matrix function", "x"), "tensor", 20)
    assert not is_field[-1] and is_field[0]  # nothing before: all context after
