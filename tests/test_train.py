import numpy as np
import pytest
import torch

from helpers import make_texts
from lmaudit.data.loaders import Record, TextSet
from lmaudit.errors import LmauditError
from lmaudit.models.presets import Preset, build_ar_model
from lmaudit.models.train import TrainConfig, ar_objective, dft_examples, ift_examples, train


def test_dft_packs_every_token_into_fixed_blocks(tokenizer):
    texts = TextSet.from_texts(make_texts(30, seed=0))
    blocks = dft_examples(tokenizer, texts, block=16)
    n_tokens = sum(len(ids) + 1 for ids in tokenizer(texts.texts)["input_ids"])  # + EOS per text
    assert sum(len(b) for b, _ in blocks) == n_tokens
    assert all(len(b) == 16 for b, _ in blocks[:-1]) and all(m.all() for _, m in blocks)


def test_ift_trains_response_tokens_only(tokenizer):
    data = TextSet([Record("a", target=" the answer value", context="Question: which index?")])
    (ids, mask), = ift_examples(tokenizer, data, max_length=128)
    n_prompt = len(tokenizer("Question: which index?")["input_ids"])
    assert not mask[:n_prompt].any() and mask[n_prompt:].all()
    assert ids[-1] == tokenizer.eos_token_id
    with pytest.raises(LmauditError, match="IFT needs 'prompt' and 'response'"):
        ift_examples(tokenizer, TextSet.from_texts(["plain text only"]), max_length=128)


def test_ar_objective_equals_transformers_loss(tiny_model, tokenizer):
    rows = tokenizer(make_texts(2, seed=1, min_words=10, max_words=10))["input_ids"]
    ids = torch.tensor([r[: min(map(len, rows))] for r in rows])
    mask = torch.ones_like(ids, dtype=torch.bool)
    with torch.no_grad():
        ours = ar_objective(tiny_model, ids, torch.ones_like(ids), mask, None)
        theirs = tiny_model(input_ids=ids, labels=ids).loss
    torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=1e-5)


def test_training_lowers_loss_and_is_deterministic(tokenizer):
    preset = Preset("t", hidden=32, layers=1, heads=2, intermediate=64, context=128, pretrain_tokens=0, block=32,
                    batch=8, lr=3e-3)
    examples = dft_examples(tokenizer, TextSet.from_texts(make_texts(20, seed=2)), block=32)
    runs = []
    for _ in range(2):
        model = build_ar_model(preset, tokenizer, seed=1)
        runs.append(train(model, examples, TrainConfig(epochs=8, batch_size=8, lr=3e-3, warmup_steps=2, seed=4)))
    assert runs[0] == runs[1]
    assert np.mean(runs[0][-3:]) < np.mean(runs[0][:3]) - 1.0


def test_a_trained_model_is_no_longer_reloadable_from_its_folder(tiny_model_dir, tokenizer):
    """After training in place, the weights differ from the folder: a Ray worker must not reload that folder."""
    from lmaudit.models.loading import load_model

    loaded = load_model(tiny_model_dir, kind="ar")
    assert loaded.model.lmaudit_load_spec["path"] == str(tiny_model_dir)
    examples = dft_examples(tokenizer, TextSet.from_texts(make_texts(4, seed=3)), block=32)
    train(loaded.model, examples, TrainConfig(epochs=1, batch_size=4, lr=1e-3, warmup_steps=1, seed=0))
    assert getattr(loaded.model, "lmaudit_load_spec", None) is None


def test_fine_tuning_defaults_follow_what_is_trained(tiny_model):
    from lmaudit.models.build import training_defaults
    from lmaudit.models.lora import LoraSpec

    assert training_defaults(tiny_model, None) == ("tiny preset", {"lr": 1e-3, "block": 64, "batch_size": 16})
    pretrained = type("M", (), {"config": type("C", (), {})()})()  # a config without lmaudit_preset
    assert training_defaults(pretrained, None)[1]["lr"] == 3e-5
    assert training_defaults(pretrained, LoraSpec(4)) == ("pretrained, LoRA", {"lr": 5e-4, "block": 128,
                                                                               "batch_size": 8})


def test_a_loss_that_ends_far_above_its_start_is_a_warning():
    from lmaudit.models.build import warn_if_diverged

    assert not warn_if_diverged([4.0] * 20 + [3.0] * 20, 1e-3)
    with pytest.warns(UserWarning,
                      match=r"diverged: the training loss went from 4.000 to 9.000 \(learning rate 0.01\)"):
        assert warn_if_diverged([4.0] * 20 + [9.0] * 20, 1e-2)
    with pytest.warns(UserWarning, match="diverged"):
        assert warn_if_diverged([4.0] * 20 + [float("nan")] * 20, 1e-2)


def test_a_training_stopped_part_way_resumes_where_it_stopped(tokenizer, monkeypatch):
    """Inside a cached build a training saves its state every CHECKPOINT_EVERY_S seconds (here after every step); a
    build stopped at step 5 and started again runs only the steps after its last save, and ends with the losses and
    weights of a run never stopped; the state is gone once the folder is in place, and a damaged one is not read."""
    import lmaudit.models.train as tr
    from lmaudit.cache import TRAINING_STATE, cached_build

    preset = Preset("t", hidden=32, layers=1, heads=2, intermediate=64, context=128, pretrain_tokens=0, block=32,
                    batch=8, lr=3e-3)
    examples = dft_examples(tokenizer, TextSet.from_texts(make_texts(20, seed=2)), block=32)
    cfg = TrainConfig(epochs=4, batch_size=8, lr=3e-3, warmup_steps=2, seed=4)
    never = build_ar_model(preset, tokenizer, seed=1)
    want = train(never, examples, cfg)
    monkeypatch.setattr(tr, "CHECKPOINT_EVERY_S", 0.0)
    calls, got = [], {}

    def objective(stop_at):
        def run(*args):
            calls.append(1)
            if len(calls) == stop_at:
                raise KeyboardInterrupt
            return ar_objective(*args)
        return run

    def build(out, stop_at=None):
        got["state"] = TRAINING_STATE.get()
        model = build_ar_model(preset, tokenizer, seed=1)
        got["losses"], got["model"] = train(model, examples, cfg, objective=objective(stop_at)), model

    with pytest.raises(KeyboardInterrupt):
        cached_build("models", ("resume",), lambda out: build(out, stop_at=6))  # stopped in step 5
    assert (got["state"] / tr.STATE_FILE).exists()
    calls.clear()
    cached_build("models", ("resume",), build)
    assert len(calls) == len(want) - 5  # steps 0-4 were saved: only the rest ran
    assert got["losses"] == want
    for (name, a), b in zip(never.named_parameters(), got["model"].parameters()):
        assert torch.equal(a, b), name
    assert not got["state"].exists()
    (got["state"] / tr.STATE_FILE).parent.mkdir(parents=True)  # a second build of the key, killed after the first
    (got["state"] / tr.STATE_FILE).write_bytes(b"left behind")
    cached_build("models", ("resume",), lambda out: pytest.fail("built again"))
    assert not got["state"].exists()  # the model is in place: its leftover state goes

    calls.clear()
    with pytest.raises(KeyboardInterrupt):  # a state that cannot be read: said, and the training starts over
        cached_build("models", ("resume", 2), lambda out: build(out, stop_at=4))
    (got["state"] / tr.STATE_FILE).write_bytes(b"not a saved state")
    calls.clear()
    with pytest.warns(UserWarning, match="could not be read"):
        cached_build("models", ("resume", 2), build)
    assert len(calls) == len(want) and got["losses"] == want
