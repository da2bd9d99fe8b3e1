"""Training loop overhead: ``lmaudit.models.train.train`` ÷ a bare loop over the same batches, in steps/s.

A model of the ``tiny`` preset (random weights; an AR model and the DLM lmaudit trains) is
trained for ``--steps`` steps of ``--batch-size`` blocks of ``--block`` tokens, twice from the
same weights:

- ``train``: :func:`~lmaudit.models.train.train` end to end (batches drawn and collated each
  step, losses read back, progress);
- ``bare``: the same batches, collated and put on the device beforehand, then forward,
  backward, clipping and the optimiser step, nothing read back.

The ratio train ÷ bare is what the loop adds to the arithmetic; on a GPU every wait for the
device is in it (a loss read back each step, a copy from pageable memory, a gather of a count
computed on the device). Each is timed ``--repeats`` times, the two interleaved, and the fastest run is kept.

    python benchmarks/bench_train_steps.py [--steps 60] [--batch-size 8] [--block 128] [--device auto]
"""

from __future__ import annotations

import argparse
import copy
import math

import numpy as np
import torch

from common import add_json_option, bench_texts, best_of, write_rows
from lmaudit.models.adapters import adapter_for
from lmaudit.models.dlm import build_dlm_model, diffusion_objective
from lmaudit.models.presets import build_ar_model, get_preset
from lmaudit.models.train import TrainConfig, ar_objective, collate, dft_examples, make_optimizer, train


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _time_pair(model, examples, config: TrainConfig, objective, pad_id: int, repeats: int, device: torch.device):
    """(train seconds, bare seconds, steps): both from a copy of ``model``, the fastest of ``repeats``."""
    total = max(1, round(config.epochs * math.ceil(len(examples) / config.batch_size)))
    rng = np.random.default_rng(config.seed)  # train()'s order: permutations of the examples, cut into batches
    order = np.concatenate([rng.permutation(len(examples)) for _ in range(total * config.batch_size
                                                                          // len(examples) + 2)])
    batches = [tuple(t.to(device) for t in collate([examples[i] for i in order[k * config.batch_size:
                                                                                (k + 1) * config.batch_size]], pad_id))
               for k in range(total)]

    def run_train() -> None:
        train(copy.deepcopy(model), examples, config, objective=objective, pad_id=pad_id, description=None)
        _sync(device)

    def run_bare() -> None:
        net = copy.deepcopy(model)
        opt, gen = make_optimizer(net, config), torch.Generator().manual_seed(config.seed)
        net.train()
        for ids, attn, mask in batches:
            loss = objective(net, ids, attn, mask, gen)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(net.parameters(), config.grad_clip)
            opt.step()
        _sync(device)

    run_train(), run_bare()  # warm-up
    best = [math.inf, math.inf]
    for _ in range(repeats):  # interleaved: on a shared machine both see the same load
        best = [min(b, best_of(fn, 1)) for b, fn in zip(best, (run_train, run_bare))]
    return best[0], best[1], total


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--block", type=int, default=128)
    ap.add_argument("--preset", default="tiny")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--device", default="auto", help="cpu, cuda or auto")
    ap.add_argument("--kinds", default="ar,dlm")
    add_json_option(ap)
    args = ap.parse_args()
    device = torch.device("cuda" if args.device == "auto" and torch.cuda.is_available() else
                          "cpu" if args.device == "auto" else args.device)
    tokenizer, texts = bench_texts(400, 2000)
    examples = dft_examples(tokenizer, texts, block=args.block)[: args.steps * args.batch_size]
    config = TrainConfig(epochs=1.0, batch_size=args.batch_size, lr=1e-4, warmup_steps=5, seed=0)
    preset = get_preset(args.preset)
    print(f"{args.preset} preset, {len(examples)} blocks of {args.block} tokens, batch {args.batch_size}, "
          f"{device}, best of {args.repeats}, torch threads {torch.get_num_threads()}")
    print(f"{'kind':<6}{'steps':>6}{'train s':>9}{'bare s':>9}{'ratio':>8}{'train steps/s':>15}{'bare steps/s':>14}")
    rows = []
    for kind in args.kinds.split(","):
        if kind == "ar":
            model, objective = build_ar_model(preset, tokenizer, seed=0), ar_objective
        else:
            model = build_dlm_model(preset, tokenizer, seed=0, arch="llama", shift_logits=True)
            objective = diffusion_objective(lambda m: adapter_for(m, tokenizer))
        model = model.to(device)
        t_train, t_bare, steps = _time_pair(model, examples, config, objective, tokenizer.pad_token_id,
                                            args.repeats, device)
        print(f"{kind:<6}{steps:>6}{t_train:>9.3f}{t_bare:>9.3f}{t_train / t_bare:>8.3f}{steps / t_train:>15.1f}"
              f"{steps / t_bare:>14.1f}")
        rows += [{"measure": f"training loop ÷ bare loop, same batches ({kind}, {args.preset}, {device.type})",
                  "value": t_train / t_bare, "target": "≤ 1.05", "met": t_train / t_bare <= 1.05},
                 {"measure": f"training steps/s ({kind}, {args.preset}, batch {args.batch_size}×{args.block}, "
                             f"{device.type})", "value": steps / t_train, "target": "", "met": None}]
    write_rows(args.json, "bench_train_steps", rows)


if __name__ == "__main__":
    main()
