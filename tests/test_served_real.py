"""The served-model client against a real llama.cpp server (llama-cpp-python's, SmolLM2's GGUF, on 127.0.0.1): it
passes the alignment self-test and its log-probabilities are those of the same weights imported locally. Slow: it
needs ``make served-model`` and starts the server; run with ``make test-slow``."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from lmaudit.errors import LmauditError
from lmaudit.models.loading import load_model
from lmaudit.models.served import Endpoint, check_alignment, prompt_logprobs
from served_server import MODEL, available, llama_server

pytestmark = pytest.mark.slow

PASSAGES = ["Return the sum of the elements of the array over the given axis, treating missing values as zero.",
            "A context manager that changes the working directory for the duration of the block and back after it.",
            "Compute the QR factorization of a matrix: an orthonormal matrix and an upper triangular one."]


@pytest.fixture(scope="module")
def served():
    why = available()
    if why:
        pytest.skip(why)
    local = load_model(MODEL)
    with llama_server() as url:
        yield Endpoint(url, model=MODEL, cache=False), local


def test_the_real_server_passes_the_alignment_self_test(served):
    endpoint, local = served
    assert endpoint.served_model() == MODEL
    found = check_alignment(endpoint, local.tokenizer, local.tokenizer.bos_token_id)
    assert found.largest_gap <= 1e-3 and len(found.checked_positions) == 3


class NoBos:
    """The local tokenizer with a BOS token whose text is empty: prompts then reach the server without BOS."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer

    def __call__(self, *args, **kwargs):
        return self.tokenizer(*args, **kwargs)

    def convert_ids_to_tokens(self, _id):
        return ""


def test_prompts_without_a_bos_token_are_caught_by_the_alignment_self_test(served):
    """Without BOS, llama-cpp-python echoes as many tokens, the first null, but pairs each with the distribution
    that predicts the next one (its issue #1983): the shapes cannot tell, the self-test's values do."""
    endpoint, local = served
    with pytest.raises(LmauditError, match="asked for the prefix alone|do not spell the prompt's text"):
        check_alignment(endpoint, NoBos(local.tokenizer), local.tokenizer.bos_token_id)


def test_served_log_probabilities_are_the_local_weights_to_quantised_arithmetic(served):
    """The server computes with the Q4 weights in llama.cpp's arithmetic; lmaudit's import dequantises the same
    weights to float32: what differs is the arithmetic only."""
    endpoint, local = served
    bos = local.tokenizer.bos_token_id
    gaps = []
    for text in PASSAGES:
        ids = local.tokenizer(text, add_special_tokens=False)["input_ids"]
        got = prompt_logprobs(endpoint, text, bos_text=local.tokenizer.convert_ids_to_tokens(bos), top_k=1,
                              n_tokens=len(ids))
        with torch.no_grad():
            logits = local.model(torch.tensor([[bos, *ids]], device=local.model.device)).logits[0]
            rows = torch.log_softmax(logits.float().cpu(), -1)
        mine = np.array([float(rows[i][ids[i]]) for i in range(1, len(ids))])
        gaps.append(np.abs(np.array(got.logprobs) - mine))
    gaps = np.concatenate(gaps)
    # measured on these passages: mean 0.091, max 0.66 nats (benchmarks/bench_served.py measures it at scale); a
    # misaligned server would be nats off on most tokens
    assert gaps.mean() < 0.25 and gaps.max() < 2.0, (gaps.mean(), gaps.max())


def test_membership_inference_runs_on_the_real_server_and_agrees_with_the_local_weights(served):
    """``lmaudit.mia`` with the endpoint as the model: each text's loss is the local import's to the quantised
    arithmetic, Min-K%++ runs on the server's top-k and says it is approximate."""
    import lmaudit
    from lmaudit.data.corpus import build_corpus

    endpoint, local = served
    texts = build_corpus().passages("member", 8, max_chars=200, seed=1)
    members, nonmembers = texts[:4], texts[4:]
    config = lmaudit.RunConfig(attacks=["loss", "min_k_pp"], n_bootstrap=0, blind=False, use_cache=False)
    remote = lmaudit.mia(endpoint.url, members, nonmembers, tokenizer=MODEL, served_model=MODEL, config=config)
    assert remote.target["served"]["alignment"]["largest_gap_nats"] <= 1e-3
    assert any("approximate" in n for n in remote.attacks["min_k_pp"]["notes"])
    bos = local.tokenizer.bos_token_id
    for text, score in zip(members + nonmembers, remote.scores["loss"]):
        ids = local.tokenizer(text, add_special_tokens=False)["input_ids"]
        with torch.no_grad():
            logits = local.model(torch.tensor([[bos, *ids]], device=local.model.device)).logits[0]
            rows = torch.log_softmax(logits.float().cpu(), -1)
        assert abs(score - np.mean([float(rows[i][ids[i]]) for i in range(1, len(ids))])) < 0.25


def test_dataset_inference_and_extraction_run_on_the_real_server(served):
    """The other jobs through the endpoint: dataset inference returns its p-values, and a suffix's (n, p) probability
    is the local import's to the quantised arithmetic."""
    import lmaudit
    from lmaudit.data.corpus import build_corpus

    endpoint, local = served
    texts = build_corpus().passages("nonmember", 16, max_chars=120, seed=1)
    found = lmaudit.dataset_inference(endpoint.url, texts[:8], texts[8:], tokenizer=MODEL, served_model=MODEL,
                                      config=lmaudit.InferenceConfig(attacks=["loss", "min_k"], splits=3))
    assert found["served"]["url"] == endpoint.url and 0 <= found["test"]["p_combined"] <= 1
    cfg = lmaudit.ExtractConfig(mask="suffix:8", n=100, p=[0.1])
    remote = lmaudit.extract(endpoint.url, PASSAGES, config=cfg, tokenizer=MODEL, served_model=MODEL)
    mine = lmaudit.extract(local, PASSAGES, config=cfg)
    gap = np.abs(np.array(remote["records"]["log_p_hat@ar"]) - np.array(mine["records"]["log_p_hat@ar"]))
    assert gap.max() < 2.0, gap  # 8 tokens, each within the quantised arithmetic's reach of the import's
