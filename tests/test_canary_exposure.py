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
from lmaudit.privacy.exposure import (
    by_insertions,
    canary_exposure,
    chance_exposure,
    chance_p,
    exposure_bits,
    mann_whitney_cdf,
    rank_estimate,
    shift_interval,
    versus_controls,
)
from lmaudit.privacy.secrets import SecretFormat, read_exposure_canaries, write_exposure_canaries

CONTROLS_MEDIAN = 2.12  # the median exposure of the 5 controls on the untrained tiny model (measured)


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
    fmt = SecretFormat.parse("code {digits:3}")
    assert fmt.size == 1000 and fmt.fill("007") == "code 007" and fmt.is_secret("007") and not fmt.is_secret("7a0")
    rng = np.random.default_rng(3)
    canaries = fmt.draw(5, rng)
    pool = fmt.draw(995, rng, exclude=canaries)  # every filling that is no canary's: the whole pool, once each
    assert len(set(pool)) == 995 and set(pool) | set(canaries) == {f"{i:03d}" for i in range(1000)}
    score = {s: float(v) for s, v in zip(canaries + pool, rng.normal(size=1000))}  # any log-perplexities
    values = np.array([score[s] for s in canaries])
    found = rank_estimate(values, [score[s] for s in pool], pool_size=995)
    ranks = [exact_rank(score[c], np.array([score[s] for s in pool])) for c in canaries]
    assert found["exact"].all() and sorted(ranks) != [1] * 5
    assert found["exposure"] == pytest.approx([math.log2(996) - math.log2(r) for r in ranks], abs=1e-12)
    assert np.array_equal(found["lo"], found["exposure"]) and np.array_equal(found["hi"], found["exposure"])
    # one fewer candidate than the pool is a sample: an estimate with an interval around the exact value
    sampled = rank_estimate(values, [score[s] for s in pool[:994]], pool_size=995)
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
    (["--format", "pin {digits:3}", "--n", 700], ["--n", "700 canaries of 'pin {digits:3}' leave 300",
                                                  "they need 700"]),
    (["--format", "pin {digits:4}", "--insertions", "0,0"], ["--insertions", "every count is 0"]),
    (["--format", "pin {digits:4}", "--insertions", "1,-3"], ["--insertions must be an integer", "'-3'"]),
])
def test_bad_formats_and_counts_are_refused_naming_the_option(tmp_path, args, needles):
    assert_user_error(cli("canaries", "make", "--out", tmp_path / "c", *args), *needles)
    assert not (tmp_path / "c").exists()


def test_more_candidates_than_the_space_holds_are_refused_before_any_model_loads(tmp_path):
    write_exposure_canaries(tmp_path / "c", "pin {digits:3}", n=4, insertions=[1])
    with pytest.raises(SettingError, match="candidates 997: the format 'pin {digits:3}' has only 996 fillings"):
        lmaudit.canaries("no/such/model", tmp_path / "c", config=lmaudit.ExposureConfig(candidates=997))
    assert_user_error(cli("canaries", "audit", "--model", "no/such/model", "--canaries", tmp_path / "c", "--out",
                          tmp_path / "o", "--candidates", 997), "--candidates 997", "at most 996")
    with pytest.raises(LmauditError, match="canaries.json: missing"):
        lmaudit.canaries("no/such/model", tmp_path)


def test_a_diffusion_model_is_refused(tmp_path, tiny_dlm_dir):
    write_exposure_canaries(tmp_path / "c", "pin {digits:3}", n=2, insertions=[1])
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

    write_exposure_canaries(tmp_path / "c", "the key {letters:1}{digits:2}", n=3, insertions=[1])
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


# --- formats that leave nothing to measure --------------------------------------------------------------------------

@pytest.mark.parametrize("template,needles", [
    ("my favourite letter is {letters:1}", ["has 26 fillings", "log2|R| = 4.70 bits", "the 4.32 bits (log2 20)",
                                            "at least 400 fillings (8.64 bits)"]),
    ("pin {digits:2}", ["'pin {digits:2}' has 100 fillings", "log2|R| = 6.64 bits"]),
    ("my word is {letters:3}", ["fills a run of only 3 random letter(s)", "not random secrets"]),
    ("the code is x{letters:4}.", ["'the code is x{letters:4}.' fills a run of only 4 random letter(s)"]),
    ("say {letters:2} {letters:3}", ["run of only 2 random letter(s)"]),
])
def test_a_format_too_small_or_filled_with_words_is_refused_naming_it(tmp_path, template, needles):
    with pytest.raises(SettingError) as caught:
        SecretFormat.parse(template)
    assert "\n" not in str(caught.value)
    assert_user_error(cli("canaries", "make", "--out", tmp_path / "c", "--format", template, "--n", 2), "--format",
                      *needles)
    assert not (tmp_path / "c").exists()


