"""LoRA / PEFT adapters: trained by finetune/unlearn/shadows --lora, loaded wherever a model folder is."""

import json
import shutil

import pandas as pd
import pytest
import torch
from safetensors.torch import load_file, save_file

from helpers import AUTO_DEVICE, TEST_PRESET_ARGS, assert_ok, assert_user_error, lmaudit, make_texts, write_jsonl
from lmaudit.data.loaders import TextSet
from lmaudit.errors import LmauditError, ModelLoadError
from lmaudit.experiments.config import BaseConfig
from lmaudit.experiments.registry import load_experiment
from lmaudit.experiments.workspace import Workspace
from lmaudit.models.build import TRAINING_FILE, save_model
from lmaudit.models.dlm import dlm_from_ar
from lmaudit.models.loading import load_model
from lmaudit.models.lora import LoraSpec, finish_training, start_training
from lmaudit.models.presets import Preset, build_ar_model
from lmaudit.models.shadows import ShadowSet
from lmaudit.models.sources import is_adapter_dir
from lmaudit.models.train import TrainConfig, dft_examples, train
from lmaudit.models.unlearn import mean_loss

MEMBERS = make_texts(24, seed=5)
NONMEMBERS = make_texts(24, seed=6)
FAST = ["--epochs", 40, "--lr", 3e-2, "--block", 32, "--batch-size", 8]
ADAPTER_FILES = {"adapter_config.json", "adapter_model.safetensors", "tokenizer.json", "tokenizer_config.json",
                 TRAINING_FILE, "lmaudit_manifest.json"}
SENTENCE = "the model data train token value array matrix"


@pytest.fixture(scope="module")
def trained(tmp_path_factory, tiny_model_dir, tiny_dlm_dir):
    """Data files and LoRA adapters (rank 4) of the tiny AR and DLM models, trained by the command line."""
    root = tmp_path_factory.mktemp("lora")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LMAUDIT_CACHE", str(root / "cache"))
        members = write_jsonl(root / "members.jsonl", MEMBERS)
        write_jsonl(root / "nonmembers.jsonl", NONMEMBERS)
        for name, base in (("ar", tiny_model_dir), ("dlm", tiny_dlm_dir)):
            assert_ok(lmaudit("finetune", "--model", base, "--data", members, "--out", root / name, "--lora", 4, *FAST))
    return root


def logits(handle, text=SENTENCE):
    ids = torch.tensor([handle.tokenizer(text)["input_ids"]], device=handle.adapter.device)
    with torch.no_grad():
        return handle.adapter(ids)  # (1, T, V), on the model's device


def record(folder):
    return json.loads((folder / TRAINING_FILE).read_text())


def test_finetune_lora_writes_an_adapter_that_lowers_the_training_loss(trained, tiny_model_dir):
    folder = trained / "ar"
    assert {p.name for p in folder.iterdir()} == ADAPTER_FILES  # no full weights, no config.json
    lora = record(folder)["lora"]
    base = load_model(tiny_model_dir)
    # 2 layers × (q_proj, v_proj) × (A 4×32 + B 32×4): only the adapter is trained
    assert lora == {"rank": 4, "alpha": 8.0, "targets": ["q_proj", "v_proj"], "merged": False,
                    "trainable_parameters": 1024, "base": str(tiny_model_dir.resolve()),
                    "base_fingerprint": base.fingerprint}
    adapter = load_model(folder)
    assert adapter.kind == "ar" and type(adapter.model).__name__ == "LlamaForCausalLM" and not adapter.model.training
    spec = adapter.model.lmaudit_load_spec  # how a Ray worker loads the same model
    assert spec["path"] == str(folder) and spec["adapter_base"] == str(tiny_model_dir.resolve())
    assert load_model(**spec).fingerprint == adapter.fingerprint
    data = TextSet.from_texts(MEMBERS)
    assert mean_loss(adapter, data, block=32) < mean_loss(base, data, block=32) - 0.1
    assert load_model(tiny_model_dir).fingerprint == base.fingerprint  # the base folder is untouched


def test_dlm_lora_finetune_targets_bert_attention_and_lowers_the_diffusion_loss(trained, tiny_dlm_dir):
    folder = trained / "dlm"
    assert record(folder)["lora"]["targets"] == ["query", "value"] and record(folder)["kind"] == "dlm"
    adapter, base = load_model(folder), load_model(tiny_dlm_dir)
    assert adapter.kind == "dlm" and type(adapter.model).__name__ == "BertForMaskedLM"
    data = TextSet.from_texts(MEMBERS)

    def loss(handle):  # the same masks for both models; averaged over 4 noise draws
        return sum(mean_loss(handle, data, block=32, seed=s) for s in range(4)) / 4

    # attention-only LoRA on a random-init BERT moves the ELBO little (≈ 0.05 here); a no-op adapter moves it 0
    assert loss(adapter) < loss(base) - 0.02


