"""DLM masked-probe overhead and forward budget.

1. Masked-probe time ÷ bare masked forward time on the same batches, for the tiny
   and small presets and a model of SmolLM2-135M's shape (random weights; the architecture
   lmaudit's DLMs use: a Llama network with full attention and shifted logits): the same
   (sample, pattern) jobs are batched once (by the model's token budget unless ``--batch-size``); the bare pass runs the
   adapter's forward on the masked inputs, the probe pass runs ``probe_masked`` end to end (tokenisation, masks,
   forward, float32 statistics at masked positions). Best of ``--repeats``. Target: ratio ≤ 1.15.
2. Forwards per sample per model for each DLM attack, measured from the probe
   records, against the configured budget.

    python benchmarks/bench_probe_dlm.py [--texts 128] [--budget 16] [--repeats 3] [--models tiny,small,smollm2]
"""

from __future__ import annotations

import argparse

import numpy as np
import torch

from common import add_json_option, bench_dlm, bench_texts, best_of, write_rows
from lmaudit.attacks import list_attacks
from lmaudit.data.loaders import TextSet
from lmaudit.probes.masked import masked_batch, plan_jobs, probe_masked
from lmaudit.probes.masks import MaskPlan
from lmaudit.probes.tokenize import model_batches, tokenize_records


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--texts", type=int, default=128)
    ap.add_argument("--chars", type=int, default=300, help="characters per text (≈75 tokens)")
    ap.add_argument("--budget", type=int, default=16)
    ap.add_argument("--batch-size", type=int, default=None, help="masked rows per forward (default: the model's "
                                                                   "token budget)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--models", default="tiny,small,smollm2")
    ap.add_argument("--smollm2-texts", type=int, default=16, help="texts for the SmolLM2-sized model")
    add_json_option(ap)
    args = ap.parse_args()
    rows = []
    torch.manual_seed(0)
    tokenizer, texts = bench_texts(args.texts, args.chars)
    plan = MaskPlan("elbo", budget=args.budget)
    print(f"{len(texts)} texts of ≤{args.chars} chars, vocab {len(tokenizer)}, plan elbo × {args.budget}, "
          f"batch {args.batch_size or 'from the model'}, best of {args.repeats}, "
          f"torch threads {torch.get_num_threads()}")
    print(f"{'preset':<8}{'forwards':>9}{'bare s':>9}{'probe s':>9}{'ratio':>8}")
    adapter = None
    for name in args.models.split(","):
        adapter, few = bench_dlm(name, tokenizer), texts
        if name == "smollm2":
            few = TextSet(texts.records[: args.smollm2_texts], source=texts.source)
        tok = tokenize_records(tokenizer, few, max_length=adapter.config.max_position_embeddings, first_scorable=0)
        jobs = plan_jobs(tok, plan, seed=0)
        lengths = np.array([len(tok.ids[s]) for s in jobs.sample])
        batches = [(torch.from_numpy(np.where(sel, adapter.mask_token_id, ids)), torch.from_numpy(attn))
                   for ids, attn, sel in (masked_batch(tok.ids, jobs, index, adapter) for index in
                                          model_batches(lengths, adapter, args.batch_size))]

        @torch.inference_mode()
        def bare() -> None:
            for noisy, attn in batches:
                adapter(noisy, attn)

        def probe(adapter=adapter, few=few) -> None:
            probe_masked(adapter.handle(), few, plan, batch_size=args.batch_size)

        bare(), probe()  # warm-up
        t_bare, t_probe = best_of(bare, args.repeats), best_of(probe, args.repeats)
        print(f"{name:<8}{len(jobs.sample):>9}{t_bare:>9.3f}{t_probe:>9.3f}{t_probe / t_bare:>8.3f}")
        rows.append({"measure": f"DLM probe ÷ bare forward ({name})", "value": t_probe / t_bare, "target": "≤ 1.15",
                     "met": t_probe / t_bare <= 1.15})

    adapter = bench_dlm("tiny", tokenizer)
    print(f"\nforwards per sample per model (budget {args.budget})")
    print(f"{'attack':<13}{'plan':<8}{'target':>8}{'reference':>10}")
    sub = texts.__class__(texts.records[:32], source=texts.source)
    for spec in list_attacks("dlm"):
        p = spec.probe(spec.params, args.budget)
        stats = probe_masked(adapter.handle(), sub, p, reference=adapter.handle() if spec.needs_reference else None)
        ref = f"{stats.n_patterns.mean():.1f}" if spec.needs_reference else "-"
        print(f"{spec.name:<13}{p.kind:<8}{stats.n_patterns.mean():>8.1f}{ref:>10}")
    write_rows(args.json, "bench_probe_dlm", rows)


if __name__ == "__main__":
    main()
