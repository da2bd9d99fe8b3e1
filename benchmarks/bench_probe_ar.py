"""AR probe overhead: probe time ÷ bare ``model(input_ids)`` time on the same batches.

For the tiny and small presets (random weights: speed does not depend on training),
the same texts are tokenised and batched once; the bare pass runs the model's
forward on those padded batches, the probe pass runs ``probe_ar`` end to end
(tokenisation, forward, float32 statistics, gathering). Each is timed ``--repeats``
times and the fastest run is kept. Target: ratio ≤ 1.15.

    python benchmarks/bench_probe_ar.py [--texts 256] [--batch-size 32] [--repeats 3]
"""

from __future__ import annotations

import argparse

import numpy as np
import torch

from common import add_json_option, bench_texts, best_of, write_rows
from lmaudit.models.presets import build_ar_model, get_preset
from lmaudit.probes.ar import ARProbeConfig, probe_ar
from lmaudit.probes.tokenize import length_batches, pad_batch, tokenize_records


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--texts", type=int, default=256)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--chars", type=int, default=600, help="characters per text (≈150 tokens)")
    add_json_option(ap)
    args = ap.parse_args()
    rows = []
    torch.manual_seed(0)
    tokenizer, texts = bench_texts(args.texts, args.chars)
    print(f"{len(texts)} texts of ≤{args.chars} chars, vocab {len(tokenizer)}, batch {args.batch_size}, "
          f"best of {args.repeats}, torch threads {torch.get_num_threads()}")
    print(f"{'preset':<8}{'tokens':>9}{'bare s':>9}{'probe s':>9}{'ratio':>8}  {'probe tok/s':>11}")
    for name in ("tiny", "small"):
        model = build_ar_model(get_preset(name), tokenizer, seed=0)
        max_len = model.config.max_position_embeddings
        tok = tokenize_records(tokenizer, texts, max_length=max_len)
        lengths = np.array([len(x) for x in tok.ids])
        batches = [pad_batch(tok.ids, tok.scored, idx, tokenizer.pad_token_id)
                   for idx in length_batches(lengths, args.batch_size)]
        tensors = [(torch.from_numpy(ids), torch.from_numpy(attn)) for ids, attn, _ in batches]

        @torch.inference_mode()
        def bare() -> None:
            for ids, attn in tensors:
                model(input_ids=ids, attention_mask=attn, use_cache=False).logits

        def probe() -> None:
            probe_ar(model, tokenizer, texts, ARProbeConfig(batch_size=args.batch_size))

        bare(), probe()  # warm-up
        t_bare, t_probe = best_of(bare, args.repeats), best_of(probe, args.repeats)
        n_tok = int(lengths.sum())
        print(f"{name:<8}{n_tok:>9}{t_bare:>9.3f}{t_probe:>9.3f}{t_probe / t_bare:>8.3f}  {n_tok / t_probe:>11.0f}")
        rows.append({"measure": f"AR probe ÷ bare forward ({name})", "value": t_probe / t_bare, "target": "≤ 1.15",
                     "met": t_probe / t_bare <= 1.15})
    write_rows(args.json, "bench_probe_ar", rows)


if __name__ == "__main__":
    main()