def test_reloading_an_adapter_reproduces_the_trained_model_exactly(tiny_model_dir, tmp_path):
    loaded = load_model(tiny_model_dir)
    model, peft_model = start_training(loaded.model, LoraSpec(4), seed=1)
    examples = dft_examples(loaded.tokenizer, TextSet.from_texts(MEMBERS), block=32)
    train(model, examples, TrainConfig(epochs=5, batch_size=8, lr=3e-2, warmup_steps=1, seed=1))
    weights, extra = finish_training(model, peft_model, LoraSpec(4), tiny_model_dir, loaded.fingerprint)
    save_model(weights, loaded.tokenizer, tmp_path / "a", {"stage": "test", "kind": "ar", **extra})
    in_memory = logits(loaded)  # the handle's model is the one trained, adapter layers in place
    reloaded = load_model(tmp_path / "a")
    assert torch.equal(logits(reloaded), in_memory)
    assert not torch.allclose(logits(load_model(tiny_model_dir)), in_memory, atol=1e-3)


def test_merge_writes_a_full_model_with_the_adapters_logits(trained, tiny_model_dir, tmp_path):
    out = tmp_path / "merged"
    assert_ok(lmaudit("finetune", "--model", tiny_model_dir, "--data", trained / "members.jsonl", "--out", out,
                      "--lora", 4, "--merge", *FAST))
    assert not is_adapter_dir(out) and (out / "model.safetensors").exists() and record(out)["lora"]["merged"] is True
    merged, adapter = load_model(out), load_model(trained / "ar")
    assert type(merged.model.model.layers[0].self_attn.q_proj) is torch.nn.Linear
    torch.testing.assert_close(logits(merged), logits(adapter), atol=1e-5, rtol=0)
    assert (logits(merged) - logits(load_model(tiny_model_dir))).abs().max() > 1e-2  # the adapter was merged in


def test_mia_on_an_adapter_records_adapter_and_base_and_never_reuses_the_bases_probes(trained, tiny_model_dir,
                                                                                      tmp_path):
    data = ["--members", trained / "members.jsonl", "--nonmembers", trained / "nonmembers.jsonl", "--attacks", "loss",
            "--bootstrap", 20, "--no-report"]
    assert_ok(lmaudit("mia", "--model", tiny_model_dir, "--out", tmp_path / "base", *data))
    assert_ok(lmaudit("mia", "--model", trained / "ar", "--reference", tiny_model_dir, "--out", tmp_path / "a", *data))
    res = json.loads((tmp_path / "a" / "results.json").read_text())
    base_fp = load_model(tiny_model_dir).fingerprint
    assert res["target"]["path"] == str(trained / "ar") \
        and res["target"]["fingerprint"] == load_model(trained / "ar").fingerprint
    assert res["target"]["adapter"]["base"] == {"path": str(tiny_model_dir.resolve()), "fingerprint": base_fp}
    assert res["target"]["adapter"]["r"] == 4 \
        and sorted(res["target"]["adapter"]["target_modules"]) == ["q_proj", "v_proj"]
    assert res["reference"] == {"path": str(tiny_model_dir), "fingerprint": base_fp, "kind": "ar", "dtype": "float32",
                                "device": AUTO_DEVICE}
    assert load_model(trained / "ar").facts()["adapter"] == res["target"]["adapter"]  # every job records it alike
    on_base = pd.read_parquet(tmp_path / "base" / "scores.parquet")["loss"]
    on_adapter = pd.read_parquet(tmp_path / "a" / "scores.parquet")["loss"]
    # same texts, one cache: the adapter's probe is its own (members' loss lower than under the base)
    n = len(MEMBERS)
    assert on_adapter[:n].mean() > on_base[:n].mean() + 0.05


def _copy(src, dst, **config):
    shutil.copytree(src, dst)
    (dst / "lmaudit_manifest.json").unlink()  # the copy is edited by hand below
    cfg = json.loads((dst / "adapter_config.json").read_text())
    (dst / "adapter_config.json").write_text(json.dumps({**cfg, **config}))
    return dst


