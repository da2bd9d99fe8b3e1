"""Extraction estimator cost: forwards per record and time ÷ bare forward time.

One record, |M| masked tokens, R random trajectories, N steps on the tiny DLM
preset or a DLM of SmolLM2-135M's configuration (``--model smollm2``; random weights; the
architecture lmaudit's DLMs use: a Llama network with full attention and shifted logits). The estimator runs
``dlm_trajectories``; the bare pass runs the adapter's full forward (all logits) on the same N batches of R
masked inputs, built beforehand. Target: forwards = N, ratio ≤ 1.2.

    python benchmarks/bench_extraction.py [--trajectories 512] [--masked 32] [--steps 32] [--repeats 2] [--model tiny]
"""

from __future__ import annotations

import argparse

import numpy as np
import torch

from common import add_json_option, bench_dlm, bench_texts, best_of, write_rows
from lmaudit.probes.trajectories import Target, dlm_trajectories, random_orders, step_bounds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trajectories", type=int, default=512)
    ap.add_argument("--masked", type=int, default=32)
    ap.add_argument("--steps", type=int, default=32)
    ap.add_argument("--chars", type=int, default=300, help="characters of the record (≈75 tokens)")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--no-warmup", action="store_true", help="skip the untimed warm-up pass of each side")
    ap.add_argument("--model", default="tiny", choices=("tiny", "small", "smollm2"))
    add_json_option(ap)
    args = ap.parse_args()
    torch.manual_seed(0)
    tokenizer, texts = bench_texts(8, args.chars)
    adapter = bench_dlm(args.model, tokenizer)
    ids = np.asarray(tokenizer(texts.texts[0])["input_ids"], dtype=np.int64)
    rng = np.random.default_rng(0)
    target = Target("bench", ids, np.sort(rng.choice(np.arange(1, len(ids)), args.masked, replace=False)))
    R, N = args.trajectories, args.steps

    # the inputs the estimator sees at each step, built outside the timed region
    orders, bounds = random_orders(target, R, seed=0), step_bounds(args.masked, N)
    inputs = []
    for k in range(N):
        x = np.tile(ids, (R, 1))
        still = orders[:, bounds[k]:]  # positions not yet unmasked before step k
        np.put_along_axis(x, still, adapter.mask_token_id, axis=1)
        inputs.append(torch.from_numpy(x))
    attn = torch.ones(R, len(ids), dtype=torch.long)

    @torch.inference_mode()
    def bare() -> None:
        for x in inputs:
            adapter(x, attn)

    result = {}

    def estimator() -> None:
        result["r"] = dlm_trajectories(adapter.handle(), [target], steps=[N], trajectories=R, seed=0,
                                       max_tokens=R * len(ids))[0]

    if not args.no_warmup:
        bare(), estimator()  # warm-up
    t_bare, t_est = best_of(bare, args.repeats), best_of(estimator, args.repeats)
    print(f"{args.model} DLM, record of {len(ids)} tokens, |M| = {args.masked}, R = {R}, N = {N}, best of "
          f"{args.repeats}, torch threads {torch.get_num_threads()}")
    print(f"{'forwards/record':>16}{'bare s':>9}{'estimator s':>13}{'ratio':>8}")
    print(f"{result['r'].forwards:>16}{t_bare:>9.3f}{t_est:>13.3f}{t_est / t_bare:>8.3f}")
    print(f"forwards = N: {'yes' if result['r'].forwards == N else 'NO'}; ratio ≤ 1.2: "
          f"{'yes' if t_est / t_bare <= 1.2 else 'NO'}")
    write_rows(args.json, "bench_extraction", [
        {"measure": f"extraction estimator ÷ bare forwards ({args.model}, R = {R}, N = {N})", "value": t_est / t_bare,
         "target": "≤ 1.2", "met": t_est / t_bare <= 1.2},
        {"measure": f"forwards per record ÷ N ({args.model})", "value": result["r"].forwards / N, "target": "= 1",
         "met": result["r"].forwards == N}])


if __name__ == "__main__":
    main()
