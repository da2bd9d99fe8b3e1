"""How far a text's probe statistics move with the texts batched beside it (why the cache keys hold the batch size).

The same texts are probed by the ``tiny`` AR preset (random weights, seeded) at batch sizes 1, 4 and 16 (padded
batches of similar lengths), with no cache. Reported: the largest per-token |Δ log p| against batch size 1, and the
number of member/non-member pairs whose order flips for Min-K%++ (an arbitrary split of the texts), which is what
moves an AUC when a cached shard computed at one batch size is read by a run at another.

    python benchmarks/bench_batch_layout.py [--texts 200]
"""

from __future__ import annotations

import argparse

import numpy as np

from common import add_json_option, bench_texts, write_rows
from lmaudit.attacks.registry import get_attack
from lmaudit.models.adapters import ARAdapter
from lmaudit.models.presets import build_ar_model, get_preset
from lmaudit.probes.ar import ARProbeConfig, probe_ar

SIZES = (1, 4, 16)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--texts", type=int, default=200)
    add_json_option(ap)
    args = ap.parse_args()
    tokenizer, texts = bench_texts(args.texts, 400)
    model = build_ar_model(get_preset("tiny"), tokenizer, seed=0).eval()
    stats = {b: probe_ar(ARAdapter(model, tokenizer).handle(), texts, ARProbeConfig(batch_size=b)) for b in SIZES}
    scores = {b: np.asarray(get_attack("min_k_pp", "ar").fn(s)) for b, s in stats.items()}
    members = np.arange(len(texts)) % 2 == 0
    rows = []
    for b in SIZES[1:]:
        delta = float(np.abs(stats[b].logp.astype(np.float64) - stats[1].logp).max())
        pair = lambda s: np.sign(s[members][:, None] - s[~members][None, :])  # noqa: E731
        flips = int(np.sum(pair(scores[b]) != pair(scores[1])))
        print(f"batch {b:>2} vs 1: largest |Δ log p| {delta:.2e} nats; Min-K%++ pairs flipped {flips} of "
              f"{members.sum() * (~members).sum()}", flush=True)
        rows.append({"measure": f"largest per-token |Δ log p|, batch {b} vs 1 (nats)", "value": delta,
                     "target": "", "met": None})
        rows.append({"measure": f"Min-K%++ member/non-member pairs flipped, batch {b} vs 1", "value": flips,
                     "target": "", "met": None})
    write_rows(args.json, "bench_batch_layout", rows)


if __name__ == "__main__":
    main()