def test_the_fingerprint_covers_base_adapter_weights_and_config(trained, tiny_model_dir, tmp_path):
    adapter, base = load_model(trained / "ar"), load_model(tiny_model_dir)
    assert adapter.fingerprint != base.fingerprint
    assert load_model(_copy(trained / "ar", tmp_path / "moved")).fingerprint == adapter.fingerprint
    changed = _copy(trained / "ar", tmp_path / "changed")
    tensors = load_file(changed / "adapter_model.safetensors")
    key = sorted(k for k in tensors if "lora_B" in k)[0]
    tensors[key] = tensors[key] * 1.5
    save_file(tensors, changed / "adapter_model.safetensors", metadata={"format": "pt"})
    assert load_model(changed).fingerprint not in (adapter.fingerprint, base.fingerprint)
    assert not torch.equal(logits(load_model(changed)), logits(adapter))
    alpha = _copy(trained / "ar", tmp_path / "alpha", lora_alpha=16)
    assert load_model(alpha).fingerprint != adapter.fingerprint
    other = tmp_path / "other_base"  # same architecture, other weights
    build_ar_model(Preset("test", **TEST_PRESET_ARGS), adapter.tokenizer, seed=7).save_pretrained(other)
    adapter.tokenizer.save_pretrained(other)
    with pytest.warns(UserWarning, match="trained on a base with other weights"):
        on_other = load_model(trained / "ar", adapter_base=other)
    assert on_other.fingerprint != adapter.fingerprint


def test_a_hub_name_or_missing_base_is_a_one_line_error_and_adapter_base_fixes_it(trained, tiny_model_dir, tmp_path):
    hub = _copy(trained / "ar", tmp_path / "hub", base_model_name_or_path="meta-llama/Llama-2-7b-hf")
    data = ["--members", trained / "members.jsonl", "--nonmembers", trained / "nonmembers.jsonl", "--no-report"]
    assert_user_error(lmaudit("mia", "--model", hub, "--out", tmp_path / "r", *data),
                      "'meta-llama/Llama-2-7b-hf', is not a local folder", "never downloads", "--adapter-base")
    assert not (tmp_path / "r").exists()
    unnamed = _copy(trained / "ar", tmp_path / "unnamed", base_model_name_or_path=None)
    with pytest.raises(ModelLoadError, match="does not name its base model"):
        load_model(unnamed)
    with pytest.raises(ModelLoadError, match='^adapter_base=".*nowhere" .* does not exist') as exc:
        load_model(hub, adapter_base=tmp_path / "nowhere")
    assert exc.value.on_command_line().startswith(f"--adapter-base {tmp_path / 'nowhere'} (the base of adapter")
    torch.testing.assert_close(logits(load_model(hub, adapter_base=tiny_model_dir)), logits(load_model(trained / "ar")),
                               atol=0, rtol=0)
    assert_ok(lmaudit("mia", "--model", hub, "--adapter-base", tiny_model_dir, "--out", tmp_path / "r", "--attacks",
                      "loss", "--bootstrap", 20, *data))


def test_a_base_of_another_architecture_is_an_error_naming_both(trained, tiny_model_dir, tiny_dlm_dir, tokenizer,
                                                                tmp_path):
    with pytest.raises(ModelLoadError) as exc:
        load_model(trained / "ar", adapter_base=tiny_dlm_dir)
    assert "LlamaForCausalLM" in str(exc.value) and "BertForMaskedLM" in str(exc.value)
    assert str(tiny_dlm_dir) in str(exc.value) and str(trained / "ar") in str(exc.value)
    with pytest.raises(ModelLoadError, match="BertForMaskedLM; its base .* is a LlamaForCausalLM"):
        load_model(trained / "dlm", adapter_base=tiny_model_dir)
    wider = tmp_path / "wider"  # the same architecture, another size
    build_ar_model(Preset("wide", **{**TEST_PRESET_ARGS, "hidden": 48}), tokenizer, seed=0).save_pretrained(wider)
    tokenizer.save_pretrained(wider)
    with pytest.raises(ModelLoadError,
                       match=r"does not fit .*wider.*q_proj as 32 → 32 features, the base's is 48 → 48"):
        load_model(trained / "ar", adapter_base=wider)
    as_dlm = tmp_path / "as_dlm"  # the AR network run as a diffusion model: same class and shapes, another kind
    dlm_from_ar(load_model(tiny_model_dir).model, tokenizer).save_pretrained(as_dlm)
    tokenizer.save_pretrained(as_dlm)
    with pytest.raises(ModelLoadError, match="trained on a model of kind ar; its base .* loads as kind dlm"):
        load_model(trained / "ar", adapter_base=as_dlm)


