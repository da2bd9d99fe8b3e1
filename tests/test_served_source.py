"""A served model as a model source: ``lmaudit.mia`` on an endpoint (the fake server of test_served, computed by a
real tiny model) scores what the model's weights give, runs the attacks its access allows, skips the others with
the reason, marks the top-k approximations, and records the endpoint without credentials."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from helpers import make_texts
from lmaudit.errors import LmauditError
from lmaudit.models.loading import load_model
from lmaudit.models.served_model import topk_moments
from test_served import FakeServer

BOS = 2  # the tiny tokenizer's own BOS ("<bos>")


@pytest.fixture
def server(tiny_model, tokenizer):
    s = FakeServer(tiny_model, tokenizer, bos=BOS)
    yield s
    s.close()


def test_topk_moments_are_exact_when_the_top_k_hold_the_whole_distribution_and_spread_the_rest_evenly():
    p = np.array([0.5, 0.3, 0.2])
    mu, sigma = topk_moments(list(np.log(p)), vocab=3)
    assert mu == pytest.approx(float((p * np.log(p)).sum()))
    assert sigma == pytest.approx(float(np.sqrt((p * np.log(p) ** 2).sum() - mu ** 2)))
    # the top two only: the 0.2 they leave spread over the 8 other tokens of a 10-token vocabulary
    mu2, _ = topk_moments(list(np.log(p[:2])), vocab=10)
    assert mu2 == pytest.approx(float((p[:2] * np.log(p[:2])).sum() + 0.2 * np.log(0.2 / 8)))


def test_a_served_model_scores_what_its_weights_give_and_runs_what_its_access_allows(server, tiny_model, tokenizer,
                                                                                   tiny_model_dir, monkeypatch):
    import lmaudit
    from lmaudit.models.served import API_KEY_ENV

    monkeypatch.setenv(API_KEY_ENV, "s3cret")
    texts = make_texts(16, seed=7)
    members, nonmembers = texts[:8], texts[8:]
    result = lmaudit.mia(server.url, members, nonmembers, tokenizer=tiny_model_dir, top_k=5,
                         config=lmaudit.RunConfig(n_bootstrap=20, blind=False))
    assert result.skipped == {}  # every default AR attack runs on top-k access (GradNorm is opt-in)
    assert {"loss", "zlib", "min_k", "min_k_pp", "gap_k"} <= set(result.attacks)
    assert any("approximate" in n for n in result.attacks["min_k_pp"]["notes"])
    assert not any("approximate" in n for n in result.attacks.get("loss", {}).get("notes", []))
    served = result.target["served"]
    assert served["url"] == server.url and served["access"] == "top_k"
    assert served["alignment"]["largest_gap_nats"] < 1e-3
    assert "s3cret" not in repr(result.payload())
    # loss = mean log p of tokens 2…n given BOS and the tokens before, as the weights compute it
    ids = tokenizer(members[0], add_special_tokens=False)["input_ids"]
    with torch.no_grad():
        rows = torch.log_softmax(tiny_model(torch.tensor([[BOS, *ids]])).logits[0], -1)
    want = np.mean([float(rows[i][ids[i]]) for i in range(1, len(ids))])
    assert result.scores["loss"][0] == pytest.approx(want, abs=1e-5)


def test_named_attacks_beyond_the_access_and_a_missing_tokenizer_are_refused(server, tiny_model_dir):
    import lmaudit

    with pytest.raises(LmauditError, match="tokenizer"):
        load_model(server.url)
    with pytest.raises(LmauditError, match="gradnorm cannot run on this model: it needs weights access"):
        lmaudit.mia(server.url, ["a b c d e f"] * 2, ["g h i j k l"] * 2, tokenizer=tiny_model_dir,
                    config=lmaudit.RunConfig(attacks=["loss", "gradnorm"], n_bootstrap=0, blind=False))


def test_an_option_the_source_does_not_read_is_refused_naming_it_and_a_pair_reads_each_its_own(server, tiny_model_dir,
                                                                                                tmp_path):
    """Before, a weight option given with a URL, or --tokenizer given with a folder, was silently ignored."""
    import lmaudit
    from helpers import assert_user_error, write_jsonl
    from helpers import lmaudit as cli

    with pytest.raises(LmauditError, match="dtype.* does not apply to a served model, whose server holds the weights"):
        load_model(server.url, tokenizer=tiny_model_dir, dtype="bfloat16")
    with pytest.raises(LmauditError, match="device.* cuda does not apply to a served model"):
        load_model(server.url, tokenizer=tiny_model_dir, device="cuda")
    with pytest.raises(LmauditError, match="tokenizer.* does not apply to a model on disk"):
        load_model(tiny_model_dir, tokenizer=tiny_model_dir)
    with pytest.raises(LmauditError, match="top_k.* does not apply to a model on disk"):
        load_model(tiny_model_dir, top_k=0)  # 0 is a value given, not the "unset" False
    assert load_model(server.url, tokenizer=tiny_model_dir, device="cpu").kind == "ar"  # a Ray driver's device
    texts = make_texts(8, seed=17)
    config = lmaudit.RunConfig(attacks=["loss", "reference"], n_bootstrap=0, blind=False)
    # a served target with a local reference: the tokenizer is the target's option, the dtype the reference's
    both = lmaudit.mia(server.url, texts[:4], texts[4:], reference=tiny_model_dir, tokenizer=tiny_model_dir,
                       dtype="float32", config=config)
    assert both.reference["fingerprint"] == load_model(tiny_model_dir).fingerprint
    with pytest.raises(LmauditError, match="tokenizer.* does not apply to a model on disk"):
        lmaudit.mia(tiny_model_dir, texts[:4], texts[4:], reference=tiny_model_dir, tokenizer=tiny_model_dir,
                    config=config)
    members, nonmembers = write_jsonl(tmp_path / "m.jsonl", texts[:4]), write_jsonl(tmp_path / "n.jsonl", texts[4:])
    out = cli("mia", "--model", tiny_model_dir, "--members", members, "--nonmembers", nonmembers, "--tokenizer",
              tiny_model_dir, "--out", tmp_path / "run")
    assert_user_error(out, "--tokenizer does not apply to a model on disk")
    assert not (tmp_path / "run").exists()


def test_attacks_beyond_the_access_are_skipped_with_the_reason_and_distribution_ones_run_approximately():
    from lmaudit.attacks import get_attack
    from lmaudit.attacks.selection import by_access

    specs = [get_attack(n, "ar") for n in ("loss", "min_k_pp", "gradnorm")]
    runs, skipped, approx = by_access(specs, "top_k", named=False)
    assert [s.name for s in runs] == ["loss", "min_k_pp"] and approx == ["min_k_pp"]
    assert skipped == {"gradnorm": "needs weights access (the model itself: gradients, masked forwards); the model "
                                   "gives top_k"}
    runs, skipped, approx = by_access(specs, "logprob", named=False)
    assert [s.name for s in runs] == ["loss"] and set(skipped) == {"min_k_pp", "gradnorm"} and not approx
    assert [s.name for s in by_access(specs, "weights", named=True)[0]] == ["loss", "min_k_pp", "gradnorm"]


def test_the_command_line_audits_a_served_model_and_records_it_without_credentials(server, tiny_model_dir, tmp_path,
                                                                                    monkeypatch):
    import json

    from helpers import lmaudit as cli
    from lmaudit.models.served import API_KEY_ENV

    monkeypatch.setenv(API_KEY_ENV, "s3cret")
    texts = make_texts(16, seed=3)
    for name, part in (("m.jsonl", texts[:8]), ("n.jsonl", texts[8:])):
        (tmp_path / name).write_text("".join(json.dumps({"text": t}) + "\n" for t in part))
    out = tmp_path / "run"
    r = cli("mia", "--model", server.url, "--tokenizer", tiny_model_dir, "--members", tmp_path / "m.jsonl",
            "--nonmembers", tmp_path / "n.jsonl", "--attacks", "loss,min_k_pp", "--bootstrap", 20, "--out", out,
            "--no-report")
    assert r.exit_code == 0, r.output
    saved = (out / "results.json").read_text()
    res = json.loads(saved)
    assert res["target"]["served"]["url"] == server.url and res["target"]["path"] == server.url
    assert "s3cret" not in saved and set(res["attacks"]) == {"loss", "min_k_pp"}


def test_dataset_inference_runs_on_a_served_model(server, tiny_model_dir):
    import lmaudit

    texts = make_texts(24, seed=11)
    found = lmaudit.dataset_inference(server.url, texts[:12], texts[12:], tokenizer=tiny_model_dir,
                                      config=lmaudit.InferenceConfig(attacks=["loss", "min_k"], splits=3))
    assert found.type == "dataset-inference" and 0.0 <= found["test"]["p_combined"] <= 1.0
    assert found["served"]["url"] == server.url and found["model"] == server.url


def test_extraction_on_a_served_model_gives_the_probabilities_of_its_weights(server, tiny_model_dir):
    import lmaudit

    texts = make_texts(6, seed=5)
    cfg = dict(mask="suffix:4", n=100, p=[0.1])
    remote = lmaudit.extract(server.url, texts, config=lmaudit.ExtractConfig(**cfg), tokenizer=tiny_model_dir)
    local = lmaudit.extract(tiny_model_dir, texts, config=lmaudit.ExtractConfig(**cfg))
    got, want = (np.array(r["records"]["log_p_hat@ar"]) for r in (remote, local))
    assert np.all(np.isfinite(want)) and got == pytest.approx(want, abs=1e-4)
    assert remote["served"]["url"] == server.url
    with pytest.raises(LmauditError, match="temperature 1"):
        lmaudit.extract(server.url, texts, config=lmaudit.ExtractConfig(**cfg, temperature=0.7),
                        tokenizer=tiny_model_dir)
    with pytest.raises(LmauditError, match=r"p must be a non-empty list, got 0.1"):
        lmaudit.ExtractConfig(p=0.1)


def test_pii_reconstruction_ranks_candidates_the_served_model_generated(server, tiny_model, tokenizer,
                                                                          tiny_model_dir, tmp_path):
    import json

    from lmaudit.data.loaders import load_texts
    from lmaudit.extraction.reconstruct import redacted_records
    from lmaudit.models.loading import load_model
    from lmaudit.runs.pii import ReconstructConfig, run_reconstruction

    rows = [{"id": f"r{i}", "text": f"From: Ann Lee <[REDACTED]>\nthe model data train token layer. Bye {i}",
             "email": f"annlee{i}@mailbox.org"} for i in range(2)]
    (tmp_path / "red.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    recs = redacted_records(load_texts(tmp_path / "red.jsonl"), "email")
    server.faults["completion"] = "annlee0@mailbox.org>\nthe"  # what the served model 'generates'
    served = load_model(server.url, tokenizer=tiny_model_dir)
    out = run_reconstruction(served, recs, ReconstructConfig(candidates=3, mask_length=6, include_truth=True))
    case = out["_cases"][0]
    # three samples of one text, cut to 6 tokens: one candidate, then the truth
    assert case["n_generated"] == 1 and case["values"] == ["annlee0@", rows[0]["email"]]
    asked = [b for path, _, b in server.seen if path == "/v1/completions" and b["max_tokens"] == 6]
    assert len(asked) == 6 and len({b["seed"] for b in asked}) == 6  # a request per sample, each its own seed
    # each candidate's CE is the mean log p of its text's tokens after the first, given BOS, as the weights give it
    ids = tokenizer(recs[0].filled(case["values"][-1]), add_special_tokens=False)["input_ids"]
    with torch.no_grad():
        rows_lp = torch.log_softmax(tiny_model(torch.tensor([[BOS, *ids]])).logits[0], -1)
    want = np.mean([float(rows_lp[i][ids[i]]) for i in range(1, len(ids))])
    assert case["ce"][-1] == pytest.approx(want, abs=1e-5)


def test_a_server_that_gives_text_only_is_audited_by_the_generation_attacks_alone(tiny_model, tokenizer,
                                                                                tiny_model_dir):
    import lmaudit

    server = FakeServer(tiny_model, tokenizer, bos=BOS, no_logprobs=True)
    try:
        handle = load_model(server.url, tokenizer=tiny_model_dir)
        assert handle.adapter.access == "generation" and handle.facts()["served"]["prompt_logprobs"] is False
        texts = make_texts(8, seed=2)
        with pytest.raises(LmauditError, match="no chosen attack can run on this model: it gives generation"):
            lmaudit.mia(handle, texts[:4], texts[4:], config=lmaudit.RunConfig(n_bootstrap=0, blind=False))
        result = lmaudit.mia(handle, texts[:4], texts[4:], config=lmaudit.RunConfig(
            attacks=["samia"], params={"samia": {"n": 2}}, n_bootstrap=0, blind=False))
        scores = result.scores["samia"]
        assert set(result.attacks) == {"samia"} and np.all((scores >= 0) & (scores <= 1))
        with pytest.raises(LmauditError, match="loss cannot run on this model: it needs logprob access"):
            lmaudit.mia(handle, texts[:4], texts[4:], config=lmaudit.RunConfig(attacks=["loss"], blind=False))
        for job in (lmaudit.probe, lmaudit.score_texts):  # every job that probes for attacks chooses them alike
            with pytest.raises(LmauditError, match="loss cannot run on this model: it needs logprob access"):
                job(handle, texts, config=lmaudit.RunConfig(attacks=["loss"]))
            with pytest.raises(LmauditError, match=r"parameters given for attack\(s\) not run: min_k"):
                job(handle, texts, config=lmaudit.RunConfig(attacks=["samia"], params={"samia": {"n": 2},
                                                                                       "min_k": {"k": 0.5}}))
    finally:
        server.close()


def test_requests_run_concurrently_up_to_the_bound_and_give_the_sequential_scores(server, tiny_model_dir):
    import time

    import lmaudit

    texts = make_texts(12, seed=9)
    slow = server.model.forward

    def forward(*args, **kwargs):  # slow enough that requests overlap
        time.sleep(0.05)
        return slow(*args, **kwargs)

    server.model.forward = forward
    try:
        config = lmaudit.RunConfig(attacks=["loss"], n_bootstrap=0, blind=False, use_cache=False)
        one = lmaudit.mia(load_model(server.url, tokenizer=tiny_model_dir, concurrency=1), texts[:6], texts[6:],
                          config=config)
        assert server.most_in_flight == 1
        three = load_model(server.url, tokenizer=tiny_model_dir, concurrency=3)
        three.adapter.endpoint.cache = False  # ask the server again
        many = lmaudit.mia(three, texts[:6], texts[6:], config=config)
    finally:
        del server.model.forward
    assert server.most_in_flight == 3 and np.array_equal(one.scores["loss"], many.scores["loss"])
    for option in ("concurrency", "top_k"):  # 0 is refused, not read as the default
        with pytest.raises(LmauditError, match=f"^{option} must be an integer ≥ 1, got 0"):  # a declared setting
            load_model(server.url, tokenizer=tiny_model_dir, **{option: 0})


def test_a_served_model_and_a_local_one_serve_as_each_others_reference(server, tiny_model_dir):
    import lmaudit

    texts = make_texts(12, seed=13)
    config = lmaudit.RunConfig(attacks=["loss", "reference"], n_bootstrap=0, blind=False)
    served_target = lmaudit.mia(server.url, texts[:6], texts[6:], reference=tiny_model_dir, tokenizer=tiny_model_dir,
                                config=config)
    local_target = lmaudit.mia(tiny_model_dir, texts[:6], texts[6:], reference=server.url, tokenizer=tiny_model_dir,
                               config=config)
    assert served_target.target["served"]["url"] == local_target.reference["served"]["url"] == server.url
    assert "served" not in served_target.reference and "served" not in local_target.target
    # the same two models each way round: the reference attack's score flips its sign, up to the first token,
    # which the served model cannot score and the local one does
    assert np.corrcoef(served_target.scores["reference"], -local_target.scores["reference"])[0, 1] > 0.9


def test_a_set_audit_of_a_served_model_reads_scores_and_refuses_hidden_features(server, tiny_model_dir):
    import lmaudit

    texts = make_texts(18, seed=17)
    with pytest.raises(LmauditError, match="features=hidden reads the model's hidden states"):
        lmaudit.audit_set(server.url, texts[:6], texts[6:12], texts[12:], tokenizer=tiny_model_dir)
    found = lmaudit.audit_set(server.url, texts[:6], texts[6:12], texts[12:], tokenizer=tiny_model_dir,
                              config=lmaudit.AuditConfig(features="scores", attacks=["loss", "min_k"]))
    assert found["features"]["columns"] == ["loss", "min_k"]


def test_a_token_the_server_renders_empty_is_still_scored_and_a_dropped_token_is_refused(server, tiny_model,
                                                                                       tokenizer, tiny_model_dir):
    handle = load_model(server.url, tokenizer=tiny_model_dir)  # aligned before the fault is planted
    text = make_texts(1, seed=31)[0]
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    server.faults["blank"] = 3  # the echo spells the text but for one token's text
    rows = handle.adapter.token_stats(text)
    with torch.no_grad():
        lp = torch.log_softmax(tiny_model(torch.tensor([[BOS, *ids]])).logits[0], -1)
    assert rows[:, 0] == pytest.approx([float(lp[i][ids[i]]) for i in range(1, len(ids))], abs=1e-5)
    from lmaudit.models.served import prompt_logprobs

    pieces = [tokenizer.decode([i]) for i in ids]
    with pytest.raises(LmauditError, match="do not spell the prompt's text"):  # the local tokenizer counts one more
        prompt_logprobs(handle.adapter.endpoint, text, bos_text=handle.adapter.bos_text, top_k=2,
                        n_tokens=len(ids) + 1, pieces=pieces + ["x"])
    server.faults["blank"] = slice(1, None)  # most token texts rendered otherwise: not the same tokens, refused
    with pytest.raises(LmauditError, match="do not spell the prompt's text"):
        prompt_logprobs(handle.adapter.endpoint, text + " ", bos_text=handle.adapter.bos_text, top_k=2,
                        n_tokens=len(ids), pieces=pieces)


def test_a_gguf_tokenizer_is_read_from_its_metadata_without_importing_the_weights(server, tiny_model_dir, tmp_path,
                                                                                   monkeypatch):
    """--tokenizer FILE.gguf: the tokenizer and context length come from the file's metadata; no tensor is
    dequantized and nothing is written to the cache (an import took 24 s and 517 MB for SmolLM2)."""
    import lmaudit
    from gguf_files import write_gguf
    from lmaudit.models import gguf as gguf_mod
    from lmaudit.utils import cache_dir

    file = write_gguf(tiny_model_dir, tmp_path / "served.gguf", context_length=96)
    monkeypatch.setattr(gguf_mod, "write_imported", lambda *a, **k: pytest.fail("imported the weights"))
    texts = make_texts(8, seed=2)
    result = lmaudit.mia(server.url, texts[:4], texts[4:], tokenizer=file, top_k=5,
                         config=lmaudit.RunConfig(attacks=["loss"], n_bootstrap=0, blind=False))
    local = lmaudit.mia(server.url, texts[:4], texts[4:], tokenizer=tiny_model_dir, top_k=5,
                        config=lmaudit.RunConfig(attacks=["loss"], n_bootstrap=0, blind=False))
    assert np.array_equal(result.scores["loss"], local.scores["loss"])  # the same tokenizer, read from the file
    assert not (cache_dir() / "models").exists() or not any((cache_dir() / "models").iterdir())
    assert gguf_mod.gguf_tokenizer(file)[1] == 96


def test_the_table_marks_top_k_approximations_and_the_report_names_the_served_model(server, tiny_model_dir):
    from rich.console import Console

    import lmaudit
    from lmaudit.report.build import mia_facts
    from lmaudit.runs.mia_notes import results_table

    texts = make_texts(12, seed=4)
    result = lmaudit.mia(server.url, texts[:6], texts[6:], tokenizer=tiny_model_dir, top_k=5,
                         config=lmaudit.RunConfig(attacks=["loss", "min_k_pp"], n_bootstrap=0, blind=False))
    console = Console(record=True, width=400)
    console.print(results_table(result))
    shown = console.export_text()
    assert "min_k_pp (approx.)" in shown and "loss (approx.)" not in shown
    assert "(approx.): approximate: the mean and spread of log p over the vocabulary come from the top 5" in shown
    facts = mia_facts(result.payload())
    identity = result.target["fingerprint"].removeprefix("served:")
    assert f"served model 'tiny', identity {identity}, top-5 log-probabilities (approximate from them: mu, sigma)" \
        in facts["target"]
    assert "budget" not in facts["configuration"]  # a DLM setting: not shown for an AR run


def test_a_served_probe_reports_its_progress_as_it_goes_not_only_at_the_end(server, tiny_model_dir, monkeypatch,
                                                                           capsys):
    import lmaudit
    from lmaudit.probes.shards import SERVED_SHARD_SIZE

    monkeypatch.delenv("LMAUDIT_PROGRESS", raising=False)
    monkeypatch.delenv("LMAUDIT_SHARD_SIZE", raising=False)
    texts = make_texts(2 * SERVED_SHARD_SIZE + 16, seed=11)  # 80 texts: shards of 32, 32 and 16
    half = len(texts) // 2
    lmaudit.mia(server.url, texts[:half], texts[half:], tokenizer=tiny_model_dir,
                config=lmaudit.RunConfig(attacks=["loss"], n_bootstrap=0, blind=False, use_cache=False))
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("probe target:")]
    # a line as each shard's answers are in (40%, 80%), then the last one: a served set is no longer one shard
    assert [line.split(": ", 1)[1].split(",")[0] for line in lines] == ["32/80 (40%)", "64/80 (80%)", "80/80 (100%)"]
    assert "done in" in lines[-1] and all("ETA" in line for line in lines[:-1])


def test_a_served_shard_reports_its_own_texts_as_they_come(server, tiny_model_dir, monkeypatch, capsys):
    import lmaudit
    import lmaudit.progress as progress_module

    monkeypatch.delenv("LMAUDIT_PROGRESS", raising=False)
    monkeypatch.setattr(progress_module, "LINE_EVERY_S", 0.0)  # every answer is "30 s later"
    texts = make_texts(12, seed=13)
    lmaudit.mia(server.url, texts[:6], texts[6:], tokenizer=tiny_model_dir,
                config=lmaudit.RunConfig(attacks=["loss"], n_bootstrap=0, blind=False, use_cache=False))
    inner = [line for line in capsys.readouterr().err.splitlines() if line.startswith("probe target (this shard):")]
    assert inner and inner[0].startswith("probe target (this shard): 1/12 (8%)")  # the shard's texts, one by one
