"""The neighbourhood attack's AR scoring on SmolLM2-135M: every neighbour whole, or continuing from its text's keys
and values, each ÷ the plain AR probe of the texts.

The texts (numpy docstrings cut to ``--chars``) get ``--n`` neighbours each from the embedded diffusion LM, made once
before timing (that time is reported too, ÷ the plain AR probe's). Then, in one process and interleaved
``--repeats`` times (the fastest of each kept, by wall time and by the process's CPU time): the plain AR probe of
the texts; the old path, which scores every neighbour whole with the AR probe; the new one
(:mod:`lmaudit.probes.neighbour_ar`). The attack's scoring is the plain pass plus one of those, so its ratio is
1 + neighbours ÷ plain. Also: the tokens each pass feeds (padding aside), the largest differences of the neighbours'
log-probabilities and of the attack's scores between the two paths. On a machine shared with other work, CPU time
(at one thread, ``OMP_NUM_THREADS=1``) moves less than wall time.

    python benchmarks/bench_neighbourhood.py [--texts 8] [--chars 500] [--n 25] [--repeats 2]

Ratios measured within one process hold on a busy machine; absolute times do not.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from common import add_json_option, bench_texts, write_rows
from lmaudit.attacks.neighbourhood import neighbourhood
from lmaudit.data.loaders import TextSet
from lmaudit.models.build import masked_model
from lmaudit.models.gguf import local_model
from lmaudit.models.loading import load_model
from lmaudit.probes.ar import probe_ar
from lmaudit.probes.neighbour_ar import first_difference, neighbour_stats
from lmaudit.probes.neighbours import NeighbourSettings, make_neighbours, neighbour_set
from lmaudit.probes.records import NeighbourStats
from lmaudit.probes.tokenize import tokenize_records


def fed_tokens(handle, texts: TextSet, neighbours: TextSet, owner: np.ndarray) -> tuple[int, int, int]:
    """(tokens of the texts, of the neighbours whole, the new path's least: each text up to its neighbours' last
    first difference, each neighbour from the token before its first difference)."""
    limit = handle.adapter.context_length
    own = tokenize_records(handle.tokenizer, texts, max_length=limit).ids
    theirs = tokenize_records(handle.tokenizer, neighbours, max_length=limit).ids
    first = np.array([first_difference(x, own[o]) for x, o in zip(theirs, owner)])
    run = np.zeros(len(own), dtype=np.int64)
    np.maximum.at(run, owner, first)
    new = int(run[run > 1].sum()) + sum(len(x) - max(d - 1, 0) for x, d in zip(theirs, first) if d < len(x))
    return sum(len(x) for x in own), sum(len(x) for x in theirs), new


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--texts", type=int, default=8)
    ap.add_argument("--chars", type=int, default=500)
    ap.add_argument("--n", type=int, default=25, help="neighbours per text")
    ap.add_argument("--repeats", type=int, default=2)
    add_json_option(ap)
    args = ap.parse_args()
    _, texts = bench_texts(args.texts, args.chars)
    texts = TextSet(texts.records[: args.texts], source=texts.source)
    handle = load_model(local_model("smollm2-135m"))
    mask = masked_model()
    probe_ar(handle, TextSet(texts.records[:2], source="warm-up"))
    t0, c0 = time.perf_counter(), time.process_time()
    made, owner, forwards, _ = neighbour_set(texts, make_neighbours(mask, texts, NeighbourSettings(n=args.n)))
    t_make, c_make = time.perf_counter() - t0, time.process_time() - c0
    runs = {"plain": lambda: probe_ar(handle, texts), "whole": lambda: probe_ar(handle, made),
            "reused": lambda: neighbour_stats(handle, made)}
    wall, cpu, got = {name: np.inf for name in runs}, {name: np.inf for name in runs}, {}
    for _ in range(args.repeats):
        for name, fn in runs.items():
            t0, c0 = time.perf_counter(), time.process_time()
            got[name] = fn()
            wall[name] = min(wall[name], time.perf_counter() - t0)
            cpu[name] = min(cpu[name], time.process_time() - c0)
    whole, reused = (NeighbourStats(got["plain"], got[k], owner) for k in ("whole", "reused"))
    d_score = float(np.abs(neighbourhood(whole) - neighbourhood(reused)).max())
    d_logp = float(np.abs(got["whole"].logp - got["reused"].logp).max())
    n_plain, n_whole, n_new = fed_tokens(handle, texts, made, owner)
    print(f"SmolLM2-135M, {len(texts)} texts of {args.chars} characters ({n_plain} tokens), {len(made)} neighbours "
          f"({len(made) / len(texts):.1f} per text), torch threads {torch.get_num_threads()}, best of {args.repeats}")
    print(f"neighbours made by the embedded DLM (once): {t_make:.1f} s wall, {c_make:.1f} s cpu "
          f"({forwards.mean():.0f} masked forwards per text), {t_make / wall['plain']:.1f}× (wall) and "
          f"{c_make / cpu['plain']:.1f}× (cpu) the plain AR probe")
    print(f"{'pass':<22}{'tokens':>8}{'wall s':>9}{'cpu s':>9}{'attack ÷ AR (wall)':>20}{'(cpu)':>8}")
    for name, label, tokens in (("plain", "texts (AR probe)", n_plain), ("whole", "neighbours whole", n_whole),
                                ("reused", "neighbours continuing", n_new)):
        ratio = "" if name == "plain" else \
            f"{1 + wall[name] / wall['plain']:>20.2f}{1 + cpu[name] / cpu['plain']:>8.2f}"
        print(f"{label:<22}{tokens:>8}{wall[name]:>9.2f}{cpu[name]:>9.2f}{ratio}")
    print(f"neighbours' pass, whole ÷ continuing: {wall['whole'] / wall['reused']:.2f}× wall, "
          f"{cpu['whole'] / cpu['reused']:.2f}× cpu, {n_whole / n_new:.2f}× tokens; max |Δ logp| {d_logp:.2e}, "
          f"max |Δ score| {d_score:.2e}")
    rows = []
    for clock, times in (("cpu", cpu), ("wall", wall)):
        rows += [{"measure": f"neighbourhood scoring ÷ AR probe ({clock}), neighbours whole (old)",
                  "value": round(1 + times["whole"] / times["plain"], 2), "target": "reported", "unit": "×"},
                 {"measure": f"neighbourhood scoring ÷ AR probe ({clock}), continuing from the text (new)",
                  "value": round(1 + times["reused"] / times["plain"], 2), "target": "reported", "unit": "×"},
                 {"measure": f"neighbours' AR pass, whole ÷ continuing ({clock})",
                  "value": round(times["whole"] / times["reused"], 2), "target": "> 1",
                  "met": bool(times["whole"] > times["reused"]), "unit": "×"}]
    rows += [{"measure": "neighbours' fed tokens, whole ÷ continuing", "value": round(n_whole / n_new, 2),
              "target": "reported", "unit": "×"},
             {"measure": "making the neighbours ÷ AR probe (cpu)", "value": round(c_make / cpu["plain"], 1),
              "target": "reported", "unit": "×"},
             {"measure": "max |Δ logp| of the neighbours, continuing vs whole", "value": d_logp, "target": "≤ 1e-4",
              "met": d_logp <= 1e-4},
             {"measure": "max |Δ neighbourhood score|, continuing vs whole", "value": d_score, "target": "≤ 1e-4",
              "met": d_score <= 1e-4}]
    write_rows(args.json, "bench_neighbourhood", rows)


if __name__ == "__main__":
    main()
