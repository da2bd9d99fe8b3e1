"""Canary exposure (Carlini et al., 2019): the formula, the rank estimate and its interval, the skew-normal
extrapolation, the canary folder, a tiny model fine-tuned on a canary, and the release gate reading the result."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

import lmaudit
from helpers import assert_ok, assert_user_error
from helpers import lmaudit as cli
from lmaudit.errors import LmauditError, SettingError
from lmaudit.privacy.exposure import by_insertions, canary_exposure, exposure_bits, rank_estimate
from lmaudit.privacy.secrets import SecretFormat, read_exposure_canaries, write_exposure_canaries


def exact_rank(value: float, others: np.ndarray) -> int:
    """The rank of ``value`` among itself and ``others`` (a tie counts against it), by counting."""
    return 1 + int(np.sum(others <= value))


def test_exposure_is_log2_of_the_space_minus_log2_of_the_rank():
    assert exposure_bits(math.log2(1), 1024) == 10.0  # ranked first of R: log2|R|
    assert exposure_bits(math.log2(4), 1024) == 8.0
    assert exposure_bits(math.log2(1024), 1024) == 0.0  # ranked last: nothing exposed
    assert exposure_bits(0.0, 26**64) == pytest.approx(64 * math.log2(26))  # a space far past floats' integers
    # a canary and the 99 other fillings of a tiny R, all scored: first of the 100, then behind 3 of them
    others = np.arange(1.0, 100.0)
    found = rank_estimate([0.5, 3.5], others, pool_size=99)
    assert found["exposure"].tolist() == [pytest.approx(math.log2(100)), pytest.approx(math.log2(100) - 2)]
    assert found["beaten"].tolist() == [0, 3] and found["exact"].all()
    tie = rank_estimate([3.0], [1.0, 3.0, 5.0], pool_size=3)  # a filling as likely as the canary ranks ahead of it
    assert tie["beaten"].tolist() == [2] and tie["exposure"][0] == pytest.approx(math.log2(4) - math.log2(3))


def test_the_sampled_rank_is_the_exact_rank_when_every_filling_of_a_small_space_is_scored():
    fmt = SecretFormat.parse("code {digits:2}")
    assert fmt.size == 100 and fmt.fill("07") == "code 07" and fmt.is_secret("07") and not fmt.is_secret("7a")
    rng = np.random.default_rng(3)
    canaries = fmt.draw(5, rng)
    pool = fmt.draw(95, rng, exclude=canaries)  # every filling that is no canary's: the whole pool, once each
    assert len(set(pool)) == 95 and set(pool) | set(canaries) == {f"{i:02d}" for i in range(100)}
    score = {s: float(v) for s, v in zip(canaries + pool, rng.normal(size=100))}  # any log-perplexities
    values = np.array([score[s] for s in canaries])
    found = rank_estimate(values, [score[s] for s in pool], pool_size=95)
    ranks = [exact_rank(score[c], np.array([score[s] for s in pool])) for c in canaries]
    assert found["exact"].all() and sorted(ranks) != [1] * 5
    assert found["exposure"] == pytest.approx([math.log2(96) - math.log2(r) for r in ranks], abs=1e-12)
    assert np.array_equal(found["lo"], found["exposure"]) and np.array_equal(found["hi"], found["exposure"])
    # one fewer candidate than the pool is a sample: an estimate with an interval around the exact value
    sampled = rank_estimate(values, [score[s] for s in pool[:94]], pool_size=95)
    assert not sampled["exact"].any() and np.all(sampled["hi"] - sampled["lo"] > 0)


def test_the_interval_holds_the_point_and_covers_the_exact_exposure():
    rng = np.random.default_rng(0)
    pool = rng.normal(50, 5, size=20_000)  # a known pool: every exact rank can be counted
    values = np.array([38.0, 44.0, 50.0, 58.0])
    truth = np.array([math.log2(20_001) - math.log2(exact_rank(v, pool)) for v in values])
    covered, inside = np.zeros(len(values)), True
    for trial in range(200):  # fresh samples of 400 candidates, without replacement
        sample = pool[np.random.default_rng(trial).choice(len(pool), 400, replace=False)]
        found = rank_estimate(values, sample, pool_size=len(pool))
        inside &= bool(np.all(found["lo"] <= found["exposure"]) and np.all(found["exposure"] <= found["hi"]))
        covered += (found["lo"] <= truth) & (truth <= found["hi"])
    assert inside
    assert np.all(covered / 200 >= 0.9), covered / 200  # a 95% interval (conservative without replacement)


def test_a_canary_no_candidate_beats_is_extrapolated_by_a_skew_normal_fit_with_a_bootstrap_interval():
    rng = np.random.default_rng(1)
    candidates = rng.normal(50, 5, size=3000)
    pool = 10**6
    found = canary_exposure([25.0, 45.0, -1e4], candidates, pool_size=pool, bootstrap=30, seed=0)
    assert found["estimate"].tolist() == ["extrapolated", "rank", "extrapolated"] and found["beaten"][0] == 0
    # five standard deviations under the mean: a pool fraction Φ(−5) ≈ 2.87e-7, i.e. rank 1 + 10⁶·Φ(−5)
    from scipy.stats import norm

    truth = math.log2(pool + 1) - math.log2(1 + pool * norm.cdf(-5))
    assert found["exposure"][0] == pytest.approx(truth, abs=0.5)
    lo, hi = found["lo"], found["hi"]
    assert np.all(lo <= found["exposure"]) and np.all(found["exposure"] <= hi) and hi[0] - lo[0] > 0.01
    assert found["exposure"][2] == pytest.approx(math.log2(pool + 1))  # never above log2|R|, however far
    assert found["fit"]["resamples"] == 30 and abs(found["fit"]["shape"]) < 2  # normal data: little skew
    again = canary_exposure([25.0, 45.0, -1e4], candidates, pool_size=pool, bootstrap=30, seed=0)
    assert np.array_equal(again["lo"], lo) and np.array_equal(again["hi"], hi)  # seeded


def test_exposures_are_summarised_per_insertion_count():
    groups = by_insertions([1.0, 2.0, 3.0, 9.0, 11.0, 10.0] + list(range(20, 30)), [0, 0, 0, 4, 4, 4] + [16] * 10)
    assert list(groups) == ["0", "4", "16"] and groups["4"]["median"] == 10.0 and groups["0"]["n"] == 3
    assert groups["16"]["median_ci95"] == [21.0, 28.0]  # x_(2), x_(9) of 10: 1 − 2·P(Bin(10, ½) ≤ 1) ≥ 95%
    assert groups["16"]["median_ci_coverage"] == pytest.approx(1 - 22 / 1024)
    assert groups["0"]["median_ci95"] == [1.0, 3.0] and groups["0"]["median_ci_coverage"] == 0.75  # too few


def test_make_writes_each_canary_its_insertion_count_times(tmp_path):
    out = tmp_path / "pins"
    assert_ok(cli("canaries", "make", "--out", out, "--format", "my pin is {digits:6}", "--n", 7,
                  "--insertions", "0,2,5", "--seed", 4))
    info = json.loads((out / "canaries.json").read_text())
    texts = [json.loads(line)["text"] for line in (out / "train.jsonl").read_text().splitlines()]
    assert info["space_size"] == 10**6 and [r["insertions"] for r in info["canaries"]] == [0, 2, 5, 0, 2, 5, 0]
    for row in info["canaries"]:
        assert row["text"] == f"my pin is {row['secret']}" and texts.count(row["text"]) == row["insertions"]
    assert len(texts) == info["train_lines"] == 14 and texts != sorted(texts, key=texts.index)  # shuffled
    back = read_exposure_canaries(out)
    assert back.insertions == [0, 2, 5, 0, 2, 5, 0] and back.pool_size == 10**6 - 7
    again = write_exposure_canaries(tmp_path / "again", "my pin is {digits:6}", n=7, insertions=[0, 2, 5], seed=4)
    assert again["canaries"] == info["canaries"]  # seeded
    info["canaries"][1]["secret"] = "12ab56"  # a secret the format cannot hold
    (out / "canaries.json").write_text(json.dumps(info))
    with pytest.raises(LmauditError, match=r"canary 1 \('canary-1'\): its secret does not fill the format"):
        read_exposure_canaries(out)


@pytest.mark.parametrize("args,needles", [
    (["--format", "my pin is 1234"], ["--format", "has no slot"]),
    (["--format", "pin {digit:4}"], ["--format", "unknown slot '{digit:4}'"]),
    (["--format", "pin {digits:0}"], ["--format", "1 to 64 characters, got 0"]),
    (["--format", "pin {digits:4"], ["--format", "unmatched '{'"]),
    (["--format", "pin {digits:1}", "--n", 6], ["--n", "'pin {digits:1}' has 10"]),
    (["--format", "pin {digits:4}", "--insertions", "0,0"], ["--insertions", "every count is 0"]),
    (["--format", "pin {digits:4}", "--insertions", "1,-3"], ["--insertions must be an integer", "'-3'"]),
])
def test_bad_formats_and_counts_are_refused_naming_the_option(tmp_path, args, needles):
    assert_user_error(cli("canaries", "make", "--out", tmp_path / "c", *args), *needles)
    assert not (tmp_path / "c").exists()


def test_more_candidates_than_the_space_holds_are_refused_before_any_model_loads(tmp_path):
    write_exposure_canaries(tmp_path / "c", "pin {digits:2}", n=4, insertions=[1])
    with pytest.raises(SettingError, match="candidates 97: the format 'pin {digits:2}' has only 96 fillings"):
        lmaudit.canaries("no/such/model", tmp_path / "c", config=lmaudit.ExposureConfig(candidates=97))
    assert_user_error(cli("canaries", "audit", "--model", "no/such/model", "--canaries", tmp_path / "c", "--out",
                          tmp_path / "o", "--candidates", 97), "--candidates 97", "at most 96")
    with pytest.raises(LmauditError, match="canaries.json: missing"):
        lmaudit.canaries("no/such/model", tmp_path)


def test_a_diffusion_model_is_refused(tmp_path, tiny_dlm_dir):
    write_exposure_canaries(tmp_path / "c", "pin {digits:2}", n=2, insertions=[1])
    with pytest.raises(LmauditError, match="left-to-right log-perplexity"):
        lmaudit.canaries(tiny_dlm_dir, tmp_path / "c", config=lmaudit.ExposureConfig(candidates=10))


def test_a_canary_trained_on_is_exposed_more_than_a_control_and_the_gate_reads_it(tmp_path, tiny_model_dir):
    pins = tmp_path / "pins"
    assert_ok(cli("canaries", "make", "--out", pins, "--format", "my pin is {digits:4}", "--n", 2,
                  "--insertions", "0,64"))  # canary-0 a control, canary-1 trained on 64 times
    lmaudit.finetune(tiny_model_dir, pins / "train.jsonl", tmp_path / "ft", epochs=6, lr=3e-2, block=32,
                     batch_size=8)
    out = tmp_path / "exposure"
    assert_ok(cli("canaries", "audit", "--model", tmp_path / "ft", "--canaries", pins, "--out", out,
                  "--candidates", 400, "--bootstrap", 20))
    found = lmaudit.load_results(out)
    assert type(found).__name__ == "ExposureResult" and found.type == "canary-exposure"
    rows = found.to_frame().set_index("id")
    trained, control = rows[rows["insertions"] == 64], rows[rows["insertions"] == 0]
    assert list(trained.index) == ["canary-1"] and list(control.index) == ["canary-0"]
    assert trained["exposure"].min() > control["exposure"].max() + 3, rows
    assert trained["exposure"].min() > 8 and (rows["exposure_lo"] <= rows["exposure"]).all()
    assert (rows["exposure"] <= rows["exposure_hi"]).all() and (rows["exposure_hi"] <= math.log2(10**4 - 1)).all()
    raw = json.loads((out / "results.json").read_text())
    assert set(raw["exposure"]) == set(rows.index) and raw["by_insertions"]["64"]["n"] == 1
    assert "secret" not in (out / "records.csv").read_text() and (out / "report.html").is_file()
    assert len(found["candidate_bits"]) == 400
    # the untrained model exposes neither kind: the same canaries rank as never-inserted fillings do
    base = lmaudit.canaries(tiny_model_dir, pins, config=lmaudit.ExposureConfig(candidates=400, bootstrap=20))
    assert base.to_frame()["exposure"].max() < trained["exposure"].min()
    # the release gate reads the exposure: a threshold under a trained canary's upper bound fails it
    worst = trained["exposure_hi"].max()
    passed = cli("gate", out, "--max-exposure", f"{worst + 0.01:.3f}", "--json", tmp_path / "gate.json")
    assert passed.exit_code == 0, passed.output
    facts = json.loads((tmp_path / "gate.json").read_text())["runs"][0]
    assert facts["target"] == str(tmp_path / "ft") and facts["fingerprint"] == raw["target"]["fingerprint"]
    failed = cli("gate", out, "--max-exposure", f"{control['exposure_hi'].max() + 0.01:.3f}")
    fails = [line for line in failed.output.splitlines() if line.startswith("FAIL")]
    assert failed.exit_code == 1 and len(fails) == 1 and "canary canary-1 exposure" in fails[0], failed.output


def test_a_served_model_gives_the_exposures_its_weights_give(tmp_path, tiny_model, tokenizer, tiny_model_dir):
    from test_served import FakeServer

    write_exposure_canaries(tmp_path / "c", "the key {letters:1}{digits:1}", n=3, insertions=[1])
    cfg = lmaudit.ExposureConfig(candidates=60, bootstrap=5, use_cache=False)
    server = FakeServer(tiny_model, tokenizer, bos=2)
    try:
        remote = lmaudit.canaries(server.url, tmp_path / "c", config=cfg, tokenizer=tiny_model_dir)
    finally:
        server.close()
    local = lmaudit.canaries(tiny_model_dir, tmp_path / "c", config=cfg)
    assert remote["target"]["served"]["url"] == server.url and remote["model"] == server.url
    # a served model gives the first token of a text no log-probability: every filling loses the same "the" (the
    # text before the slots), so the log-perplexities shift by one constant and the ranks stay the model's
    shift = np.array(local.to_frame()["log_perplexity_bits"]) - np.array(remote.to_frame()["log_perplexity_bits"])
    assert shift[0] > 1 and shift == pytest.approx(np.full(3, shift[0]), abs=1e-3)
    assert remote.to_frame()["exposure"].tolist() == pytest.approx(local.to_frame()["exposure"].tolist(), abs=1e-6)
    assert remote["reference"]["median_bits"] == pytest.approx(local["reference"]["median_bits"] - shift[0], abs=1e-3)
