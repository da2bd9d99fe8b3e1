"""How well a diffusion LM fills masks: masked-token accuracy and NLL at fixed mask ratios on held-out text.

Per text and ratio r, round(r × L) of its L scorable tokens (at least one) are drawn without replacement (seeded by
the text's content, the ratio and the seed) and replaced by the mask token; one forward reads the model's
distribution at each masked position. Accuracy: the share of masked tokens whose most likely token is the text's;
NLL: their mean negative log-likelihood (nats), both over every masked token of the set.
"""

from __future__ import annotations

import numpy as np
import torch

from lmaudit.data.loaders import TextSet
from lmaudit.models.handle import ModelHandle
from lmaudit.probes.tokenize import model_batches, tokenize_records
from lmaudit.progress import progress

RATIOS = (0.25, 0.5, 0.75)


@torch.inference_mode()
def mask_filling(handle: ModelHandle, textset: TextSet, ratios=RATIOS, *, seed: int = 0,
                 max_length: int | None = None, batch_size: int | None = None,
                 description: str | None = None) -> dict[str, dict]:
    """{ratio as written ("0.25"): {accuracy, nll, tokens}} of the DLM of ``handle`` on ``textset``; texts are batched
    by length (``batch_size``, else the model's token budget), padding hidden from attention."""
    adapter, tokenizer = handle.adapter, handle.tokenizer
    tok = tokenize_records(tokenizer, textset, max_length=max_length or adapter.context_length, first_scorable=0)
    lengths = np.array([len(ids) for ids in tok.ids])
    out = {}
    with progress(description, total=len(ratios) * len(textset)) as bar:
        for ratio in ratios:
            masked = []
            for ids, scored, key in zip(tok.ids, tok.scored, tok.sample_keys):
                positions = np.flatnonzero(scored)
                rng = np.random.default_rng([int(key), int(round(ratio * 1000)), seed])
                chosen = rng.choice(positions, size=max(1, round(ratio * len(positions))), replace=False)
                masked.append(np.isin(np.arange(len(ids)), chosen))
            correct, nll, count = 0, 0.0, 0
            for index in model_batches(lengths, adapter, batch_size):
                ids, attn, sel = adapter.pad([tok.ids[i] for i in index], [masked[i] for i in index])
                clean = torch.from_numpy(ids).to(adapter.device)
                sel_t = torch.from_numpy(sel).to(adapter.device)
                noisy = clean.masked_fill(sel_t, adapter.mask_token_id)
                picked, head = adapter.output_rows(noisy, torch.from_numpy(attn).to(adapter.device),
                                                   lambda x, s=sel_t: x[s])  # the masked rows, row-major
                logp = torch.log_softmax((picked if head is None else head(picked)).float(), dim=-1)
                truth = clean[sel_t]
                correct += int((logp.argmax(dim=-1) == truth).sum())
                nll -= float(logp.gather(1, truth[:, None]).double().sum())
                count += len(truth)
                bar.advance(len(index))
            out[f"{ratio:g}"] = {"accuracy": correct / count, "nll": nll / count, "tokens": count}
    return out
