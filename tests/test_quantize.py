"""Quantising a model to GGUF Q8_0 / Q4_0 and reading it back (lmaudit.quantize, ``lmaudit quantize``)."""

import json

import numpy as np
import pytest
import torch
from gguf import GGUFReader
from gguf.quants import dequantize

import lmaudit
from helpers import TEST_PRESET_ARGS, assert_ok, assert_user_error
from helpers import lmaudit as cli
from lmaudit.errors import LmauditError, SettingError
from lmaudit.models.build import TRAINING_FILE, save_model
from lmaudit.models.loading import load_model, merge_adapters
from lmaudit.models.lora import LoraSpec, finish_training, start_training
from lmaudit.models.presets import Preset, build_ar_model

TEXT = "the model data train token value array matrix of the function"
LEVELS = {"q8_0": 127, "q4_0": 8}  # a block's largest magnitude is LEVELS × its scale


def weights(folder) -> dict[str, torch.Tensor]:
    return {n: p.detach().cpu().clone() for n, p in load_model(folder).model.named_parameters()}


def logits(folder) -> torch.Tensor:
    handle = load_model(folder)
    ids = torch.tensor([handle.tokenizer(TEXT)["input_ids"]], device=handle.model.device)
    with torch.no_grad():
        return handle.model(ids).logits.cpu()


def rel(new: torch.Tensor, old: torch.Tensor) -> float:
    return float((new.double() - old.double()).norm() / old.double().norm())


def on_the_grid(w: torch.Tensor, levels: int) -> bool:
    """Each block of 32 values of a row is integer multiples of one scale d, with |codes| ≤ levels, d = max|x|/levels
    (what a block-quantised matrix is, and a float matrix is not)."""
    blocks = w.double().reshape(-1, 32)
    scale = blocks.abs().max(dim=1, keepdim=True).values / levels
    used = scale.squeeze(1) > 0  # an all-zero block (the padding token's embedding)
    codes = blocks[used] / scale[used]
    return bool((codes - codes.round()).abs().max() < 1e-3 and codes.abs().max() <= levels + 1e-6)


@pytest.fixture(scope="module")
def quantised(tmp_path_factory, tiny_model_dir):
    """The tiny model quantised to each scheme: {scheme: folder}."""
    root = tmp_path_factory.mktemp("quantised")
    return {s: lmaudit.quantize(tiny_model_dir, root / s, scheme=s) for s in ("q8_0", "q4_0")}


def test_each_matrix_lies_on_its_schemes_grid_with_bounded_error_and_norms_are_unchanged(quantised, tiny_model_dir):
    original = weights(tiny_model_dir)
    q8, q4 = weights(quantised["q8_0"]), weights(quantised["q4_0"])
    matrices = [n for n, p in original.items() if p.dim() == 2]
    assert len(matrices) == 15 and "model.embed_tokens.weight" in matrices  # embedding + 7 linear layers × 2
    for name in matrices:
        e8, e4 = rel(q8[name], original[name]), rel(q4[name], original[name])
        assert 0 < e8 < 0.01 and e8 < e4 < 0.15, (name, e8, e4)
        assert on_the_grid(q8[name], LEVELS["q8_0"]) and on_the_grid(q4[name], LEVELS["q4_0"]), name
        assert not on_the_grid(original[name], LEVELS["q4_0"])  # the check tells a float matrix apart
    for name in set(original) - set(matrices):  # norm weights: float32, bit for bit
        assert torch.equal(q8[name], original[name]) and torch.equal(q4[name], original[name]), name
    record = json.loads((quantised["q4_0"] / TRAINING_FILE).read_text())
    assert sorted(record["quantized"]) == sorted(matrices) and sorted(record["float32"]) == sorted(set(original)
                                                                                                    - set(matrices))
    for name, error in record["relative_error"].items():  # the record says what the weights show
        assert error == pytest.approx(rel(q4[name], original[name]), rel=1e-4)
    assert record["relative_error_max"] == max(record["relative_error"].values())
    assert record["relative_error_mean"] == pytest.approx(np.mean(list(record["relative_error"].values())))


def test_the_gguf_file_holds_the_tensors_in_their_types_and_the_model_is_read_back_from_it(quantised):
    for scheme, folder in quantised.items():
        reader = GGUFReader(folder / f"model.{scheme}.gguf")
        types = {t.name: t.tensor_type.name for t in reader.tensors}
        record = json.loads((folder / TRAINING_FILE).read_text())
        assert {n for n, t in types.items() if t == scheme.upper()} == set(record["quantized"])
        assert {n for n, t in types.items() if t == "F32"} == set(record["float32"])
        assert "lm_head.weight" not in types and record["tied"] == {"lm_head.weight": "model.embed_tokens.weight"}
        loaded = weights(folder)
        for t in reader.tensors:  # the saved model holds exactly the file's dequantised values
            assert np.array_equal(loaded[t.name].numpy(), dequantize(t.data, t.tensor_type)), t.name


