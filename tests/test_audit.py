"""Set-level audits on real texts: features, monotone estimates over member mixtures, the CLI."""

import json

import numpy as np
import pytest

from helpers import assert_ok, assert_user_error, lmaudit, make_texts, write_jsonl
from lmaudit.data.loaders import TextSet, load_texts
from lmaudit.errors import LmauditError
from lmaudit.models.build import finetune
from lmaudit.models.loading import load_model
from lmaudit.probes.features import hidden_features
from lmaudit.runs.audit_set import AuditConfig, estimate_rho, run_audit, score_features


@pytest.fixture(scope="module")
def audited(tmp_path_factory, tiny_model_dir):
    """A tiny AR model fine-tuned on 96 texts: 48 serve as the member reference, 48 as suspect members."""
    root = tmp_path_factory.mktemp("audit")
    members = make_texts(96, seed=300)
    nonmembers = make_texts(96, seed=400)
    trained = load_texts(write_jsonl(root / "trained.jsonl", members))
    out = finetune(tiny_model_dir, trained, root / "target", mode="dft", epochs=20, lr=3e-3, block=32, batch_size=8)
    return root, load_model(out), members, nonmembers


def _mixture(members, nonmembers, fraction_members: float, n: int = 40) -> TextSet:
    k = int(round(fraction_members * n))
    return TextSet.from_texts(members[48 : 48 + k] + nonmembers[48 : 48 + n - k], prefix="u", source="suspect")


def test_hidden_features_are_mean_pooled(tiny_model_dir):
    """Mean of the last hidden state over each text's own tokens (padding in a batch left out); no training needed."""
    import torch

    loaded = load_model(tiny_model_dir, kind="ar")
    texts = make_texts(3, seed=301, min_words=4, max_words=30)
    assert len({len(loaded.tokenizer(t)["input_ids"]) for t in texts}) == 3  # batches of 2 are padded
    feats = hidden_features(loaded, TextSet.from_texts(texts), batch_size=2)
    assert feats.shape == (3, loaded.model.config.hidden_size)
    for row, text in enumerate(texts):
        ids = loaded.tokenizer(text, return_tensors="pt")["input_ids"].to(loaded.model.device)
        with torch.inference_mode():
            h = loaded.model(input_ids=ids, output_hidden_states=True).hidden_states[-1][0].double().cpu()  # (T, d)
        np.testing.assert_allclose(feats[row], h.mean(0).numpy(), atol=1e-5)
        assert not np.allclose(feats[row], h[-1].numpy(), atol=1e-3)  # pooled, not the last token


def test_estimates_are_monotone_in_the_member_fraction(audited):
    _, loaded, members, nonmembers = audited
    ref_m = TextSet.from_texts(members[:48], prefix="m", source="members")
    ref_n = TextSet.from_texts(nonmembers[:48], prefix="n", source="nonmembers")
    feats = {}
    for name, ts in (("m", ref_m), ("n", ref_n)):
        feats[name], cols = score_features(loaded, ts, attacks=["loss", "min_k", "zlib"])
    assert cols == ["loss", "min_k", "zlib"]
    rhos = {"smi": [], "smi-m": []}
    for frac in (0.0, 0.3, 0.7, 1.0):
        u, _ = score_features(loaded, _mixture(members, nonmembers, frac), attacks=["loss", "min_k", "zlib"])
        est = estimate_rho(feats["m"], feats["n"], u, AuditConfig(bootstrap=50))
        for name in rhos:
            rhos[name].append(est[name]["rho"])
    for name, values in rhos.items():
        assert all(a >= b - 0.02 for a, b in zip(values, values[1:])), (name, values)
        assert values[0] - values[-1] > 0.5, (name, values)  # all non-members vs all members


def test_run_audit_payload_and_anomaly_on_a_forged_set(audited):
    _, loaded, members, nonmembers = audited
    forged = TextSet.from_texts(["zzzz qqqq xxxx " * 8 for _ in range(20)], prefix="f", source="forged")
    payload = run_audit(loaded, TextSet.from_texts(members[:48]), TextSet.from_texts(nonmembers[:48]), forged,
                        AuditConfig(features="scores", attacks=["loss", "min_k"], kernel="linear", bootstrap=20))
    assert payload["features"] == {"kind": "scores", "dim": 2, "columns": ["loss", "min_k"]}
    assert payload["n_suspect"] == 20 and set(payload["methods"]) == {"smi", "smi-m"}
    # far beyond the non-members (garbage text has a huge loss): the projection overshoots and is flagged
    assert payload["methods"]["smi-m"]["anomaly"] and payload["methods"]["smi-m"]["rho_unclipped"] > 1.1


