"""Scale: peak memory of scoring 2k vs 20k texts, and Ray (2 local workers) vs local throughput.

Memory: ``lmaudit mia`` runs in a fresh subprocess on a tiny-preset AR model (random
weights, saved to a temporary folder) with half the texts as members and half as
non-members, five reference-free attacks and a fresh cache; the peak resident set
size of that process is read from the kernel (``wait4``). Texts are docstrings of
numpy cut to ``--chars`` characters, made distinct by a running number. Target:
peak RSS ratio 20k / 2k ≤ 1.2 (probes stream through shards on disk; only the
scores of the whole set stay in memory).

Throughput: the AR probe of ``--ray-texts`` texts, no cache, on the local backend
(this process) and on the Ray backend with 2 workers on a local instance; each is
run twice and the second run is timed (the Ray actors have then loaded the model).
Ratio = Ray texts/s ÷ local texts/s; on 2 CPUs it is below 1 (the workers share the
same cores, and Ray adds process start-up and transfers).

    python benchmarks/bench_scale.py [--small 2000] [--large 20000] [--chars 300] [--ray-texts 1024]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import add_json_option, bench_texts, write_rows


def peak_rss_mib(args: list[str], env: dict) -> tuple[float, float]:
    """(peak RSS in MiB, wall seconds) of a subprocess."""
    t0 = time.perf_counter()
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode != 0:
            err.seek(0)
            raise SystemExit(f"{' '.join(args[:4])} failed: {err.read().decode()[-2000:]}")
    return usage.ru_maxrss / 1024, time.perf_counter() - t0  # Linux: KiB


def write_sets(folder: Path, texts: list[str], n: int) -> None:
    half = n // 2
    for name, lo in (("members.jsonl", 0), ("nonmembers.jsonl", half)):
        with open(folder / name, "w") as fh:
            for i in range(lo, lo + half):
                fh.write(json.dumps({"text": f"{texts[i % len(texts)]} ({i})"}) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--small", type=int, default=2000)
    ap.add_argument("--large", type=int, default=20000)
    ap.add_argument("--chars", type=int, default=300)
    ap.add_argument("--ray-texts", type=int, default=1024)
    ap.add_argument("--no-ray", action="store_true")
    ap.add_argument("--no-blind", action="store_true", help="run mia without its blind baselines (their features "
                    "of every text are held at once: the one part of a run whose memory grows with the set)")
    ap.add_argument("--batch-size", type=int, default=None, help="passed to lmaudit mia (default: the model's budget)")
    add_json_option(ap)
    args = ap.parse_args()

    import torch

    from lmaudit.models.presets import build_ar_model, get_preset

    tokenizer, texts = bench_texts(4000, args.chars)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        model = build_ar_model(get_preset("tiny"), tokenizer, seed=0)
        model.save_pretrained(tmp / "model")
        tokenizer.save_pretrained(tmp / "model")
        rss = {}
        for n in (args.small, args.large):
            folder = tmp / f"n{n}"
            folder.mkdir()
            write_sets(folder, texts.texts, n)
            env = {**os.environ, "LMAUDIT_CACHE": str(folder / "cache"), "LMAUDIT_PROGRESS": "0"}
            cmd = [sys.executable, "-m", "lmaudit.cli", "mia", "--target", str(tmp / "model"),
                   "--members", str(folder / "members.jsonl"), "--nonmembers", str(folder / "nonmembers.jsonl"),
                   "--attacks", "loss,zlib,min_k,min_k_pp,gap_k", "--no-report", "--bootstrap", "200",
                   "--out", str(folder / "out"), *(["--no-blind"] if args.no_blind else []),
                   *(["--batch-size", str(args.batch_size)] if args.batch_size else [])]
            rss[n], wall = peak_rss_mib(cmd, env)
            print(f"lmaudit mia on {n:>6} texts: peak RSS {rss[n]:7.1f} MiB, {wall:6.1f} s")
        ratio = rss[args.large] / rss[args.small]
        what = " without blind baselines" if args.no_blind else ""
        print(f"peak RSS ratio {args.large} / {args.small} texts{what}: {ratio:.3f} (target ≤ 1.2: "
              f"{'yes' if ratio <= 1.2 else 'NO'})")
        rows += [{"measure": f"peak RSS, lmaudit mia on {args.small} texts{what} (MiB)", "value": rss[args.small],
                  "target": "", "met": None},
                 {"measure": f"peak RSS, lmaudit mia on {args.large} texts{what} (MiB)", "value": rss[args.large],
                  "target": "", "met": None},
                 {"measure": f"peak RSS ratio {args.large} / {args.small} texts{what}", "value": ratio,
                  "target": "≤ 1.2",
                  "met": ratio <= 1.2}]

        if not args.no_ray:
            from lmaudit.data.loaders import TextSet
            from lmaudit.models.loading import load_model
            from lmaudit.probes.ar import probe_ar
            from lmaudit.probes.backends import RayBackend, use_backend

            loaded = load_model(tmp / "model", kind="ar")
            subset = TextSet([r for r in TextSet.from_texts(
                [f"{t} ({i})" for i, t in enumerate(texts.texts * 2)][: args.ray_texts]).records])

            def timed() -> float:
                probe_ar(loaded, subset, shard_size=64)  # warm (actors load the model)
                t0 = time.perf_counter()
                probe_ar(loaded, subset, shard_size=64)
                return time.perf_counter() - t0

            t_local = timed()
            t0 = time.perf_counter()
            with use_backend(RayBackend(workers=2, num_cpus=2)):
                t_start = time.perf_counter() - t0
                t_ray = timed()
            local_tps, ray_tps = len(subset) / t_local, len(subset) / t_ray
            print(f"AR probe of {len(subset)} texts: local {local_tps:.0f} texts/s ({torch.get_num_threads()} "
                  f"threads), Ray 2 workers {ray_tps:.0f} texts/s; ratio {ray_tps / local_tps:.2f} "
                  f"(Ray start-up {t_start:.1f} s, not included)")
            rows.append({"measure": "Ray (2 local workers) ÷ local throughput, AR probe", "value": ray_tps / local_tps,
                         "target": "reported (< 1 on 2 CPUs)", "met": None})
    write_rows(args.json, "bench_scale", rows)


if __name__ == "__main__":
    main()
