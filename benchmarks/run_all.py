"""Every benchmark of the project, one after the other, and one table of what they measured.

Each benchmark runs in its own process (so memory and threads do not leak between
them) with ``--json``; the rows they write are gathered into one table, printed and
saved to ``--out`` (Markdown). Benchmarks run serially: timings on a shared machine
mean little.

    python benchmarks/run_all.py [--out benchmarks/results.md] [--quick]

``--quick`` shrinks every benchmark (fewer texts, trajectories and repeats) to check
that the suite runs; its figures are not the specified ones.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

HERE = Path(__file__).resolve().parent

SUITE = [
    ("bench_probe_ar.py", ["--smollm2-batch-tokens", "512,2048"],
     ["--texts", "32", "--repeats", "1", "--smollm2-texts", "8", "--smollm2-batch-tokens", "512"]),
    ("bench_probe_dlm.py", [], ["--texts", "16", "--repeats", "1", "--smollm2-texts", "2"]),
    ("bench_extraction.py", ["--trajectories", "512", "--repeats", "1", "--no-warmup"],
     ["--trajectories", "16", "--repeats", "1", "--no-warmup"]),
    ("bench_extraction.py", ["--model", "smollm2", "--trajectories", "64", "--steps", "8", "--repeats", "1",
                             "--no-warmup"],
     ["--model", "smollm2", "--trajectories", "4", "--steps", "2", "--repeats", "1", "--no-warmup"]),
    ("bench_mia_mimir.py", ["--texts", "100", "--pairs", "3"], ["--texts", "10", "--pairs", "1"]),
    ("bench_bf16.py", [], ["--texts", "8", "--repeats", "1"]),
    ("bench_lora_train.py", [], ["--steps", "1"]),
    ("bench_smi.py", [], ["--n", "300", "--d", "32", "--bootstrap", "20", "--repeats", "1"]),
    ("bench_blind.py", [], ["--seeds", "1", "--time-texts", "400", "--repeats", "1"]),
    ("bench_scale.py", [], ["--small", "200", "--large", "2000", "--ray-texts", "64"]),
    ("bench_scale.py", ["--no-ray", "--no-blind"], ["--small", "200", "--large", "2000", "--no-ray", "--no-blind"]),
    ("bench_fixed_cost.py", [], ["--n", "400", "--repeats", "1"]),
    ("bench_ray_overhead.py", [], ["--texts", "8", "--shard-size", "4", "--chars", "200"]),
    ("bench_peer_attacks.py", [], ["--texts", "4", "--chars", "200"]),
    ("bench_dlm_memory.py", [], ["--texts", "4", "--batch-size", "4"]),
    ("bench_batch_layout.py", [], ["--texts", "20"]),
    ("bench_attack_cost.py", [], ["--texts", "6", "--pairs", "1", "--neighbours", "2"]),
    ("bench_gradnorm.py", [], ["--texts", "2", "--repeats", "1", "--float64", "1"]),
    ("bench_neighbourhood.py", [], ["--texts", "2", "--n", "2", "--repeats", "1"]),
    ("bench_recall.py", [], ["--texts", "4", "--shots", "1,2", "--repeats", "1"]),
    ("bench_gpu.py", [], ["--model", "tiny", "--texts", "16", "--repeats", "1"]),
    ("bench_train_steps.py", [], ["--steps", "4", "--repeats", "1"]),
]
# needs a MIMIR checkout (--mimir PATH): run only when one is given
MIMIR = ("bench_mimir_attacks.py", ["--texts", "12", "--neighbours", "10", "--shots", "1,8"],
         ["--texts", "4", "--neighbours", "2", "--shots", "1,2"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=HERE / "results.md")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--only", default=None, help="comma-separated script names to run")
    ap.add_argument("--mimir", default=None, help="a MIMIR checkout: also run bench_mimir_attacks against it")
    args = ap.parse_args()
    only = set(args.only.split(",")) if args.only else None
    rows, lines = [], []
    with tempfile.TemporaryDirectory() as tmp:
        suite = SUITE + ([(MIMIR[0], [*MIMIR[1], "--mimir", args.mimir], [*MIMIR[2], "--mimir", args.mimir])]
                         if args.mimir else [])
        for script, full, quick in suite:
            if only and script not in only and script.removesuffix(".py") not in only:
                continue
            out = Path(tmp) / f"{script}.json"
            cmd = [sys.executable, str(HERE / script), *(quick if args.quick else full), "--json", str(out)]
            print(f"$ python benchmarks/{script} {' '.join(cmd[2:-2])}", flush=True)
            t0 = time.perf_counter()
            proc = subprocess.run(cmd, cwd=HERE, text=True, capture_output=True)
            print(proc.stdout, end="", flush=True)
            if proc.returncode != 0:
                print(proc.stderr[-3000:], file=sys.stderr)
                rows.append({"benchmark": script, "measure": "FAILED", "value": float("nan"), "target": "",
                             "met": False})
                continue
            lines.append(f"- `python benchmarks/{script} {' '.join(cmd[2:-2])}` ({time.perf_counter() - t0:.0f} s)")
            rows += json.loads(out.read_text())

    table = ["| benchmark | measure | value | target | met |", "|---|---|---:|---|---|"]
    for r in rows:
        met = {True: "yes", False: "**no**", None: ""}[r.get("met")]
        v = r["value"]
        value = f"{v:.3f}" if v == 0 or abs(v) >= 0.01 or v != v else f"{v:.2e}"  # small differences stay visible
        table.append(f"| {r['benchmark']} | {r['measure']} | {value} | {r.get('target', '')} | {met} |")
    print("\n" + "\n".join(table))
    stamp = datetime.now(UTC).isoformat(timespec="seconds")
    args.out.write_text(f"# Benchmarks ({'quick' if args.quick else 'full'} run, {stamp})\n\n"
                        "Measured in one run of `python benchmarks/run_all.py"
                        f"{' --quick' if args.quick else ''}`, one benchmark at a time:\n\n"
                        + "\n".join(lines) + "\n\n" + "\n".join(table) + "\n")
    print(f"\nwritten: {args.out}")


if __name__ == "__main__":
    main()