def test_bad_audit_options_are_clear_errors():
    with pytest.raises(LmauditError, match="unknown method 'smim'"):
        AuditConfig(method="smim").validate()
    with pytest.raises(LmauditError, match="unknown kernel"):
        AuditConfig(kernel="cosine").validate()


def test_audit_set_cli(audited, tmp_path):
    _, loaded, members, nonmembers = audited
    m = write_jsonl(tmp_path / "m.jsonl", members[:48])
    n = write_jsonl(tmp_path / "n.jsonl", nonmembers[:48])
    u = write_jsonl(tmp_path / "u.jsonl", members[48:68])
    res = lmaudit("audit-set", "--model", loaded.path, "--members", m, "--nonmembers", n, "--suspect", u,
                  "--bootstrap", "30", "--out", tmp_path / "audit")
    assert_ok(res)
    payload = json.loads((tmp_path / "audit" / "results.json").read_text())
    assert payload["type"] == "set-audit" and payload["features"]["kind"] == "hidden"
    assert payload["features"]["dim"] == loaded.model.config.hidden_size and payload["n_suspect"] == 20
    assert set(payload["methods"]) == {"smi", "smi-m"} and payload["config"]["bootstrap"] == 30
    assert payload["methods"]["smi"]["ci90"][0] <= payload["methods"]["smi"]["ci90"][1]
    assert "Set-level audit" in res.stdout and (tmp_path / "audit" / "report.html").exists()


def test_threshold_forgetting_rate_corrects_for_attack_errors():
    from lmaudit.audit.per_sample import threshold_forgetting

    rng = np.random.default_rng(0)
    m, n = rng.normal(1.0, 1.0, 20000), rng.normal(0.0, 1.0, 20000)
    u = np.r_[rng.normal(1.0, 1.0, 6000), rng.normal(0.0, 1.0, 4000)]  # ρ = 0.4
    out = threshold_forgetting(m, n, u, fpr=0.1)
    assert out["fpr"] == pytest.approx(0.1, abs=0.002)
    assert out["tpr"] == pytest.approx(0.389, abs=0.01)  # 1 − Φ(1.2816 − 1)
    assert out["forgetting_rate"] == pytest.approx(0.6 * 0.611 + 0.4 * 0.9, abs=0.015)
    assert out["rho"] == pytest.approx(0.4, abs=0.05)
    flat = threshold_forgetting(n, n, u, fpr=0.1)
    assert np.isnan(flat["rho"])
    with pytest.raises(LmauditError, match="fpr must be"):
        threshold_forgetting(m, n, u, fpr=1.5)


