"""``lmaudit extract`` / ``generate`` / ``corpus pii`` end to end on tiny fixture models."""

import json

import pandas as pd

from helpers import assert_ok, assert_user_error, lmaudit

PII_ROWS = [
    {"id": f"r{i}", "text": f"From: Ann Lee <ann{i}@mail.org>\nthe model data train token layer value. "
                            f"Phone {i}55-01{i}",
     "email": f"ann{i}@mail.org", "phone": f"{i}55-01{i}"}
    for i in range(6)
]


def _write(tmp_path):
    path = tmp_path / "pii.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in PII_ROWS))
    return path


def test_extract_dlm_writes_summary_records_and_report(tmp_path, tiny_dlm_dir):
    out = tmp_path / "run"
    res = lmaudit("extract", "--model", str(tiny_dlm_dir), "--data", str(_write(tmp_path)), "--mask", "pii:email",
                  "--steps", "1,2,max", "--trajectories", "8", "--relaxed", "3", "--samples", "6", "--out", str(out))
    assert_ok(res)
    payload = json.loads((out / "results.json").read_text())
    assert payload["type"] == "extraction" and payload["n_records"] == 6
    assert set(payload["summary"]) >= {"1", "2", "max", "monotone_fraction"}
    assert payload["summary"]["1"]["median_delta_log_p"] == 0.0
    assert payload["summary"]["2"]["mean_forwards_per_record"] == 2
    records = pd.read_csv(out / "records.csv")
    assert list(records["id"]) == [r["id"] for r in PII_ROWS]
    assert (records["log_p_hat@max"] <= 0).all() and (records["p_hat@1"] > 0).all()
    assert len(payload["relaxed"]["eps"]) == 4
    assert "Extraction (DLM)" in res.stdout and (out / "report.html").exists()
    html = (out / "report.html").read_text()
    assert "Relaxed extraction" in html and "ann0@mail.org" not in html


def test_extract_ar_uses_left_context_and_rejects_scattered_masks(tmp_path, tiny_model_dir):
    data = _write(tmp_path)
    res = lmaudit("extract", "--model", str(tiny_model_dir), "--data", str(data), "--mask", "pii:phone",
                  "--out", str(tmp_path / "ar"), "--no-report")
    assert_ok(res)
    payload = json.loads((tmp_path / "ar" / "results.json").read_text())
    assert list(k for k, v in payload["summary"].items() if isinstance(v, dict)) == ["ar"]
    bad = lmaudit("extract", "--model", str(tiny_model_dir), "--data", str(data), "--mask", "random:0.5",
                  "--out", str(tmp_path / "bad"))
    assert_user_error(bad, "not one contiguous span", "r0")


def test_extract_bad_mask_is_one_line_error(tmp_path, tiny_dlm_dir):
    res = lmaudit("extract", "--model", str(tiny_dlm_dir), "--data", str(_write(tmp_path)), "--mask", "span:5-2")
    assert_user_error(res, "span 5-2 is empty")


def test_generate_dlm_and_ar(tmp_path, tiny_dlm_dir, tiny_model_dir):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"id": "a", "text": "the model data"}\n')
    for model in (tiny_dlm_dir, tiny_model_dir):
        res = lmaudit("generate", "--model", str(model), "--prompt-file", str(prompts), "--gen-length", "6",
                      "--steps", "3", "--block-length", "2", "--temperature", "0")
        assert_ok(res)
        assert res.stdout.startswith("a the model data")


def test_extract_masks_ids_that_are_email_addresses_unless_show_pii(tmp_path, tiny_model_dir):
    """An id that is an e-mail address is PII like the text it names: records.csv masks it unless --show-pii."""
    rows = [{**r, "id": r["email"]} for r in PII_ROWS]
    data = tmp_path / "by_address.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    base = ["extract", "--model", str(tiny_model_dir), "--data", str(data), "--mask", "pii:phone", "--n", "10"]
    assert_ok(lmaudit(*base, "--out", str(tmp_path / "masked")))
    masked = pd.read_csv(tmp_path / "masked" / "records.csv")["id"].tolist()
    assert len(masked) == 6 and not any("@mail.org" in i for i in masked)
    assert_ok(lmaudit(*base, "--show-pii", "--out", str(tmp_path / "shown")))
    assert pd.read_csv(tmp_path / "shown" / "records.csv")["id"].tolist() == [r["email"] for r in rows]


def test_an_ar_extraction_shows_no_change_against_itself_and_no_trajectories(tmp_path, tiny_model_dir):
    import lmaudit
    from lmaudit.api.reports import summary_rows
    from lmaudit.report.build import build_report

    texts = [f"record number {i} says the value of the key is {i * 7}" for i in range(6)]
    found = lmaudit.extract(tiny_model_dir, texts, config=lmaudit.ExtractConfig(mask="suffix:4", n=100, p=[0.5]))
    header, rows = summary_rows(found.payload)
    assert header[:2] == ["steps", "median log p̂"] and "median Δ log p" not in header and len(rows) == 1
    found.write(tmp_path / "x")
    text = build_report(tmp_path / "x").sections[0].text
    assert "left to right, one order (p̂ is exact: no trajectories are sampled)" in text
    assert "trajectories (random order)" not in text and "relative to the first row" not in text