def test_formats_with_room_to_measure_and_random_fillings_are_accepted(tmp_path):
    sizes = {t: SecretFormat.parse(t).size for t in ("pin {digits:3}", "name {letters:5}", "key {letters:2}{digits:4}",
                                                     "id {letters:2}{letters:3}", "x{letters:1}{digits:3}")}
    assert sizes == {"pin {digits:3}": 1000, "name {letters:5}": 26**5, "key {letters:2}{digits:4}": 676 * 10**4,
                     "id {letters:2}{letters:3}": 26**5, "x{letters:1}{digits:3}": 26_000}
    # a folder written before the check, with a format now refused, is refused when read
    write_exposure_canaries(tmp_path / "c", "pin {digits:3}", n=2, insertions=[0, 1])
    info = json.loads((tmp_path / "c" / "canaries.json").read_text())
    info["format"] = "pin {digits:1}{digits:1}"
    (tmp_path / "c" / "canaries.json").write_text(json.dumps(info))
    with pytest.raises(LmauditError, match=r"json: template: 'pin \{digits:1\}\{digits:1\}' has 100 fillings"):
        read_exposure_canaries(tmp_path / "c")


# --- chance, and the canaries against the controls ------------------------------------------------------------------

def test_chance_is_the_exposure_of_a_uniform_rank():
    assert chance_exposure(4) == {"mean": pytest.approx(2 - math.log2(24) / 4),
                                  "median": pytest.approx(2 - math.log2(2.5))}
    assert chance_exposure(10**6 + 1)["mean"] == pytest.approx(1 / math.log(2), abs=2e-5)
    assert chance_exposure(26**64)["median"] == 1.0 and chance_exposure(26**64)["mean"] == pytest.approx(1.4427, 1e-4)
    brute = np.mean([math.log2(1000) - math.log2(r) for r in range(1, 1001)])
    assert chance_exposure(1000)["mean"] == pytest.approx(brute, abs=1e-12)
    assert chance_p([0.0, 1.0, 3.059]).tolist() == pytest.approx([1.0, 0.5, 0.12], abs=1e-3)


def test_the_mann_whitney_null_distribution_is_exact():
    import itertools

    for m, n in ((1, 1), (2, 3), (3, 4), (4, 2)):  # U = #{(i, j): aᵢ > bⱼ} over every arrangement, counted
        us = np.array([sum(sum(1 for q in range(p) if q not in pos) for p in pos)
                       for pos in itertools.combinations(range(m + n), m)])
        assert mann_whitney_cdf(m, n) == pytest.approx([np.mean(us <= u) for u in range(m * n + 1)], abs=1e-12)
    assert mann_whitney_cdf(3, 3)[0] == pytest.approx(1 / 20) and mann_whitney_cdf(40, 30)[-1] == 1.0


def test_the_shift_over_the_controls_has_a_distribution_free_interval():
    found = shift_interval([5.0, 6.0, 7.0, 8.0, 9.0], [0.0, 1.0, 2.0, 3.0, 4.0])
    # 25 differences 1..9, median 5; c = 3 (P(U ≤ 2) = 4/252 ≤ 2.5% < P(U ≤ 3) = 7/252): [d_(3), d_(23)] = [2, 8]
    assert found == {"shift": 5.0, "ci": [2.0, 8.0], "coverage": pytest.approx(1 - 8 / 252), "n": 5,
                     "n_baseline": 5}
    tiny = shift_interval([3.0, 4.0], [1.0, 2.0])  # too few for 95%: every difference, and the coverage it has
    assert tiny["ci"] == [1.0, 3.0] and tiny["coverage"] == pytest.approx(2 / 3)
    rng = np.random.default_rng(0)  # the same distribution on both sides: the interval holds 0 at least 95% of the time
    held = [shift_interval(rng.exponential(size=12), rng.exponential(size=7), seed=t)["ci"] for t in range(1000)]
    assert 0.94 <= np.mean([lo <= 0 <= hi for lo, hi in held]) <= 0.99


