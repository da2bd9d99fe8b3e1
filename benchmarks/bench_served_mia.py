"""A membership audit of a served model against the same audit of its weights on disk: llama.cpp's server (the
SmolLM2 Q4 GGUF) vs lmaudit's float32 import of that file, ``lmaudit.mia`` on the same real passages.

Measured in one run, per attack: the AUC each way with its 95% interval, their difference, and the rank correlation
of the per-text scores; per token, |Δ log p| between the server's answers (read again from the endpoint's cache) and
the local weights; texts per second each way and the requests the served audit made. Loss, zlib and Min-K%
read each token's log-probability, which the server gives exactly in its own (quantised) arithmetic: their
differences are what serving a Q4 build does to an audit. Min-K%++ and Gap-K% also read the mean and spread of
log p over the vocabulary, which a served model only gives approximately (from its top-k): their differences add
that approximation.

The two sets are passages of the corpus' member and non-member pools; SmolLM2 was trained on neither, so the AUCs
sit near 0.5 and say nothing of memorisation: what is compared is the two ways of computing the same audit. The
approximation alone is measured on the local weights too: Min-K%++ and Gap-K% from the whole distribution and from
its top-k, as a served model gives it.

    make served-model && python benchmarks/bench_served_mia.py [--n 100] [--chars 300] [--top-k 20]
"""

from __future__ import annotations

import argparse
import sys
import time
import zlib
from pathlib import Path

import numpy as np
import torch
from scipy.stats import spearmanr

import lmaudit
from common import add_json_option, write_rows
from lmaudit.attacks import get_attack
from lmaudit.data.corpus import build_corpus
from lmaudit.metrics import auc
from lmaudit.models.loading import load_model
from lmaudit.models.served_model import topk_moments
from lmaudit.probes.records import ARStats
from lmaudit.probes.stats import token_stats

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from served_server import MODEL, available, llama_server  # noqa: E402

ATTACKS = ["loss", "zlib", "min_k", "min_k_pp", "gap_k"]


