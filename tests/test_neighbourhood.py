"""The neighbourhood attack: neighbours and score equal a plain re-implementation from the paper's swap score; a
masked model with another tokenizer is handled (texts), an AR model or a too-short context is refused."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from helpers import make_texts
from lmaudit.data.loaders import TextSet
from lmaudit.errors import DataError, SettingError
from lmaudit.models.loading import load_model
from lmaudit.runs.mia import RunConfig, score_set

TEXTS = make_texts(5, seed=98, min_words=3, max_words=12)


def plain_neighbours(dlm, tokenizer, text: str, n: int, top: int) -> list[str]:
    """The n best single swaps of ``text``: at each non-special position, mask it, read q from ``dlm(ids).logits``
    (row i predicts token i), score the top candidates other than the original and special tokens by
    q(c) / (1 − q(x_t))."""
    ids = tokenizer(text)["input_ids"]
    special = set(tokenizer.all_special_ids)
    swaps = []
    for t, token in enumerate(ids):
        if token in special:
            continue
        masked = list(ids)
        masked[t] = tokenizer.mask_token_id
        with torch.no_grad():
            q = torch.softmax(dlm(torch.tensor([masked])).logits[0, t].float(), dim=-1)
        order = [int(c) for c in torch.argsort(q, descending=True) if int(c) != token and int(c) not in special]
        swaps += [(float(q[c] / (1 - q[token])), t, c) for c in order[:top]]
    swaps.sort(key=lambda s: -s[0])
    out = []
    for _, t, c in swaps[:n]:
        new = list(ids)
        new[t] = c
        out.append(tokenizer.decode([x for x in new if x not in special]))
    return out


def mean_loss(model, tokenizer, text: str) -> float:
    ids = torch.tensor([tokenizer(text)["input_ids"]])
    with torch.no_grad():
        return float(torch.nn.functional.cross_entropy(model(ids).logits[0, :-1].float(), ids[0, 1:]))


def test_equal_to_the_paper_with_single_swaps(tiny_model_dir, tiny_model, tiny_dlm_dir, tiny_dlm, tokenizer):
    got = score_set(load_model(tiny_model_dir), TextSet.from_texts(TEXTS), config=RunConfig(
        attacks=["neighbourhood"], params={"neighbourhood": {"model": str(tiny_dlm_dir), "n": 4, "top": 3}}))
    want = []
    for text in TEXTS:
        neighbours = plain_neighbours(tiny_dlm.model, tokenizer, text, 4, 3)
        assert len(neighbours) == 4 and text not in neighbours
        want.append(np.mean([mean_loss(tiny_model, tokenizer, x) for x in neighbours])
                    - mean_loss(tiny_model, tokenizer, text))
    np.testing.assert_allclose(got["neighbourhood"], want, rtol=1e-4, atol=1e-5)


def test_several_swaps_another_tokenizer_and_refusals(tmp_path, tiny_model_dir, tiny_dlm_dir):
    from lmaudit.models.presets import Preset, build_ar_model
    from lmaudit.models.tokenizer import train_tokenizer
    from lmaudit.probes.neighbours import NeighbourSettings, make_neighbours, neighbour_set
    from test_gradnorm import TEXTS as LONGER

    texts = TextSet.from_texts(LONGER)
    dlm = load_model(tiny_dlm_dir)
    made, owner, forwards, windowed = neighbour_set(texts, make_neighbours(dlm, texts, NeighbourSettings(n=3,
                                                                                                    fraction=0.3)))
    assert windowed == 0
    assert np.array_equal(np.bincount(owner), [3] * len(texts))
    tok = dlm.tokenizer
    for rec, i in zip(made.records, owner):
        theirs, mine = tok(rec.target)["input_ids"], tok(LONGER[i])["input_ids"]
        if len(theirs) == len(mine):  # a swap that re-tokenises alike changes round(0.3 L) tokens
            assert sum(a != b for a, b in zip(theirs, mine)) == max(1, round(0.3 * int(forwards[i])))
    other_tok = train_tokenizer(make_texts(500, seed=7), vocab_size=300)  # the target's own, another one
    folder = tmp_path / "other"
    build_ar_model(Preset("t", hidden=32, layers=1, heads=2, intermediate=64, context=128, pretrain_tokens=1,
                          block=32, batch=1, lr=1e-3), other_tok).save_pretrained(folder)
    other_tok.save_pretrained(folder)
    result = score_set(load_model(folder), TextSet.from_texts(TEXTS), config=RunConfig(
        attacks=["neighbourhood"], params={"neighbourhood": {"model": str(tiny_dlm_dir), "n": 2}}))
    assert np.isfinite(result["neighbourhood"]).all()

    def run(**params):
        return score_set(load_model(tiny_model_dir), TextSet.from_texts(TEXTS),
                         config=RunConfig(attacks=["neighbourhood"], params={"neighbourhood": params}))

    with pytest.raises(DataError, match="loads as an AR model; its neighbours need a masked model"):
        run(model=str(tiny_model_dir))
    with pytest.raises(SettingError, match=r"^neighbourhood\.n must be an integer ≥ 1, got 0"):  # declared check
        run(model=str(tiny_dlm_dir), n=0)
    long = TextSet.from_texts([" ".join(make_texts(40, seed=9))])  # beyond the masked model's 128 tokens
    assert len(dlm.tokenizer(long.texts[0])["input_ids"]) > 200
    made, _, forwards, windowed = neighbour_set(long, make_neighbours(dlm, long, NeighbourSettings(n=4)))
    assert windowed == 1 and forwards[0] < 128 and len(made) == 4
    tail = long.texts[0][-200:]
    assert all(rec.target.endswith(tail) and rec.target != long.texts[0] for rec in made.records)  # swaps up front
