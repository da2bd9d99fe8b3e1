"""PII reconstruction: trimming, ranking, α fitting, record validation, and PII kept out of outputs."""

import json

import numpy as np
import pytest

from helpers import assert_ok, lmaudit
from lmaudit.data.loaders import Record, TextSet
from lmaudit.errors import DataError, LmauditError
from lmaudit.extraction.reconstruct import (
    alpha_sweep,
    combined,
    dedupe,
    fit_alpha,
    mask_value,
    paired_rate_diff,
    rank_of,
    redact,
    redacted_records,
    trim,
    wilson_interval,
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


def test_wilson_interval_matches_a_hand_computed_value_and_scipy():
    # 3 of 10 at 95%: p̂ = 0.3, z² = 1.959964² = 3.841459; centre = (0.3 + z²/20) / (1 + z²/10) = 0.492073 / 1.384146
    # = 0.355507; half-width = (z / 1.384146)·sqrt(0.3·0.7/10 + z²/400) = 1.416010·0.174939 = 0.247716
    lo, hi = wilson_interval(3, 10)
    assert lo == pytest.approx(0.355507 - 0.247716, abs=1e-5) and hi == pytest.approx(0.355507 + 0.247716, abs=1e-5)
    assert (round(lo, 4), round(hi, 4)) == (0.1078, 0.6032)
    assert wilson_interval(0, 50) == (0.0, pytest.approx(0.0713476, abs=1e-6))  # never empty at 0 successes
    assert wilson_interval(50, 50) == (pytest.approx(1 - 0.0713476, abs=1e-6), 1.0)
    from scipy.stats import binomtest

    for k, n in ((17, 50), (1, 3), (120, 150)):
        ci = binomtest(k, n).proportion_ci(0.95, method="wilson")
        assert wilson_interval(k, n) == (pytest.approx(ci.low, abs=1e-12), pytest.approx(ci.high, abs=1e-12))
    assert wilson_interval(0, 0) == (0.0, 1.0)
    with pytest.raises(LmauditError, match="0 ≤ count ≤ n"):
        wilson_interval(4, 3)


def test_alpha_sweep_ends_are_the_ce_and_skew_rankings():
    rng = np.random.default_rng(1)
    cases = []
    for i in range(40):
        values = [f"v{j}" for j in range(int(rng.integers(1, 7)))]
        ce, skew = rng.normal(0, 1, len(values)), rng.normal(0, 1, len(values))
        truth = values[int(rng.integers(len(values)))] if i % 4 else "absent"  # a quarter never generated
        cases.append({"values": values, "truth": truth, "ce": ce, "skew": skew})
    n = len(cases) + 5  # five more records without candidates: misses
    sweep = alpha_sweep(cases, n)
    assert sweep["alpha"] == [0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0] and len(sweep["ci95"]) == 11
    ce_hits = sum(rank_of(c["ce"], c["values"], c["truth"]) == 1 for c in cases)
    skew_hits = sum(rank_of(c["skew"], c["values"], c["truth"]) == 1 for c in cases)
    assert ce_hits > 0 and skew_hits > 0 and ce_hits != skew_hits
    assert (sweep["count"][0], sweep["count"][-1]) == (ce_hits, skew_hits)
    assert sweep["percent"][0] == pytest.approx(100 * ce_hits / n) and sweep["percent"][-1] == pytest.approx(
        100 * skew_hits / n)
    lo, hi = wilson_interval(ce_hits, n)
    assert sweep["ci95"][0] == pytest.approx([100 * lo, 100 * hi])


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
            "--candidates", "4", "--mask-length", "6", "--alpha", "0.5", "--include-truth"]  # truths are candidates
    res = lmaudit(*args, "--out", str(out))
    assert_ok(res)
    payload = json.loads((out / "results.json").read_text())
    assert set(payload["asr"]) == {"ce", "skew_pii", "skew_context", "combined", "combined_paper"} \
        and payload["n_records"] == 3
    assert payload["mode"] == "inference" and set(payload["generation"]["asr"]) == set(payload["asr"])
    assert "inference mode" in res.stdout and "Wilson" in res.stdout and "combined ASR by α" in res.stdout
    assert len(payload["alpha_sweep"]["percent"]) == 11
    written = "".join(p.read_text() for p in out.rglob("*") if p.is_file() and p.suffix in (".json", ".csv", ".md",
                                                                                            ".html", ".jsonl"))
    for truth in truths:
        for blob in (res.stdout, res.stderr, written):
            assert truth not in blob and truth.split("@")[0] not in blob
    assert f"true [email, {len(truths[0])} chars]" in res.stdout  # the masked form is what the terminal shows
    shown = lmaudit(*args, "--out", str(tmp_path / "shown"), "--show-pii", "--no-report")
    assert_ok(shown)
    assert truths[0] in shown.stdout
    lines = [json.loads(line) for line in (tmp_path / "shown" / "candidates.jsonl").read_text().splitlines()]
    assert [c["candidates"].count(c["truth"]) for c in lines] == [1, 1, 1] and [c["truth"] for c in lines] == truths