def approximation_aucs(handle, members: list[str], nonmembers: list[str], k: int
                       ) -> tuple[dict[str, tuple[float, float]], list[np.ndarray]]:
    """{attack: (AUC exact, AUC from the top-k)} of Min-K%++ and Gap-K% on the local weights: the same token
    statistics once from the whole distribution and once as a served model gives them (the top-k, the rest of the
    mass spread evenly), so the approximation alone is measured, without the server's arithmetic; and each text's
    per-token log p on the local weights (every token but the first, as a served model scores them)."""
    tok, bos = handle.tokenizer, handle.tokenizer.bos_token_id
    exact, approx, counts = [], [], []
    with torch.no_grad():
        for text in members + nonmembers:
            ids = tok(text, add_special_tokens=False)["input_ids"]
            rows = torch.log_softmax(handle.model(torch.tensor([[bos, *ids]])).logits[0].float(), -1)[1:-1]
            targets = torch.tensor(ids[1:])
            full = token_stats(rows, targets).numpy()
            top = torch.topk(rows, k).values.double().numpy()
            moments = np.array([topk_moments(list(t), rows.shape[1]) for t in top])
            exact.append(full)
            approx.append(np.column_stack([full[:, :2], moments]).astype(np.float32))
            counts.append(len(full))
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    texts = members + nonmembers
    zlib_len = np.array([len(zlib.compress(t.encode())) for t in texts], dtype=np.int64)
    keys = np.arange(len(texts), dtype=np.uint64)
    labels = np.r_[np.ones(len(members)), np.zeros(len(nonmembers))]
    out = {}
    for name in ("min_k_pp", "gap_k"):
        spec = get_attack(name, "ar")
        aucs = []
        for flat in (np.concatenate(exact), np.concatenate(approx)):
            stats = ARStats(logp=flat[:, 0], top1_logp=flat[:, 1], mu=flat[:, 2], sigma=flat[:, 3],
                            entropy=-flat[:, 2], offsets=offsets, zlib_len=zlib_len, sample_keys=keys,
                            n_tokens=np.diff(offsets) + 1)
            aucs.append(auc(labels, spec(stats, **spec.params)))
        out[name] = (aucs[0], aucs[1])
    return out, [e[:, 0].astype(np.float64) for e in exact]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=100, help="passages per set (a served text takes ~10 s here)")
    ap.add_argument("--chars", type=int, default=300)
    ap.add_argument("--top-k", type=int, default=20)
    ap.add_argument("--threads", type=int, default=2)
    add_json_option(ap)
    args = ap.parse_args()
    why = available()
    if why:
        raise SystemExit(why)
    corpus = build_corpus()
    members = corpus.passages("member", args.n, max_chars=args.chars, seed=0)
    nonmembers = corpus.passages("nonmember", args.n, max_chars=args.chars, seed=0)
    config = lmaudit.RunConfig(attacks=ATTACKS, blind=False, use_cache=False, batch_size=1)
    weights = load_model(MODEL)
    t0 = time.perf_counter()
    local = lmaudit.mia(weights, members, nonmembers, config=config)
    t_local = time.perf_counter() - t0
    with llama_server(threads=args.threads) as url:
        handle = load_model(url, tokenizer=MODEL, served_model=MODEL, top_k=args.top_k)
        asked = handle.adapter.endpoint.requests_made  # the alignment self-test's
        t0 = time.perf_counter()
        served = lmaudit.mia(handle, members, nonmembers, config=config)
        t_served = time.perf_counter() - t0
        requests = handle.adapter.endpoint.requests_made - asked
        # the same answers again, read from the endpoint's cache: each token's log p as the server computed it
        served_logp = [handle.adapter.token_stats(t)[:, 0].astype(np.float64) for t in members + nonmembers]
        asked_again = handle.adapter.endpoint.requests_made - asked - requests
    n = 2 * args.n
    approximated, local_logp = approximation_aucs(weights, members, nonmembers, args.top_k)
    # texts the server splits into other tokens than the local tokenizer have no token-by-token pairing
    paired = [(a, b) for a, b in zip(served_logp, local_logp) if len(a) == len(b)]
    gaps = np.concatenate([np.abs(a - b) for a, b in paired])
    print(f"{args.n} + {args.n} passages of ≤ {args.chars} characters; served top-{args.top_k}; alignment "
          f"{served.target['served']['alignment']}")
    rows = []
    for name in ATTACKS:
        a, b = local.attacks[name], served.attacks[name]
        rho = float(spearmanr(local.scores[name], served.scores[name]).statistic)
        approx = any("approximate" in note for note in b.get("notes", []))
        print(f"{name:9s} AUC local {100 * a['auc']:.1f} [{100 * a['auc_ci95'][0]:.1f}, {100 * a['auc_ci95'][1]:.1f}]"
              f"  served {100 * b['auc']:.1f} [{100 * b['auc_ci95'][0]:.1f}, {100 * b['auc_ci95'][1]:.1f}]"
              f"  Δ {100 * (b['auc'] - a['auc']):+.1f} points  Spearman of scores {rho:.3f}"
              f"{'  (served: approximate)' if approx else ''}")
        rows += [{"measure": f"{name}: served − local AUC (points)", "value": 100 * (b["auc"] - a["auc"]),
                  "target": "-", "met": None},
                 {"measure": f"{name}: Spearman of served and local scores", "value": rho, "target": "-",
                  "met": None}]
    for name, (exact_auc, approx_auc) in approximated.items():
        print(f"{name:9s} on the local weights: AUC exact {100 * exact_auc:.1f}, from the top-{args.top_k} "
              f"{100 * approx_auc:.1f} (the approximation alone: {100 * (approx_auc - exact_auc):+.1f} points)")
        rows.append({"measure": f"{name}: top-{args.top_k} − exact AUC, local weights (points)",
                     "value": 100 * (approx_auc - exact_auc), "target": "-", "met": None})
    print(f"|Δ log p| served − local per token: mean {gaps.mean():.4f}, median {np.median(gaps):.4f}, 99th "
          f"percentile {np.quantile(gaps, 0.99):.4f}, max {gaps.max():.4f} nats ({len(gaps)} tokens of {len(paired)} "
          f"of the {n} texts; the others split into other tokens by the server; {asked_again} requests to read them "
          "again)")
    rows += [{"measure": "served − local |Δ log p| per token, mean (nats)", "value": float(gaps.mean()),
              "target": "-", "met": None},
             {"measure": "served − local |Δ log p| per token, max (nats)", "value": float(gaps.max()), "target": "-",
              "met": None}]
    print(f"texts per second: served {n / t_served:.2f} ({requests} requests, {requests / n:.2f} per text), local "
          f"{n / t_local:.2f} (batch 1); served ÷ local time {t_served / t_local:.1f}")
    rows += [{"measure": "served ÷ local time", "value": t_served / t_local, "target": "-", "met": None},
             {"measure": "requests per text", "value": requests / n, "target": "1", "met": requests <= n + 1}]
    write_rows(args.json, "bench_served_mia", rows)
    assert np.isfinite([r["value"] for r in rows]).all()


if __name__ == "__main__":
    main()