def test_the_quantised_folder_loads_like_any_model_with_tied_head_and_close_logits(quantised, tiny_model_dir):
    source = load_model(tiny_model_dir)
    handle = load_model(quantised["q8_0"])
    assert handle.kind == "ar" and handle.fingerprint != source.fingerprint
    assert handle.model.lm_head.weight is handle.model.model.embed_tokens.weight  # still tied
    record = json.loads((quantised["q8_0"] / TRAINING_FILE).read_text())
    assert record["stage"] == "quantize" and record["scheme"] == "q8_0"
    assert record["source"] == str(tiny_model_dir) and record["source_fingerprint"] == source.fingerprint
    base = logits(tiny_model_dir)
    d8, d4 = rel(logits(quantised["q8_0"]), base), rel(logits(quantised["q4_0"]), base)
    assert d8 < 0.02 < d4  # Q8_0 logits within 2% (Frobenius, relative) of the float model's; Q4_0 further off


def test_a_matrix_whose_rows_are_not_a_multiple_of_32_is_refused_naming_it(tmp_path, tokenizer):
    odd = tmp_path / "odd"
    build_ar_model(Preset("odd", **{**TEST_PRESET_ARGS, "intermediate": 40}), tokenizer).save_pretrained(odd)
    tokenizer.save_pretrained(odd)
    with pytest.raises(LmauditError, match=r"model\.layers\.0\.mlp\.down_proj\.weight of shape \[32, 40\] cannot "
                                           r"take Q4_0"):
        lmaudit.quantize(odd, tmp_path / "out", scheme="q4_0")
    assert not (tmp_path / "out").exists()


def test_a_bad_scheme_or_output_folder_is_refused_before_any_work(tmp_path, tiny_model_dir):
    with pytest.raises(SettingError, match="scheme must be q8_0 or q4_0, got 'q5_k'"):
        lmaudit.quantize(tiny_model_dir, tmp_path / "out", scheme="q5_k")
    assert_user_error(cli("quantize", "--model", tiny_model_dir, "--scheme", "q3", "--out", tmp_path / "out"),
                      "--scheme must be q8_0 or q4_0")
    assert not (tmp_path / "out").exists()
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("not lmaudit's")
    with pytest.raises(LmauditError, match="files lmaudit did not write"):
        lmaudit.quantize(tiny_model_dir, tmp_path / "mine", scheme="q8_0")
    with pytest.raises(LmauditError, match="out '.*' is model"):
        lmaudit.quantize(tiny_model_dir, tiny_model_dir, scheme="q8_0")


def test_the_command_quantises_and_says_what_and_where(tmp_path, tiny_model_dir):
    out = tmp_path / "q"
    result = cli("quantize", "--model", tiny_model_dir, "--scheme", "Q8_0", "--out", out)
    assert_ok(result)
    text = " ".join(result.output.split())
    assert "quantised 15 tensors" in text and "to Q8_0: model.embed_tokens.weight, model.layers.N.mlp.down_proj" \
        in text and "kept 5 in float32" in text
    assert "relative weight error" in text and f"saved to {out}" in text
    assert load_model(out).kind == "ar"
    assert_ok(cli("quantize", "--model", tiny_model_dir, "--out", out))  # its own model folder is replaced
    assert json.loads((out / TRAINING_FILE).read_text())["scheme"] == "q4_0"  # the default


def test_an_adapter_is_merged_into_its_base_before_quantising(tmp_path, tiny_model_dir):
    loaded = load_model(tiny_model_dir)
    model, peft_model = start_training(loaded.model, LoraSpec(4), seed=1)
    with torch.no_grad():
        for name, p in peft_model.named_parameters():
            if "lora_B" in name:
                p.copy_(0.2 * torch.randn(p.shape, generator=torch.Generator().manual_seed(3)))  # any device
    weights_, extra = finish_training(model, peft_model, LoraSpec(4), tiny_model_dir, loaded.fingerprint)
    save_model(weights_, loaded.tokenizer, tmp_path / "adapter", {"stage": "test", "kind": "ar", **extra})
    out = lmaudit.quantize(tmp_path / "adapter", tmp_path / "q", scheme="q8_0")
    merged = dict(merge_adapters(load_model(tmp_path / "adapter").model).named_parameters())
    name = "model.layers.0.self_attn.q_proj.weight"
    got, base = weights(out)[name], weights(tiny_model_dir)[name]
    assert rel(got, merged[name]) < 0.01 < rel(got, base)  # the merged matrix was quantised, not the base's


def test_a_loaded_diffusion_lm_is_quantised_stays_one_and_is_left_unchanged(tmp_path, tiny_dlm_dir):
    given = load_model(tiny_dlm_dir)
    before = {n: p.detach().clone() for n, p in given.model.named_parameters()}
    out = lmaudit.quantize(given, tmp_path / "q", scheme="q8_0")
    assert all(torch.equal(p, before[n]) for n, p in given.model.named_parameters())  # the caller's model
    handle = load_model(out)
    assert handle.kind == "dlm" and handle.model.cls.predictions.decoder.weight is \
        handle.model.bert.embeddings.word_embeddings.weight
    record = json.loads((out / TRAINING_FILE).read_text())
    assert record["kind"] == "dlm" and record["relative_error_max"] < 0.01
    assert any(n.endswith("LayerNorm.bias") for n in record["float32"])  # biases stay float32
