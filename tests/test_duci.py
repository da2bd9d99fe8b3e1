"""DUCI: the used proportion of a suspect set from one attack's decisions, debiased on reference models of known
membership; the estimator on arrays, ``audit-set --method duci`` on shadow models and its refusals."""

import json

import numpy as np
import pytest

from helpers import assert_ok, assert_user_error, lmaudit, make_texts, write_jsonl
from lmaudit.audit.duci import duci
from lmaudit.errors import LmauditError


def halves(n: int, k: int, rng) -> np.ndarray:
    """(n, k) membership of k reference models on complementary random halves of n records."""
    m = np.zeros((n, k), dtype=bool)
    for j in range(0, k, 2):
        perm = rng.permutation(n)
        m[perm[: n // 2], j] = True
        if j + 1 < k:
            m[perm[n // 2 :], j + 1] = True
    return m


def two_level(membership: np.ndarray, tpr: float, fpr: float) -> np.ndarray:
    """Scores 1 (called member) or 0 such that exactly a share ``tpr`` of the IN pairs and ``fpr`` of the OUT pairs
    score 1, taken in row-major order."""
    s = np.zeros(membership.shape)
    for cls, rate in ((True, tpr), (False, fpr)):
        where = np.flatnonzero(membership.ravel() == cls)
        s.ravel()[where[: round(rate * len(where))]] = 1.0
    return s


def test_the_share_called_members_is_corrected_by_the_references_rates():
    """TPR 0.8 and FPR 0.3 on the references exactly; the target calls 60 of 100 records members: p̂ =
    (0.6 − 0.3) / (0.8 − 0.3) = 0.6, where the naive share would say 0.6 only by accident of these numbers — so also
    check a share of 0.45: p̂ = 0.3."""
    m = halves(100, 4, np.random.default_rng(0))
    ref = two_level(m, 0.8, 0.3)
    for called, want in ((60, 0.6), (45, 0.3)):
        target = np.r_[np.ones(called), np.zeros(100 - called)]
        est = duci(target, ref, m, bootstrap=0)
        assert (est.tpr, est.fpr, est.decided_share) == pytest.approx((0.8, 0.3, called / 100))
        assert est.proportion == pytest.approx(want) and est.proportion_unclipped == pytest.approx(want)
        assert est.threshold == pytest.approx(0.5)  # midway between the two score levels
        assert (est.n_suspect, est.n_reference_models, est.n_in, est.n_out) == (100, 4, 200, 200)
        assert all(np.isnan(est.ci95)) and est.to_dict()["ci95"] == [None, None]


def test_every_record_called_member_reads_one_and_beyond_one_unclipped():
    m = halves(40, 2, np.random.default_rng(1))
    perfect = duci(np.ones(40), m.astype(float), m, bootstrap=50)  # TPR 1, FPR 0: the share is the proportion
    assert (perfect.tpr, perfect.fpr, perfect.proportion, perfect.proportion_unclipped) == (1.0, 0.0, 1.0, 1.0)
    assert perfect.ci95 == (1.0, 1.0) and not perfect.anomaly
    noisy = duci(np.ones(40), two_level(m, 0.8, 0.3), m, bootstrap=0)  # (1 − 0.3) / (0.8 − 0.3) = 1.4
    assert noisy.proportion == 1.0 and noisy.proportion_unclipped == pytest.approx(1.4) and noisy.anomaly


@pytest.mark.parametrize("p", [0.0, 0.2, 0.8, 1.0])
def test_gaussian_scores_recover_the_proportion_where_the_naive_share_does_not(p):
    """Scores N(1.5, 1) for members, N(0, 1) for non-members, on 8 references and the target alike (2,000 records):
    p̂ lands within 0.05 of p, the raw share stays biased towards FPR / TPR, and the 95% interval holds p."""
    rng = np.random.default_rng(2)
    n = 2000
    m = halves(n, 8, rng)
    ref = rng.normal(size=m.shape) + 1.5 * m
    used = np.zeros(n, dtype=bool)
    used[rng.permutation(n)[: round(p * n)]] = True
    est = duci(rng.normal(size=n) + 1.5 * used, ref, m, bootstrap=200, seed=3)
    assert abs(est.proportion_unclipped - p) < 0.05
    naive_error = abs(est.decided_share - p)
    assert naive_error > 0.1 and abs(est.proportion_unclipped - p) < naive_error / 2
    assert est.ci95_unclipped[0] <= p <= est.ci95_unclipped[1]
    assert est.ci90_unclipped[0] >= est.ci95_unclipped[0] and est.ci90_unclipped[1] <= est.ci95_unclipped[1]
    assert 0.4 < est.tpr - est.fpr < 0.7  # Youden's J of two unit normals 1.5 apart: 2Φ(0.75) − 1 = 0.547


def test_the_interval_holds_the_truth_in_most_seeded_cases_and_is_seeded():
    """Records of varying difficulty (shared by target and references), 100 records, 4 references: the 95% interval
    holds p in at least 36 of 40 seeded cases (nominal 38); the same seed gives the same interval."""
    held = 0
    for seed in range(40):
        rng = np.random.default_rng(100 + seed)
        m = halves(100, 4, rng)
        hard = 0.5 * rng.normal(size=100)
        used = rng.permutation(100) < 40
        target = rng.normal(size=100) + 1.5 * used + hard
        est = duci(target, rng.normal(size=(100, 4)) + 1.5 * m + hard[:, None], m, bootstrap=200, seed=seed)
        held += est.ci95[0] <= 0.4 <= est.ci95[1]
    assert held >= 36
    rng = np.random.default_rng(7)
    m = halves(60, 4, rng)
    args = (rng.normal(size=60), rng.normal(size=(60, 4)) + m, m)
    assert duci(*args, seed=5).ci95 == duci(*args, seed=5).ci95 != duci(*args, seed=6).ci95


def test_a_fixed_threshold_measures_the_rates_there():
    m = halves(100, 4, np.random.default_rng(4))
    ref = two_level(m, 0.8, 0.3) + 0.25 * m  # members' pairs lifted: at τ = 1.1 only lifted ones count
    est = duci(np.r_[np.full(50, 2.0), np.zeros(50)], ref, m, threshold=1.1, bootstrap=0)
    assert (est.threshold, est.tpr, est.fpr) == (1.1, pytest.approx(0.8), 0.0)
    assert est.proportion_unclipped == pytest.approx(0.5 / 0.8) and est.details["threshold"] == "fixed"


@pytest.mark.parametrize("make, needle", [
    (lambda m: (m.astype(float) * -1.0, m), "does not separate members from non-members on the 4 reference model"),
    (lambda m: (np.zeros(m.shape), m), "TPR 0.000 ≤ FPR 0.000"),
    (lambda m: (np.ones(m.shape), np.c_[m[:, :3], np.zeros(len(m), bool)]),
     "reference model 3 has no known members among the 20 records"),
    (lambda m: (np.ones(m.shape), np.c_[np.ones(len(m), bool), m[:, 1:]]),
     "reference model 0 has no known non-members"),
    (lambda m: (np.ones((19, 4)), m),
     r"reference_scores must have shape \(n_records, n_reference_models\) = \(20, K\)"),
    (lambda m: (np.ones(m.shape), m.astype(float) * 2), "reference_membership must be a boolean array"),
    (lambda m: (np.full(m.shape, np.nan), m), "reference_scores holds 80 NaN"),
])
def test_refusals(make, needle):
    m = halves(20, 4, np.random.default_rng(5))
    scores, membership = make(m)
    with pytest.raises(LmauditError, match=needle):
        duci(np.ones(20), scores, membership)


@pytest.mark.parametrize("kw, needle", [({"bootstrap": -1}, "bootstrap must be"),
                                        ({"threshold": "otsu"}, "unknown threshold 'otsu'"),
                                        ({"threshold": float("nan")}, "unknown threshold")])
def test_bad_settings(kw, needle):
    m = halves(20, 2, np.random.default_rng(6))
    with pytest.raises(LmauditError, match=needle):
        duci(np.ones(20), m.astype(float), m, **kw)


# --- audit-set --method duci: shadows of known membership ---

def fake_shadows(folder, trained: list[list[str]]):
    """A shadows folder whose manifest says what each (absent) shadow trained on, by text key."""
    folder.mkdir()
    (folder / "shadows.json").write_text(json.dumps({"k": len(trained), "shadows": [
        {"path": f"shadow{j}", "trained": keys} for j, keys in enumerate(trained)]}))
    return folder


def text_keys(texts):
    from lmaudit.data.loaders import TextSet
    from lmaudit.models.shadows import text_key

    return [text_key(r) for r in TextSet.from_texts(texts).records]


def test_duci_needs_shadows_and_reads_no_members(tmp_path, tiny_model_dir):
    suspect = write_jsonl(tmp_path / "s.jsonl", make_texts(8, seed=1))
    out = tmp_path / "out"
    base = ("audit-set", "--model", tiny_model_dir, "--suspect", suspect, "--out", out, "--method", "duci")
    assert_user_error(lmaudit(*base), "--method duci", "needs --shadows DIR", "lmaudit shadows")
    keys = text_keys(make_texts(8, seed=1))
    shadows = fake_shadows(tmp_path / "sh", [keys[:4], keys[4:]])
    assert_user_error(lmaudit(*base, "--shadows", shadows, "--members", suspect), "--members would be ignored")
    assert_user_error(lmaudit("audit-set", "--model", tiny_model_dir, "--suspect", suspect, "--members", suspect,
                              "--nonmembers", suspect, "--out", out, "--shadows", shadows),
                      "calibrate method duci only", "--method duci")
    assert_user_error(lmaudit(*base, "--shadows", shadows, "--attack", "lira"), "attack lira needs shadow models")
    assert_user_error(lmaudit(*base, "--shadows", shadows, "--attack", "reference"), "needs a reference model",
                      "--reference DIR")
    assert not out.exists()
    import lmaudit as api

    with pytest.raises(LmauditError, match='method="duci" calibrates .* needs shadows= DIR'):
        api.audit_set(tiny_model_dir, suspect=suspect, config=api.AuditConfig(method="duci"))


def test_suspect_records_no_shadow_trained_on_are_refused_with_their_count(tmp_path, tiny_model_dir):
    texts = make_texts(10, seed=2)
    suspect = write_jsonl(tmp_path / "s.jsonl", texts)
    other = text_keys(make_texts(10, seed=3))
    keys = text_keys(texts)
    shadows = fake_shadows(tmp_path / "sh", [other[:5] + keys[:3], other[5:] + keys[3:6]])  # 4 records unknown
    assert_user_error(lmaudit("audit-set", "--model", tiny_model_dir, "--suspect", suspect, "--method", "duci",
                              "--shadows", shadows, "--out", tmp_path / "out"),
                      str(shadows), "4 of the 10 suspect records", "in no shadow model's training set",
                      "trained on other data than the suspect set")


def test_audit_set_duci_end_to_end_on_shadows_of_the_suspect_set(tmp_path, tiny_model_dir):
    """A target fine-tuned on 12 of 24 suspect texts, 4 shadows on complementary halves of the 24: DUCI's estimate
    holds 0.5 in its interval, and the command writes the used proportion, not ρ, as its headline."""
    import lmaudit as api
    from lmaudit.data.loaders import TextSet

    texts = make_texts(24, seed=41)
    suspect = write_jsonl(tmp_path / "s.jsonl", texts)
    train = dict(epochs=8, lr=3e-2, block=32, batch_size=8)
    target = api.finetune(tiny_model_dir, TextSet.from_texts(texts[:12]), tmp_path / "ft", **train).path
    api.shadows(tiny_model_dir, suspect, tmp_path / "sh", k=4, **train)
    result = api.audit_set(target, suspect=suspect, shadows=tmp_path / "sh", reference=tiny_model_dir,
                           config=api.AuditConfig(method="duci", bootstrap=100))
    est = result["methods"]["duci"]
    assert est["attack"] == "reference" and est["n_reference_models"] == 4 and est["n_in"] == est["n_out"] == 48
    assert est["ci95"][0] <= 0.5 <= est["ci95"][1] and est["tpr"] > est["fpr"]
    assert est["trained_fraction"] == est["proportion"] and est["rho"] == pytest.approx(1 - est["proportion"])
    assert "features" not in result["config"] and result["n_shadows"] == 4
    frame = result.to_frame()
    assert list(frame["method"]) == ["duci"] and frame["proportion_low"][0] == est["ci95"][0]
    assert result.headline() == f"DUCI: used proportion p̂ = {est['proportion']:.2f}"
    out = tmp_path / "out"
    run = lmaudit("audit-set", "--model", target, "--suspect", suspect, "--method", "duci", "--shadows",
                  tmp_path / "sh", "--reference", tiny_model_dir, "--bootstrap", 100, "--out", out)
    assert_ok(run)
    assert "used proportion p̂ (trained on)" in run.output and "unused 1 − p̂" in run.output
    written = json.loads((out / "results.json").read_text())
    assert written["methods"]["duci"]["proportion"] == est["proportion"]  # cached probes, same seed: same estimate
    report = (out / "report.md").read_text()
    assert f"DUCI estimates that {100 * est['proportion']:.0f}% of the 24 suspect texts were used in training" in report
    assert "ρ = 1 − p̂" in report


@pytest.mark.slow  # about 15 s: a tiny corpus, base, 2 shadows and 2 targets
def test_mini_usage_proportion_experiment_estimates_both_audits_against_the_truth(tmp_path):
    from helpers import mini_experiment
    from lmaudit.experiments.runner import run_experiment

    cfg = mini_experiment(tmp_path, name="up", type="usage-proportion", kind="ar", n_members=8, n_nonmembers=8,
                          n_suspect=8, n_shadow_pool=4, n_shadows=2, proportions=[0.0, 0.5], bootstrap=20,
                          smi_attacks=["loss", "reference"], lr=3e-3)
    folder = run_experiment(cfg, out_root=tmp_path / "results", command="lmaudit run up.toml")
    res = json.loads((folder / "results.json").read_text())
    assert list(res["cells"]) == ["0", "0.5"] and len(res["shadow_training_s"]) == 1
    (none,), (half,) = res["cells"].values()
    assert (none["truth"], none["n_used"], half["truth"], half["n_used"]) == (0.0, 0, 0.5, 4)
    for cell in (none, half):
        for audit in ("duci", "smi-m"):
            a = cell[audit]
            assert a["seconds"] > 0 and (a["estimate"] is None or 0 <= a["estimate"] <= 1)
        smi = cell["smi-m"]
        if smi["estimate"] is not None:  # 1 − ρ, its interval the reversed one of ρ
            assert smi["ci_unclipped"][0] <= smi["ci_unclipped"][1]
    table = (folder / "table.md").read_text()
    assert "DUCI 95% interval" in table and "SMI-M 1 − ρ (unclipped)" in table and "training 2 shadows took" in table
    assert (folder / "estimate_vs_truth.png").read_bytes()[:4] == b"\x89PNG"
