"""Per-token |Δ log p| of the served SmolLM2 Q4 model against lmaudit's float32 import of the same file, on the texts
of a ``bench_served_mia`` run, read from the answers that run's served audit cached (no server is started).

Each cached ``/completions`` answer echoes its prompt (the BOS token's text, then the passage): an answer is matched
to its passage by that echo and by its top-k, then read exactly as the audit read it
(:meth:`~lmaudit.models.served_model.ServedAdapter.token_stats`: every token of the passage but the first). The
local log-probabilities are those of one float32 forward of ``BOS + passage``. Texts the server split into other
tokens than the local tokenizer (its echo has another count) have no token-by-token pairing and are counted apart;
passages whose answer is not in the cache are counted as missing.

    python benchmarks/bench_served_mia.py --n 200 && python benchmarks/bench_served_tokens.py --n 200
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import torch

from common import add_json_option, write_rows
from lmaudit.data.corpus import build_corpus
from lmaudit.errors import LmauditError
from lmaudit.models.loading import load_model
from lmaudit.models.served_model import ServedAdapter
from lmaudit.utils import cache_dir

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from served_server import MODEL  # noqa: E402


class CachedAnswers:
    """The completions answers of the served cache, by the prompt they echo (stands in for an endpoint)."""

    url = "cache"

    def __init__(self, bos_text: str, top_k: int) -> None:
        self.choices: dict[str, dict] = {}
        for path in (cache_dir() / "served").glob("*/*.json"):
            answer = json.loads(path.read_text())
            choice = (answer.get("choices") or [{}])[0]
            top = (choice.get("logprobs") or {}).get("top_logprobs") or []
            # top-k, and the token itself when it is not among them
            if choice.get("text", "").startswith(bos_text) and len(top) > 1 and len(top[1] or {}) in (top_k, top_k + 1):
                self.choices.setdefault(choice["text"], choice)
        self.by_prompt: dict[str, dict] = {}

    def completion(self, prompt: str, **_) -> dict:
        found = self.by_prompt.get(prompt)
        if found is None:
            # the echo is the prompt and one generated token: the longest echo the prompt begins
            found = next((c for text, c in self.choices.items() if text.startswith(prompt)
                          and len(text) - len(prompt) <= 32), None)
            if found is None:
                raise KeyError(prompt)
            self.by_prompt[prompt] = found
        return found


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=100, help="passages per set, as bench_served_mia was run")
    ap.add_argument("--chars", type=int, default=300)
    ap.add_argument("--top-k", type=int, default=20)
    add_json_option(ap)
    args = ap.parse_args()
    corpus = build_corpus()
    texts = (corpus.passages("member", args.n, max_chars=args.chars, seed=0)
             + corpus.passages("nonmember", args.n, max_chars=args.chars, seed=0))
    local = load_model(MODEL)
    tok, bos = local.tokenizer, local.tokenizer.bos_token_id
    answers = CachedAnswers(tok.convert_ids_to_tokens(bos), args.top_k)
    served = ServedAdapter(answers, tok, bos, args.top_k, 2048, len(tok))
    gaps, missing, split = [], 0, 0
    with torch.no_grad():
        for text in texts:
            try:
                theirs = served.token_stats(text)[:, 0].astype(np.float64)
            except KeyError:
                missing += 1
                continue
            except LmauditError:  # the server's tokens are not the local ones
                split += 1
                continue
            ids = tok(text, add_special_tokens=False)["input_ids"]
            rows = torch.log_softmax(local.model(torch.tensor([[bos, *ids]])).logits[0].float(), -1)
            mine = rows[1:-1].gather(1, torch.tensor(ids[1:])[:, None])[:, 0].double().numpy()
            if len(mine) != len(theirs):
                split += 1
                continue
            gaps.append(np.abs(theirs - mine))
    if not gaps:
        raise SystemExit(f"no cached answer for these {len(texts)} passages: run bench_served_mia.py --n {args.n} "
                         "first")
    flat = np.concatenate(gaps)
    print(f"{len(texts)} passages of ≤ {args.chars} characters: {len(gaps)} paired token by token ({len(flat)} "
          f"tokens), {split} split into other tokens by the server, {missing} not in the cache")
    print(f"|Δ log p| served − local per token: mean {flat.mean():.4f}, median {np.median(flat):.4f}, 99th percentile "
          f"{np.quantile(flat, 0.99):.4f}, max {flat.max():.4f} nats")
    write_rows(args.json, "bench_served_tokens", [
        {"measure": "served − local |Δ log p| per token, mean (nats)", "value": float(flat.mean()), "target": "-",
         "met": None},
        {"measure": "served − local |Δ log p| per token, max (nats)", "value": float(flat.max()), "target": "-",
         "met": None},
        {"measure": "passages paired token by token", "value": len(gaps), "target": "-", "met": None}])


if __name__ == "__main__":
    main()