def test_never_trained_canaries_rank_as_chance_with_sampled_candidates():
    # 30 audits of a pool of a million fillings, each scoring 200 of them as candidates and 100 canaries drawn like
    # them (canaries the model never saw): their exposures are chance's, median 1 bit, mean 1/ln 2, and 2^-3.06 = 12%
    # of them at 3.06 bits or more, the reading of one such canary beaten by 24 of 200 candidates
    e = np.concatenate([canary_exposure((rng := np.random.default_rng(t)).normal(size=100), rng.normal(size=200),
                                        pool_size=10**6, bootstrap=5)["exposure"] for t in range(30)])
    assert float(np.median(e)) == pytest.approx(1.0, abs=0.08) and float(e.mean()) == pytest.approx(1.4427, abs=0.1)
    assert float(np.mean(e >= 3.059)) == pytest.approx(0.12, abs=0.02)
    # within one audit the canaries share one sample of candidates, whose own error moves the median of 1000 controls
    # to 1.18 bits, its interval [1.04, 1.29] missing chance's 1 bit: the test against the candidates allows for it
    rng = np.random.default_rng(10)
    values, candidates, groups = rng.normal(size=3000), rng.normal(size=200), np.resize([0, 1, 4], 3000)
    e = canary_exposure(values, candidates, pool_size=10**6, bootstrap=5)["exposure"]
    versus = versus_controls(e, groups, space_size=10**6 + 1, values=values, candidates=candidates)
    assert versus["controls"]["median"] == pytest.approx(1.184, abs=1e-3)
    assert versus["controls"]["median_ci95"] == pytest.approx([1.044, 1.286], abs=1e-3)
    assert versus["controls"]["like_chance"] and versus["controls"]["candidates_p"] == pytest.approx(0.25, abs=0.01)
    assert {g["verdict"] for g in versus["groups"].values()} == {"tied"}
    # canaries shifted 2 bits up sit above the controls; controls ranked ahead of the candidates are not chance
    moved = versus_controls(np.where(groups == 4, e + 2.0, e), groups, space_size=10**6 + 1)["groups"]
    assert moved["4"]["verdict"] == "above" and moved["4"]["shift"] == pytest.approx(2.0, abs=0.2)
    assert moved["1"]["verdict"] == "tied"
    leaked = versus_controls(e, groups, space_size=10**6 + 1, values=values - 1.0 * (groups == 0),
                             candidates=candidates)["controls"]
    assert not leaked["like_chance"] and leaked["candidates_p"] < 1e-6


def test_untrained_canaries_on_a_model_that_never_saw_one_give_chance(tmp_path, tiny_model_dir):
    pins = tmp_path / "pins"
    write_exposure_canaries(pins, "my pin is {digits:6}", n=15, insertions=[0, 1, 4], seed=0)  # never trained on
    out = tmp_path / "exposure"
    run = cli("canaries", "audit", "--model", tiny_model_dir, "--canaries", pins, "--out", out, "--candidates", 400,
              "--bootstrap", 10)
    assert_ok(run)
    found = lmaudit.load_results(out)
    versus = found["versus_controls"]
    chance, controls = versus["chance"], versus["controls"]
    assert chance == {"mean": pytest.approx(1.4427, abs=1e-4), "median": pytest.approx(1.0, abs=1e-5)}
    assert controls["n"] == 5 and controls["like_chance"] and controls["candidates_p"] > 0.05
    lo, hi = controls["median_ci95"]
    assert lo <= chance["median"] <= hi and controls["median_ci_coverage"] == pytest.approx(1 - 2 / 32)
    assert controls["median"] == pytest.approx(CONTROLS_MEDIAN, abs=0.01)
    for k in ("1", "4"):  # neither count was trained on: tied with the controls, the interval holding 0
        g = versus["groups"][k]
        assert g["verdict"] == "tied" and g["ci"][0] <= 0 <= g["ci"][1] and g["n"] == g["n_baseline"] == 5
    rows = found.to_frame().set_index("id")
    assert rows["chance_p"].tolist() == pytest.approx(np.exp2(-rows["exposure"]).tolist(), rel=1e-5)
    # one control's own interval misses chance's mean (it locates that canary's rank among the fillings, 30 of 400
    # candidates at or under it), and chance_p says how ordinary that is: 2^-3.74 = 7.5%
    one = rows.loc["canary-12"]
    assert one["insertions"] == 0 and one["beaten_by"] == 30 and one["exposure_lo"] > chance["mean"]
    assert one["chance_p"] == pytest.approx(0.075, abs=1e-3)
    assert "Controls (never trained on): median exposure" in run.stdout and "tied" in run.stdout
    assert "over the 5 controls" in found.headline()
