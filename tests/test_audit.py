"""Set-level audits on real texts: features, monotone estimates over member mixtures, the CLI."""

import json

import numpy as np
import pytest

from helpers import assert_ok, lmaudit, make_texts, write_jsonl
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
        ids = loaded.tokenizer(text, return_tensors="pt")["input_ids"]
        with torch.inference_mode():
            h = loaded.model(input_ids=ids, output_hidden_states=True).hidden_states[-1][0].double()  # (T, d)
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
