"""A served model against the same weights on disk: llama.cpp's server (the SmolLM2 Q4 GGUF) vs lmaudit's float32
import of that file, on the same real passages.

Measured in one run: per-token |Δ log p| (served − local, the prompt led by the BOS token in both), texts per second
served (one request per text, sequential) and local (one forward per text, batch 1), and the requests the client
made. What differs between the two is the arithmetic: llama.cpp multiplies the Q4 weights in its own kernels,
lmaudit dequantises them to float32 once. It is also what quantised serving does to an audit's statistics.

    make served-model && python benchmarks/bench_served.py [--n 100] [--chars 500]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch

from common import add_json_option, write_rows
from lmaudit.data.corpus import build_corpus
from lmaudit.errors import LmauditError
from lmaudit.models.loading import load_model
from lmaudit.models.served import Endpoint, check_alignment, prompt_logprobs

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from served_server import MODEL, available, llama_server  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=100, help="real passages (the corpus' non-member pool)")
    ap.add_argument("--chars", type=int, default=500)
    ap.add_argument("--threads", type=int, default=2)
    add_json_option(ap)
    args = ap.parse_args()
    why = available()
    if why:
        raise SystemExit(why)
    torch.set_num_threads(args.threads)
    texts = build_corpus().passages("nonmember", args.n, max_chars=args.chars, seed=0)
    local = load_model(MODEL)
    tok, bos = local.tokenizer, local.tokenizer.bos_token_id
    prompts = [[bos, *tok(t, add_special_tokens=False)["input_ids"]] for t in texts]
    t0 = time.perf_counter()
    mine = []
    with torch.no_grad():
        for ids in prompts:
            rows = torch.log_softmax(local.model(torch.tensor([ids])).logits[0].float(), -1)
            mine.append(np.array([float(rows[i][ids[i + 1]]) for i in range(1, len(ids) - 1)]))
    t_local = time.perf_counter() - t0
    with llama_server(threads=args.threads) as url:
        endpoint = Endpoint(url, model=MODEL, cache=False)
        found = check_alignment(endpoint, tok, bos)
        asked_before = endpoint.requests_made
        t0 = time.perf_counter()
        bos_text = tok.convert_ids_to_tokens(bos)
        served, kept = [], []
        for i, (t, ids) in enumerate(zip(texts, prompts)):
            try:  # a text the server's tokenizer splits otherwise than the local one is refused, never scored
                served.append(np.array(prompt_logprobs(endpoint, t, bos_text=bos_text, top_k=1,
                                                       n_tokens=len(ids) - 1).logprobs))
                kept.append(i)
            except LmauditError:
                pass
        t_served = time.perf_counter() - t0
        requests = endpoint.requests_made - asked_before
    gaps = np.concatenate([np.abs(a - mine[i]) for a, i in zip(served, kept)])
    n_tok = len(gaps)
    print(f"{args.n} passages of ≤ {args.chars} characters; {args.n - len(kept)} refused (llama.cpp's tokenizer "
          f"splits them otherwise than the local one); {n_tok} scored tokens of {len(kept)}; alignment "
          f"{found.as_dict()}")
    print(f"|Δ log p| served − local: mean {gaps.mean():.4f}, median {np.median(gaps):.4f}, "
          f"99th percentile {np.quantile(gaps, 0.99):.4f}, max {gaps.max():.4f} nats")
    print(f"texts per second: served {args.n / t_served:.2f} ({requests} requests), local {args.n / t_local:.2f}; "
          f"served ÷ local time {t_served / t_local:.2f}")
    write_rows(args.json, "bench_served", [
        {"measure": "served − local |Δ log p|, mean (nats)", "value": float(gaps.mean()), "target": "-", "met": None},
        {"measure": "served − local |Δ log p|, max (nats)", "value": float(gaps.max()), "target": "-", "met": None},
        {"measure": "served ÷ local time per text", "value": t_served / t_local, "target": "-", "met": None},
        {"measure": "requests per text", "value": requests / args.n, "target": "1", "met": requests == args.n},
        {"measure": "texts the two tokenizers split otherwise", "value": args.n - len(kept), "target": "-",
         "met": None},
    ])


if __name__ == "__main__":
    main()