def test_threshold_forgetting_interval_holds_the_truth_narrows_with_data_and_refuses_an_attack_that_cannot_split():
    from lmaudit.audit.per_sample import threshold_forgetting, threshold_forgetting_interval

    def sets(size: int, seed: int):
        rng = np.random.default_rng(seed)
        m, n = rng.normal(2.0, 1.0, size), rng.normal(0.0, 1.0, size)
        return m, n, np.r_[rng.normal(2.0, 1.0, size // 2), rng.normal(0.0, 1.0, size - size // 2)]  # ρ = 0.5

    small, large = (threshold_forgetting_interval(*sets(k, 1), n_resamples=300) for k in (100, 1600))
    for lo, hi in (small, large):
        assert lo < 0.5 < hi
    assert large[1] - large[0] < (small[1] - small[0]) / 2  # 16× the texts: about a quarter of the width
    m, n, u = sets(100, 1)
    rho = threshold_forgetting(m, n, u)["rho"]
    assert small[0] <= rho <= small[1]
    assert threshold_forgetting_interval(m, n, u, n_resamples=300) == small  # seeded
    same = np.zeros(50)  # the threshold cannot split equal scores: ρ undefined on every resample
    assert threshold_forgetting_interval(same, same, u[:50], n_resamples=50) == [None, None]
    with pytest.raises(LmauditError, match="n_resamples must be"):
        threshold_forgetting_interval(m, n, u, n_resamples=0)


def test_dataset_inference_finds_the_trained_set_and_its_control_finds_nothing(audited, tmp_path):
    root, _, members, nonmembers = audited
    suspect = write_jsonl(tmp_path / "suspect.jsonl", members[48:88])  # trained on, not among the known members
    validation = write_jsonl(tmp_path / "validation.jsonl", nonmembers[48:88])
    known = write_jsonl(tmp_path / "known.jsonl", members[:48])
    res = lmaudit("dataset-inference", "--model", root / "target", "--suspect", suspect, "--validation",
                  validation, "--members", known, "--attacks", "loss,zlib,min_k,min_k_pp", "--splits", 10,
                  "--out", tmp_path / "di")
    assert_ok(res)
    got = json.loads((tmp_path / "di" / "results.json").read_text())
    assert got["test"]["p_combined"] < 0.01 and got["decision"] == {"0.01": True, "0.05": True}
    assert got["test"]["p_combined"] == min(1.0, 2 * float(np.median(got["test"]["p_values"])))
    assert got["control"]["p_combined"] > 0.05 and len(got["control"]["p_values"]) == 10
    assert got["smi"]["smi"]["rho"] < 0.5  # most of the suspect set behaves like the known members
    assert "Dataset inference: trained on the suspect set" in " ".join(res.output.split())
    assert "Each attack alone" in (tmp_path / "di" / "report.md").read_text()
    again = lmaudit("dataset-inference", "--model", root / "target", "--suspect", suspect, "--validation",
                    suspect, "--out", tmp_path / "twice")
    assert_user_error(again, "and suspect (", "hold the same 40 texts")


def test_dataset_inference_on_sets_drawn_alike_is_wrong_at_most_at_its_level(tiny_model_dir):
    """A model that saw none of the texts: 50 seeded draws of disjoint suspect and validation sets from one pool,
    each tested; the share rejected at α = 0.05 is within α plus two binomial standard errors."""
    from lmaudit.audit.dataset_inference import dataset_inference
    from lmaudit.runs.mia import RunConfig, score_set

    pool = TextSet.from_texts(make_texts(160, seed=600), prefix="p", source="pool")
    scores = score_set(load_model(tiny_model_dir), pool, config=RunConfig(attacks=["loss", "zlib", "min_k"]))
    x = np.column_stack([scores[n] for n in sorted(scores)])
    rng = np.random.default_rng(0)
    trials, wrong = 50, 0
    for t in range(trials):
        order = rng.permutation(len(x))
        found = dataset_inference(x[order[:40]], x[order[40:80]], sorted(scores), splits=5, seed=t)
        wrong += found["decision"]["0.05"]
    print(f"rejected at 0.05 on {wrong}/{trials} pairs drawn alike")
    assert wrong / trials <= 0.05 + 2 * np.sqrt(0.05 * 0.95 / trials)


def test_dataset_inference_refuses_what_it_cannot_test():
    from lmaudit.audit.dataset_inference import dataset_inference
    from lmaudit.errors import DataError

    x = np.random.default_rng(1).normal(size=(20, 2))
    with pytest.raises(DataError, match="the suspect set has 7 texts; dataset inference needs at least 8"):
        dataset_inference(x[:7], x[7:], ["loss", "zlib"])
    bad = x.copy()
    bad[3, 1] = np.nan
    with pytest.raises(DataError, match="validation: 1 non-finite score.*zlib of text 4"):
        dataset_inference(x[:10], bad, ["loss", "zlib"])
    shifted = dataset_inference(x[:10] + 3.0, x[10:], ["loss", "zlib"], splits=4)
    assert shifted["test"]["p_combined"] < 0.01  # a shift of 3 sd is found on 5 + 5 held-out texts


def test_one_split_without_clipping_is_the_plain_procedure():
    """Standardise on the validation fitting half, fit a logistic regression of "suspect", one-sided Welch test on
    the held-out halves: written here from the description, on the same seeded halves."""
    from scipy.stats import ttest_ind
    from sklearn.linear_model import LogisticRegression

    from lmaudit.audit.dataset_inference import one_split

    data = np.random.default_rng(2)
    s, v = data.normal(0.4, 1, size=(30, 3)), data.normal(0, 1, size=(26, 3))
    rng = np.random.default_rng(9)
    order_s, order_v = rng.permutation(30), rng.permutation(26)
    sf, st, vf, vt = s[order_s[:15]], s[order_s[15:]], v[order_v[:13]], v[order_v[13:]]
    mu, sd = vf.mean(axis=0), vf.std(axis=0, ddof=1)
    fit = LogisticRegression(max_iter=1000).fit(np.vstack([(sf - mu) / sd, (vf - mu) / sd]),
                                                np.r_[np.ones(15), np.zeros(13)])
    want = ttest_ind(fit.decision_function((st - mu) / sd), fit.decision_function((vt - mu) / sd), equal_var=False,
                     alternative="greater").pvalue
    assert np.isclose(one_split(s, v, np.random.default_rng(9), "none"), want, rtol=1e-9)
