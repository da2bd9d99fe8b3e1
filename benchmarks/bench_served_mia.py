"""A membership audit of a served model against the same audit of its weights on disk: llama.cpp's server (the
SmolLM2 Q4 GGUF) vs lmaudit's float32 import of that file, ``lmaudit.mia`` on the same real passages.

Measured in one run, per attack: the AUC each way with its 95% interval, their difference, and the rank correlation
of the per-text scores; texts per second each way and the requests the served audit made. Loss, zlib and Min-K%
read each token's log-probability, which the server gives exactly in its own (quantised) arithmetic: their
differences are what serving a Q4 build does to an audit. Min-K%++ and Gap-K% also read the mean and spread of
log p over the vocabulary, which a served model only gives approximately (from its top-k): their differences add
that approximation.

The two sets are passages of the corpus' member and non-member pools; SmolLM2 was trained on neither, so the AUCs
sit near 0.5 and say nothing of memorisation: what is compared is the two ways of computing the same audit.

    make served-model && python benchmarks/bench_served_mia.py [--n 100] [--chars 300] [--top-k 20]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
from scipy.stats import spearmanr

import lmaudit
from common import add_json_option, write_rows
from lmaudit.data.corpus import build_corpus
from lmaudit.models.loading import load_model

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from served_server import MODEL, available, llama_server  # noqa: E402

ATTACKS = ["loss", "zlib", "min_k", "min_k_pp", "gap_k"]


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
    n = 2 * args.n
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
    print(f"texts per second: served {n / t_served:.2f} ({requests} requests, {requests / n:.2f} per text), local "
          f"{n / t_local:.2f} (batch 1); served ÷ local time {t_served / t_local:.1f}")
    rows += [{"measure": "served ÷ local time", "value": t_served / t_local, "target": "-", "met": None},
             {"measure": "requests per text", "value": requests / n, "target": "1", "met": requests <= n + 1}]
    write_rows(args.json, "bench_served_mia", rows)
    assert np.isfinite([r["value"] for r in rows]).all()


if __name__ == "__main__":
    main()