def test_window_keeps_context_around_long_candidates(tokenizer):
    from lmaudit.extraction.reconstruct import PIIRecord
    from lmaudit.runs.pii_candidates import _window

    rec = PIIRecord("r", "the model data train token layer ", " value array matrix function", "x")
    ids, is_field = _window(tokenizer, rec, "tensor", 20)
    assert len(ids) <= 21 and is_field.sum() >= 1 and (~is_field).sum() >= 4
    assert is_field.argmax() > 0 and not is_field[-1]  # context on both sides
    long_value = " ".join(["shape"] * 30)
    ids, is_field = _window(tokenizer, rec, long_value, 20)
    assert (~is_field).sum() == 4 \
        and is_field.sum() == len(tokenizer(long_value, add_special_tokens=False)["input_ids"])
    ids, is_field = _window(tokenizer, PIIRecord("r", "", " value array matrix function", "x"), "tensor", 20)
    assert not is_field[-1] and is_field[0]  # nothing before: all context after


def test_include_truth_adds_the_true_value_once_and_ranks_over_it(tmp_path, tiny_dlm_dir):
    from lmaudit.data.loaders import load_texts
    from lmaudit.models.loading import load_model
    from lmaudit.runs.pii import ReconstructConfig, run_reconstruction

    path, truths = _records(tmp_path)
    recs = redacted_records(load_texts(path), "email")
    model = load_model(tiny_dlm_dir)
    kw = dict(candidates=4, mask_length=6, alpha=0.5, seed=0)
    gen = run_reconstruction(model, recs, ReconstructConfig(**kw), reference=model)
    inf = run_reconstruction(model, recs, ReconstructConfig(**kw, include_truth=True), reference=model)
    assert (gen["mode"], inf["mode"]) == ("generation", "inference") and "generation" not in gen
    assert inf["coverage"] == gen["coverage"]  # coverage is of the generated candidates in both modes
    for truth, g, c in zip(truths, gen["_cases"], inf["_cases"]):
        assert c["values"].count(truth) == 1  # exactly once, whether or not it was generated
        assert c["values"][: c["n_generated"]] == g["values"]  # the same generations, then the truth
        assert len(c["values"]) == c["n_generated"] + (truth not in g["values"])
        t = c["values"].index(truth)
        for s in ("ce", "skew_pii", "skew_context"):
            assert len(c[s]) == len(c["values"])
            # scores are per candidate: the same up to the float noise of another batch layout (the truth adds one
            # candidate to the batch; benchmarks/bench_batch_layout.py measures up to ~1e-6 nats per token)
            np.testing.assert_allclose(c[s][: c["n_generated"]], g[s], rtol=0, atol=1e-6)
    for s in ("ce", "skew_pii", "skew_context", "combined", "combined_paper"):
        for i, c in enumerate(inf["_cases"]):  # by hand: 1 + candidates scoring higher (+ ties listed before it)
            weight = {"combined": 0.5, "combined_paper": 0.1}  # this run's α, and the paper's fixed one
            score = combined(c["ce"], c["skew"], weight[s]) if s in weight else c[s]
            t = c["values"].index(c["truth"])
            expect = 1 + int(np.sum(score > score[t])) + int(np.sum(score[:t] == score[t]))
            assert inf["records"][f"rank_{s}"][i] == expect, s
        hits = sum(r == 1 for r in inf["records"][f"rank_{s}"])
        assert inf["asr"][s]["count"] == hits and inf["asr"][s]["ci95"] == pytest.approx(
            [100 * x for x in wilson_interval(hits, 3)])
        assert inf["generation"]["asr"][s] == gen["asr"][s]  # generation mode from the same scores
    sweep = inf["alpha_sweep"]
    assert sweep["count"][0] == inf["asr"]["ce"]["count"] and sweep["count"][-1] == inf["asr"]["skew_pii"]["count"]
    assert sweep["count"][5] == inf["asr"]["combined"]["count"]  # α = 0.5, the α of this run