@pytest.mark.parametrize("args, needles", [
    (["--lora", 0], ["--lora must be an integer ≥ 1, got 0"]),
    (["--lora", -2], ["--lora must be an integer ≥ 1, got -2"]),
    (["--lora-alpha", 8], ["--lora-alpha applies to LoRA training only", "--lora RANK"]),
    (["--merge"], ["--merge applies to LoRA training only"]),
    (["--lora", 4, "--lora-alpha", 0], ["--lora-alpha must be a positive number, got 0.0"]),
    (["--lora", 4, "--lora-targets", "qq_proj"], ["--lora-targets qq_proj", "q_proj", "down_proj"]),
])
def test_bad_lora_options_are_one_line_errors(trained, tiny_model_dir, tmp_path, args, needles):
    result = lmaudit("finetune", "--model", tiny_model_dir, "--data", trained / "members.jsonl", "--out",
                     tmp_path / "o", *args)
    assert_user_error(result, *needles)
    assert not (tmp_path / "o").exists()


def test_unlearn_with_lora_on_an_adapter_writes_an_adapter_on_that_adapter(trained, tmp_path):
    forget = write_jsonl(tmp_path / "forget.jsonl", MEMBERS[:8])
    retain = write_jsonl(tmp_path / "retain.jsonl", MEMBERS[8:])
    out = tmp_path / "unlearned"
    assert_ok(lmaudit("unlearn", "--model", trained / "ar", "--forget", forget, "--retain", retain, "--method",
                      "gradient_ascent", "--out", out, "--lora", 4, "--epochs", 1, "--lr", 3e-2, "--block", 32,
                      "--batch-size", 8))
    rec = record(out)
    start = load_model(trained / "ar")
    assert is_adapter_dir(out) and rec["lora"]["base"] == str((trained / "ar").resolve())
    assert rec["source_fingerprint"] == rec["lora"]["base_fingerprint"] == start.fingerprint
    unlearned = load_model(out)  # its base is an adapter: loaded, merged, then this adapter applied
    assert unlearned.fingerprint != start.fingerprint
    forget_set = TextSet.from_texts(MEMBERS[:8])
    assert mean_loss(unlearned, forget_set, block=32) > mean_loss(start, forget_set, block=32)


def test_shadows_with_lora_are_adapters_of_the_base(trained, tiny_model_dir, tmp_path):
    pool = write_jsonl(tmp_path / "pool.jsonl", MEMBERS[:8] + NONMEMBERS[:8])
    assert_ok(lmaudit("shadows", "--model", tiny_model_dir, "--pool", pool, "--out", tmp_path / "s", "--k", 2,
                      "--lora", 2, "--epochs", 1, "--block", 32, "--batch-size", 8))
    manifest = json.loads((tmp_path / "s" / "shadows.json").read_text())
    assert manifest["finetune"]["lora"] == {"rank": 2, "alpha": None, "targets": None, "merge": False}
    shadows = ShadowSet.load(tmp_path / "s")
    loaded = [load_model(p) for p in shadows.paths]
    assert all(is_adapter_dir(p) and record(p)["lora"]["rank"] == 2 for p in shadows.paths)
    assert len({h.fingerprint for h in loaded} | {load_model(tiny_model_dir).fingerprint}) == 3
    assert_ok(lmaudit("mia", "--model", trained / "ar", "--shadows", tmp_path / "s",
                      "--members", trained / "members.jsonl",
                      "--nonmembers", trained / "nonmembers.jsonl", "--attacks", "lira", "--bootstrap", 20,
                      "--no-report", "--out", tmp_path / "r"))
    assert json.loads((tmp_path / "r" / "results.json").read_text())["attacks"]["lira"]["auc"] is not None


def test_an_experiment_selects_lora_by_rank(tmp_path, tiny_model_dir):
    f = tmp_path / "e.toml"
    f.write_text('name = "e"\ntype = "mia"\nlora = 4\n')
    assert load_experiment(f).lora == 4 and BaseConfig(name="x", type="mia").lora == 0
    f.write_text('name = "e"\ntype = "mia"\nlora = -1\n')
    with pytest.raises(LmauditError, match=r"e.toml: lora must be an integer ≥ 0, got -1 "
                                           r"\(hint: a LoRA rank ≥ 1, or 0 for full fine-tuning\)"):
        load_experiment(f)
    ws = Workspace.__new__(Workspace)  # the fine-tuning only: no corpus needed
    data = TextSet.from_texts(MEMBERS[:8])
    ws.cfg = BaseConfig(name="x", type="mia", lora=2, epochs=1, block=32, batch_size=8)
    adapter = ws.finetuned(tiny_model_dir, data, seed=0)
    assert is_adapter_dir(adapter) and record(adapter)["lora"]["rank"] == 2
    ws.cfg = BaseConfig(name="x", type="mia", lora=0, epochs=1, block=32, batch_size=8)
    full = ws.finetuned(tiny_model_dir, data, seed=0)
    assert full != adapter and not is_adapter_dir(full) and "lora" not in record(full)


