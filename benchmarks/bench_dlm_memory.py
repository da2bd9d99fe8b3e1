"""Peak memory of a masked probe at a real vocabulary: the chunked output head against whole logits.

A model of SmolLM2-135M's shape (49,152-token vocabulary, random weights) run as a DLM (full attention, shifted
logits) probes the same texts under the same 16-mask plan twice, each in a fresh process: with the output head
applied to the masked rows only, in chunks (the default), and with the adapter's whole (batch × length × vocabulary)
logits (``fuse=False``). The same batch size for both (``--batch-size``). Reported: each process's peak resident
memory above what it held before probing, their ratio, and the largest difference between the two runs'
statistics (they must agree).

    python benchmarks/bench_dlm_memory.py [--texts 16] [--batch-size 16]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys

import numpy as np

from common import add_json_option, bench_dlm, bench_texts, write_rows


def probe(fused: bool, texts: int, batch_size: int) -> None:
    """One probe in this process; prints {peak_mib, logp} as JSON."""
    from lmaudit.probes.masked import probe_masked
    from lmaudit.probes.masks import MaskPlan

    tokenizer, textset = bench_texts(texts, 600)
    adapter = bench_dlm("smollm2", tokenizer)
    adapter.fuse = fused
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    stats = probe_masked(adapter.handle(), textset, MaskPlan("elbo", budget=16), batch_size=batch_size)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    print(json.dumps({"peak_mib": peak / 1024, "logp": stats.logp[:2000].tolist()}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--texts", type=int, default=16)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--child", choices=("fused", "full"), default=None, help=argparse.SUPPRESS)
    add_json_option(ap)
    args = ap.parse_args()
    if args.child:
        probe(args.child == "fused", args.texts, args.batch_size)
        return
    runs = {}
    for mode in ("fused", "full"):
        out = subprocess.run([sys.executable, __file__, "--child", mode, "--texts", str(args.texts), "--batch-size",
                              str(args.batch_size)], capture_output=True, text=True, check=True).stdout
        runs[mode] = json.loads(out.strip().splitlines()[-1])
    ratio = runs["full"]["peak_mib"] / max(runs["fused"]["peak_mib"], 1e-9)
    gap = float(np.max(np.abs(np.array(runs["full"]["logp"]) - np.array(runs["fused"]["logp"]))))
    print(f"SmolLM2-135M shape as a DLM, {args.texts} texts × 16 masks, batch {args.batch_size}")
    print(f"peak memory of the probe: chunked head {runs['fused']['peak_mib']:.0f} MiB, whole logits "
          f"{runs['full']['peak_mib']:.0f} MiB (× {ratio:.1f}); largest |Δ log p| {gap:.2e}")
    write_rows(args.json, "bench_dlm_memory", [
        {"measure": "masked probe peak memory, whole logits ÷ chunked head", "value": round(ratio, 2),
         "target": "> 1", "unit": "×"},
        {"measure": "largest |Δ log p| between the two", "value": gap, "target": "< 1e-4", "unit": "nats"}])


if __name__ == "__main__":
    main()