def test_a_list_of_mask_lengths_spreads_the_candidates(monkeypatch, tiny_dlm_dir):
    import lmaudit.models.adapters as adapters
    import lmaudit.runs.pii_candidates as pii
    from lmaudit.extraction.reconstruct import PIIRecord
    from lmaudit.models.loading import load_model

    calls = []
    real = adapters.denoise  # the DLM adapter's fill unmasks with it

    def spy(adapter, x, attn, *, steps, **kw):
        calls.append((x.shape[0], int((x == adapter.mask_token_id).sum(axis=1)[0]), steps))
        return real(adapter, x, attn, steps=steps, **kw)

    monkeypatch.setattr(adapters, "denoise", spy)
    model = load_model(tiny_dlm_dir)
    rec = PIIRecord("r", "From: Ann Lee <", ">\nthe model data", "annlee@mailbox.org")
    pii.generate_candidates(model, rec, "email", n=5, mask_length=[3, 6], steps=4)
    assert calls == [(3, 3, 3), (2, 6, 4)]  # 5 generations: 3 of length 3 (steps capped at 3), 2 of length 6
    assert pii.mask_lengths(7) == [7] and pii.mask_lengths([2, 9]) == [2, 9]
    for bad in ([], [0, 4], "12", True):
        with pytest.raises(LmauditError, match="^mask_length must be an integer") as exc:
            pii.mask_lengths(bad)
        assert exc.value.on_command_line().startswith("--mask-length must be an integer")


def test_paired_rate_difference_is_exact_where_it_must_be():
    a = [1, 0, 1, 1, 0, 0, 1, 0]
    assert paired_rate_diff(a, a) == (0.0, 0.0, 0.0)  # identical hits: no difference on any resample
    d, lo, hi = paired_rate_diff([1] * 40, [0] * 40)  # a wins on every record
    assert (d, lo, hi) == (1.0, 1.0, 1.0)
    b = [0] * 10 + [1, 0] * 25  # a disagrees with b on 10 of 60 records, all in a's favour
    a2 = [1] * 10 + b[10:]
    d, lo, hi = paired_rate_diff(a2, b)
    assert d == pytest.approx(10 / 60) and 0 < lo < d < hi
    with pytest.raises(LmauditError, match="equal-length"):
        paired_rate_diff([1, 0], [1])


def test_a_model_without_skew_ranks_by_ce_alone_with_alpha_auto():
    # an AR model has no Q-Skew signal: α = "auto" is never fitted and neither combination is made
    from lmaudit.runs.pii import evaluate

    case = {"values": ["a", "b"], "truth": "b", "ce": np.array([1.0, 2.0]), "n_generated": 2}  # higher ranks first
    out = evaluate([case], [], "auto")
    assert set(out["asr"]) == {"ce"} and out["ranks"]["ce"] == [1] and out["alpha"] is None