def test_one_resolution_names_every_folder_of_an_adapter_on_an_adapter(trained, tiny_model_dir, tmp_path):
    from lmaudit.models.lora import folder_fingerprint
    from lmaudit.models.sources import model_folders, resolve_source

    outer = tmp_path / "outer"  # an adapter whose base is the trained adapter (as unlearn --lora writes it)
    forget = TextSet.from_texts(MEMBERS[:8])
    from lmaudit.models.unlearn import unlearn
    unlearn(trained / "ar", forget, TextSet.from_texts(MEMBERS[8:]), outer, method="gradient_ascent", epochs=1,
            lr=3e-2, block=32, batch_size=8, lora=LoraSpec(4))
    source = resolve_source(outer)
    assert source.folder.resolve() == tiny_model_dir.resolve()
    assert [p.resolve() for p in source.adapters] == [(trained / "ar").resolve(), outer.resolve()]
    assert [p.resolve() for p in model_folders(outer)] == [p.resolve() for p in source.folders()]
    handle = load_model(outer)
    assert handle.path == str(outer) and folder_fingerprint(outer) == handle.fingerprint
    assert handle.model.lmaudit_adapter["base"]["path"] == str((trained / "ar").resolve())


def test_adapters_whose_bases_form_a_loop_are_one_line_errors(trained, tmp_path):
    from lmaudit.models.sources import model_folders

    a, b = tmp_path / "a", tmp_path / "b"
    _copy(trained / "ar", a, base_model_name_or_path=str(b))
    _copy(trained / "ar", b, base_model_name_or_path=str(a))
    with pytest.raises(ModelLoadError, match=r"its bases form a loop \(.*a → .*b → .*a\)"):
        load_model(a)
    assert [p.name for p in model_folders(a)] == ["a", "b"]  # what a command checks its --out against


def test_an_adapter_missing_a_declared_weight_is_refused(trained, tmp_path):
    """peft only warns where an adapter's file lacks a LoRA matrix its config declares (that matrix would stay at its
    initial value, a partly untrained adapter): lmaudit refuses it, naming the adapter."""
    cut = _copy(trained / "ar", tmp_path / "cut")
    tensors = load_file(cut / "adapter_model.safetensors")
    module = sorted(k for k in tensors if "lora_B" in k)[0].split(".lora_B")[0]  # both matrices of one module
    save_file({k: v for k, v in tensors.items() if not k.startswith(module + ".")}, cut / "adapter_model.safetensors",
              metadata={"format": "pt"})
    with pytest.raises(ModelLoadError, match="lacks weights its adapter_config.json declares"):
        load_model(cut)
    assert_user_error(lmaudit("mia", "--model", cut, "--members", trained / "members.jsonl",
                              "--nonmembers", trained / "nonmembers.jsonl", "--attacks", "loss",
                              "--out", tmp_path / "run"), "lacks weights")


def test_a_training_record_from_before_tokenizers_were_fingerprinted_matches_its_base(trained, tiny_model_dir,
                                                                                      tmp_path, recwarn):
    """A record whose base fingerprint is the weights-and-config one (older lmaudit) is the same base: no warning."""
    from lmaudit.models.fingerprint import model_dir_fingerprint

    old = _copy(trained / "ar", tmp_path / "old")
    rec = record(old)
    rec["lora"]["base_fingerprint"] = model_dir_fingerprint(tiny_model_dir, tokenizer=False)
    assert rec["lora"]["base_fingerprint"] != model_dir_fingerprint(tiny_model_dir)
    (old / TRAINING_FILE).write_text(json.dumps(rec))
    load_model(old)
    assert not [w for w in recwarn if "other weights" in str(w.message)]
    rec["lora"]["base_fingerprint"] = "0" * 32  # a base that really differs still warns
    (old / TRAINING_FILE).write_text(json.dumps(rec))
    with pytest.warns(UserWarning, match="trained on a base with other weights"):
        load_model(old)
