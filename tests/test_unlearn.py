import copy
import json
import math

import pytest
import torch

from helpers import make_texts
from lmaudit.data.loaders import TextSet
from lmaudit.errors import LmauditError
from lmaudit.models.build import TRAINING_FILE, finetune, objective_for
from lmaudit.models.fingerprint import model_dir_fingerprint
from lmaudit.models.loading import load_model
from lmaudit.models.train import collate, dft_examples
from lmaudit.models.unlearn import METHODS, draw_noise, mean_loss, npo_objective, sequence_logprob, unlearn

FORGET = TextSet.from_texts(make_texts(8, seed=10), prefix="f", source="forget")
RETAIN = TextSet.from_texts(make_texts(8, seed=11), prefix="r", source="retain")
FAST = dict(epochs=3, lr=5e-3, batch_size=8, block=32)
RISE = {"ar": 0.5, "dlm": 0.25}  # least forget-loss rise expected (seeds 0-2 gave AR ≥ 1.1, DLM ≥ 0.38)


@pytest.fixture(scope="module")
def models(tmp_path_factory, tiny_model_dir, tiny_dlm_dir):
    """Base and fine-tuned (on forget + retain) folders of each kind: {kind: (base, trained)}."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LMAUDIT_CACHE", str(tmp_path_factory.mktemp("cache")))
        both = TextSet.from_texts(FORGET.texts + RETAIN.texts, source="both")
        out = {}
        for kind, base in (("ar", tiny_model_dir), ("dlm", tiny_dlm_dir)):
            trained = finetune(base, both, tmp_path_factory.mktemp(f"ft_{kind}"), epochs=20, lr=1e-2, block=32,
                               batch_size=8)
            out[kind] = (base, trained)
        return out


def losses(path, *sets):
    loaded = load_model(path)
    return [mean_loss(loaded, s, block=32, seed=5) for s in sets]


def training_record(path):
    return json.loads((path / TRAINING_FILE).read_text())


@pytest.mark.parametrize("kind", ["ar", "dlm"])
def test_gradient_ascent_raises_forget_loss_more_than_retain_loss(models, tmp_path, kind):
    _, trained = models[kind]
    forget0, retain0 = losses(trained, FORGET, RETAIN)
    out = unlearn(trained, FORGET, RETAIN, tmp_path / "ga", method="gradient_ascent", retain_weight=1.0, **FAST)
    forget1, retain1 = losses(out, FORGET, RETAIN)
    assert forget1 > forget0 + RISE[kind]
    assert retain1 - retain0 < forget1 - forget0
    loaded = load_model(out)
    assert loaded.kind == kind and loaded.adapter.kind == kind
    rec = training_record(out)
    assert rec["method"] == "gradient_ascent" and rec["kind"] == kind
    assert rec["source_fingerprint"] == model_dir_fingerprint(trained)
    assert rec["forget_fingerprint"] == FORGET.fingerprint() and rec["retain_fingerprint"] == RETAIN.fingerprint()
    assert {"forget_loss_start", "forget_loss_end", "retain_loss_start", "retain_loss_end"} <= set(rec)
    if kind == "ar":  # a DLM's per-step losses are single noisy draws
        assert rec["forget_loss_end"] > rec["forget_loss_start"]
    if kind == "dlm":
        cfg = json.loads((out / "config.json").read_text())
        src = json.loads((trained / "config.json").read_text())
        for key in ("lmaudit_kind", "mask_token_id", "lmaudit_shift_logits", "lmaudit_bidirectional"):
            assert cfg[key] == src[key]


def test_gradient_ascent_without_retain_term_ignores_retain_set(models, tmp_path):
    _, trained = models["ar"]
    empty = TextSet([], source="empty")
    out = unlearn(trained, FORGET, empty, tmp_path / "ga0", method="gradient_ascent", retain_weight=0.0, **FAST)
    rec = training_record(out)
    assert "retain_loss_end" not in rec and rec["loss_end"] == pytest.approx(-rec["forget_loss_end"])


def batch(tokenizer, n=4, device="cpu"):
    return tuple(t.to(device) for t in collate(dft_examples(tokenizer, FORGET, block=32)[:n], tokenizer.pad_token_id))


@pytest.mark.parametrize("kind", ["ar", "dlm"])
def test_npo_term_is_two_over_beta_log_two_at_the_reference(kind, tiny_model_dir, tiny_dlm_dir):
    loaded = load_model({"ar": tiny_model_dir, "dlm": tiny_dlm_dir}[kind])  # an identity: no training needed
    model, tok = loaded.model, loaded.tokenizer
    reference = copy.deepcopy(model).requires_grad_(False)
    ids, attn, mask = batch(tok, device=loaded.device)
    for beta in (0.1, 0.5):
        loss = npo_objective(reference, kind, tok, beta=beta)(model, ids, attn, mask, torch.Generator().manual_seed(0))
        assert loss.item() == pytest.approx(2 / beta * math.log(2), rel=1e-6)
    loss.backward()  # the gradient flows into the current model only
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in model.parameters())
    assert all(p.grad is None for p in reference.parameters())
    with torch.no_grad():  # a different model gives a different value
        torch.nn.utils.vector_to_parameters(torch.nn.utils.parameters_to_vector(model.parameters()) * 1.1,
                                            model.parameters())
        moved = npo_objective(reference, kind, tok, beta=0.5)(model, ids, attn, mask, torch.Generator().manual_seed(0))
    assert abs(moved.item() - 4 * math.log(2)) > 1e-3


@pytest.mark.parametrize("kind", ["ar", "dlm"])
def test_sequence_logprob_sums_the_training_objective(kind, tiny_model_dir, tiny_dlm_dir):
    loaded = load_model({"ar": tiny_model_dir, "dlm": tiny_dlm_dir}[kind])
    model, tok = loaded.model, loaded.tokenizer
    ids, attn, mask = batch(tok, device=loaded.device)
    objective = objective_for(kind, tok)
    with torch.no_grad():
        mean = objective(model, ids, attn, mask, torch.Generator().manual_seed(3))
        noise = draw_noise(ids, mask, torch.Generator().manual_seed(3)) if kind == "dlm" else None
        logp = sequence_logprob(model, ids, attn, mask, kind=kind, tokenizer=tok, noise=noise)
    assert logp.shape == (ids.shape[0],) and (logp <= 0).all()
    count = mask[:, 1:].sum() if kind == "ar" else mask.sum()  # AR: token 0 is never predicted
    torch.testing.assert_close(-logp.sum() / count, mean, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kind", ["ar", "dlm"])
def test_npo_raises_forget_loss(models, tmp_path, kind):
    _, trained = models[kind]
    (forget0,) = losses(trained, FORGET)
    out = unlearn(trained, FORGET, RETAIN, tmp_path / "npo", method="npo", npo_beta=0.5, **FAST)
    (forget1,) = losses(out, FORGET)
    assert forget1 > forget0 + RISE[kind]
    rec = training_record(out)
    assert rec["method"] == "npo" and rec["hyperparameters"]["npo_beta"] == 0.5
    assert rec["forget_loss_start"] == pytest.approx(2 / 0.5 * math.log(2), rel=0.05)  # starts at θ = θ_ref


def test_finetune_and_retrain_lower_retain_loss(models, tmp_path):
    base, trained = models["ar"]
    out = unlearn(trained, FORGET, RETAIN, tmp_path / "ft", method="finetune", **FAST)
    assert losses(out, RETAIN)[0] < losses(trained, RETAIN)[0]
    assert training_record(out)["started_from"] == str(trained)
    out = unlearn(trained, FORGET, RETAIN, tmp_path / "rt", method="retrain", base_dir=base, epochs=12, lr=3e-3,
                  batch_size=8, block=32)
    assert losses(out, RETAIN)[0] < losses(base, RETAIN)[0] - 1.0
    rec = training_record(out)
    assert rec["method"] == "retrain" and rec["started_from"] == str(base) == rec["base"]
    assert rec["base_fingerprint"] == model_dir_fingerprint(base)
    assert rec["source_fingerprint"] == model_dir_fingerprint(trained) \
        and rec["data_fingerprint"] == RETAIN.fingerprint()


def test_retrain_keeps_dlm_kind(models, tmp_path):
    base, trained = models["dlm"]
    out = unlearn(trained, FORGET, RETAIN, tmp_path / "rt", method="retrain", base_dir=base, epochs=1, batch_size=8,
                  block=32)
    assert load_model(out).kind == "dlm" and training_record(out)["kind"] == "dlm"


def test_same_seed_gives_identical_weights(models, tmp_path):
    _, trained = models["dlm"]
    runs = [unlearn(trained, FORGET, RETAIN, tmp_path / f"run{i}", method="npo", seed=seed, epochs=1, batch_size=8,
                    block=32)
            for i, seed in enumerate((1, 1, 2))]
    states = [load_model(r).model.state_dict() for r in runs]
    assert all(torch.equal(states[0][k], states[1][k]) for k in states[0])
    assert not all(torch.equal(states[0][k], states[2][k]) for k in states[0])


@pytest.mark.parametrize("kwargs, match", [
    (dict(method="gradient_acent"), "unknown unlearning method.*did you mean 'gradient_ascent'"),
    (dict(method="forget_all"), "valid methods: retrain, gradient_ascent, npo, finetune"),
    (dict(method="retrain"), "needs base_dir"),
    (dict(method="npo", lr=0.0), "lr must be a positive number"),
    (dict(method="npo", epochs=-1), "epochs must be a positive number"),
    (dict(method="npo", npo_beta=0.0), "npo_beta must be a positive number"),
    (dict(method="npo", retain_weight=-1.0), "retain_weight must be"),
    (dict(method="npo", mode="xft"), "unknown fine-tuning mode"),
    (dict(method="npo", forget=TextSet([], source="nothing")), r"forget set \(nothing\) is empty"),
    (dict(method="gradient_ascent", retain=TextSet([], source="nothing")), r"retain set \(nothing\) is empty"),
    (dict(method="finetune", retain=TextSet([], source="nothing")), r"retain set \(nothing\) is empty"),
])
def test_invalid_arguments_raise(tiny_model_dir, tmp_path, kwargs, match):
    args = dict(forget=FORGET, retain=RETAIN) | kwargs
    with pytest.raises(LmauditError, match=match):
        unlearn(tiny_model_dir, args.pop("forget"), args.pop("retain"), tmp_path / "out", **args)
    assert not (tmp_path / "out").exists()


def test_methods_are_listed():
    assert METHODS == ("retrain", "gradient_ascent", "npo", "finetune")


def test_an_unlearning_stopped_part_way_resumes_its_retain_batches_too(models, tmp_path, monkeypatch):
    """Unlearning's objective draws retain batches of its own: a build stopped in step 3 and started again resumes
    them with the training, and ends with the weights and loss record of a run never stopped."""
    import lmaudit.models.train as tr
    import lmaudit.models.unlearn as ul
    from lmaudit.cache import cached_build

    _, trained = models["ar"]
    args = dict(method="gradient_ascent", retain_weight=1.0, **{**FAST, "epochs": 8})
    never = unlearn(trained, FORGET, RETAIN, tmp_path / "never", **args)
    monkeypatch.setattr(tr, "CHECKPOINT_EVERY_S", 0.0)
    real, calls, stop = ul._paired_objective, [], [4]

    def counted(*a, **k):
        inner = real(*a, **k)

        def objective(*batch):
            calls.append(1)
            if len(calls) == stop[0]:
                raise KeyboardInterrupt
            return inner(*batch)

        objective.save_state, objective.load_state = inner.save_state, inner.load_state
        return objective

    monkeypatch.setattr(ul, "_paired_objective", counted)
    build = lambda out: unlearn(trained, FORGET, RETAIN, out, **args)  # noqa: E731
    with pytest.raises(KeyboardInterrupt):
        cached_build("models", ("unlearn-resume",), build)
    calls.clear()
    stop[0] = None
    resumed = cached_build("models", ("unlearn-resume",), build)
    record, want = training_record(resumed), training_record(never)
    assert len(calls) == want["steps"] - 3 > 0  # steps 0-2 were saved: only the rest ran
    for key in ("loss_start", "loss_end", "forget_loss_start", "forget_loss_end", "retain_loss_start",
                "retain_loss_end"):
        assert record[key] == want[key], key
    a, b = load_model(resumed).model.state_dict(), load_model(never).model.state_dict()
    assert all(torch.equal(a[name], b[name]) for name in b)
