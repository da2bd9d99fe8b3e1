"""What an imported or loaded model is, and every cache keyed by it: nothing that changes a probe's numbers passes
unseen, and a damaged, incomplete or absurd source is a one-line error naming what is wrong.

- The tokenizer's whole behaviour (merges, normalizer, pre-tokenizer, post-processor, added
  tokens; the defining files of a tokenizer without a ``tokenizers`` backend) is in the
  model's and the tokenizer's fingerprints, so a probe cache never serves one tokenizer's
  numbers for another's.
- A GGUF file whose tensors do not cover the model its metadata describes (a tensor
  missing, extra or of another shape) is refused; so is a model folder whose weights lack
  a tensor. Nothing is ever filled with random values.
- ``models import --out`` never replaces a folder that is not an earlier import of the same file.
- Temporary files and folders of killed writers are removed by the next writer into the same
  folder; a live writer's never are.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from gguf_files import write_gguf
from helpers import assert_ok, assert_user_error, lmaudit, make_texts, write_jsonl
from lmaudit.data.loaders import TextSet
from lmaudit.errors import ModelLoadError
from lmaudit.models.fingerprint import model_dir_fingerprint, tokenizer_fingerprint
from lmaudit.models.loading import load_model
from lmaudit.probes.ar import ARProbeConfig, probe_ar
from lmaudit.utils import cache_dir

TEXTS = TextSet.from_texts(make_texts(12, seed=4))
TEXT = "The model reads a batch of tensor values. The loss of the layer is the mean."


def _changed_folder(src: Path, dst: Path, change) -> Path:
    """A copy of the model folder ``src`` whose tokenizer.json ``change(spec)`` edited in place."""
    shutil.copytree(src, dst)
    spec = json.loads((dst / "tokenizer.json").read_text())
    change(spec)
    (dst / "tokenizer.json").write_text(json.dumps(spec))
    return dst


def _cut_merges(spec):
    spec["model"]["merges"] = spec["model"]["merges"][:-60]


def _lowercase(spec):
    spec["normalizer"] = {"type": "Lowercase"}


def _prefix_space(spec):
    spec["pre_tokenizer"]["add_prefix_space"] = True


def _added_word(spec):  # an existing vocabulary entry made an added token: the vocabulary is unchanged
    spec["added_tokens"].append({"id": spec["model"]["vocab"]["a"], "content": "a", "single_word": False,
                                 "lstrip": False, "rstrip": False, "normalized": False, "special": False})


def _no_bos(spec):
    spec["post_processor"] = None


CHANGES = {"merges": _cut_merges, "normalizer": _lowercase, "pre-tokenizer": _prefix_space, "added token": _added_word,
           "post-processor": _no_bos}


# 1. the tokenizer's whole behaviour is in the fingerprints and the probe cache keys

@pytest.mark.parametrize("what", CHANGES)
def test_each_change_of_the_tokenizer_changes_both_fingerprints(tiny_model_dir, tmp_path, what):
    base = load_model(tiny_model_dir)
    other = load_model(_changed_folder(tiny_model_dir, tmp_path / "m", CHANGES[what]))
    assert other.tokenizer(TEXT)["input_ids"] != base.tokenizer(TEXT)["input_ids"]  # the change matters
    assert other.tokenizer.get_vocab() == base.tokenizer.get_vocab()  # ... and keeps the vocabulary
    assert tokenizer_fingerprint(other.tokenizer) != tokenizer_fingerprint(base.tokenizer)  # before: d2cbdde1… for all
    assert other.fingerprint != base.fingerprint
    assert model_dir_fingerprint(tmp_path / "m") != model_dir_fingerprint(tiny_model_dir)


def test_the_tokenizer_fingerprint_ignores_the_padding_state_of_a_call(tokenizer):
    before = tokenizer_fingerprint(tokenizer)
    backend = tokenizer.backend_tokenizer
    backend.enable_padding(pad_id=0, pad_token="<pad>")  # what a call with padding=True, truncation=True sets
    backend.enable_truncation(max_length=2)
    try:
        assert backend.padding is not None and tokenizer_fingerprint(tokenizer) == before
    finally:
        backend.no_padding()
        backend.no_truncation()


def test_a_lowercasing_tokenizer_misses_the_probe_cache_of_the_original(tiny_model_dir, tmp_path):
    base = load_model(tiny_model_dir)
    lower = load_model(_changed_folder(tiny_model_dir, tmp_path / "lower", _lowercase))
    cfg = ARProbeConfig(batch_size=4)
    probe_ar(base, TEXTS, cfg, cache_dir=cache_dir())
    cached = probe_ar(lower, TEXTS, cfg,
                      cache_dir=cache_dir())
    fresh = probe_ar(lower, TEXTS, cfg)
    # before: the lowercasing tokenizer was served the original's probes (541 token scores where it makes 540)
    np.testing.assert_array_equal(cached.logp, fresh.logp)


def test_mia_after_a_tokenizer_edit_in_place_scores_the_new_tokenizer(tiny_model_dir, tmp_path):
    folder = shutil.copytree(tiny_model_dir, tmp_path / "model")  # no manifest: nothing refuses the edit
    members = write_jsonl(tmp_path / "m.jsonl", make_texts(20, seed=1))
    nonmembers = write_jsonl(tmp_path / "n.jsonl", make_texts(20, seed=2))

    def auc(out, *extra):
        assert_ok(lmaudit("mia", "--model", folder, "--members", members, "--nonmembers", nonmembers, "--attacks",
                          "loss", "--no-report", "--bootstrap", "10", "--out", tmp_path / out, *extra))
        return json.loads((tmp_path / out / "results.json").read_text())["attacks"]["loss"]["auc"]

    original = auc("a")
    spec = json.loads((folder / "tokenizer.json").read_text())
    _lowercase(spec)
    (folder / "tokenizer.json").write_text(json.dumps(spec))
    cached, fresh = auc("b"), auc("c", "--no-cache")
    assert fresh != original  # the edit changes the scores
    assert cached == fresh  # before: the cached run repeated the original's AUC, 0.345 where it is 0.3425


def _slow_tokenizer(folder: Path, merges: list[str]):
    """A CTRL tokenizer (pure Python, defined by vocab.json and merges.txt) over a small vocabulary."""
    from transformers import CTRLTokenizer

    folder.mkdir()
    letters = sorted(set("".join(TEXT.lower().split())))
    vocab = {t: i for i, t in enumerate(["<unk>", *letters, *(c + "</w>" for c in letters),
                                         *sorted(a + b for a, b in (m.split() for m in merges))])}
    (folder / "vocab.json").write_text(json.dumps(vocab))
    (folder / "merges.txt").write_text("#version: 0.2\n" + "\n".join(merges) + "\n")
    return CTRLTokenizer(str(folder / "vocab.json"), str(folder / "merges.txt"))


def test_a_tokenizer_without_a_backend_is_known_by_its_files(tmp_path):
    full = _slow_tokenizer(tmp_path / "a", ["t h", "th e</w>", "m o", "o d"])
    other = _slow_tokenizer(tmp_path / "b", ["t h", "th e</w>", "o d", "m o"])  # the same vocabulary, merged otherwise
    assert not hasattr(full, "backend_tokenizer")
    assert full.get_vocab() == other.get_vocab()
    assert full.tokenize("the model") != other.tokenize("the model")
    assert tokenizer_fingerprint(full) != tokenizer_fingerprint(other)
    same = _slow_tokenizer(tmp_path / "c", ["t h", "th e</w>", "m o", "o d"])
    assert tokenizer_fingerprint(same) == tokenizer_fingerprint(full)


def test_two_ggufs_differing_only_in_their_merges_are_two_models(tiny_model_dir, tmp_path):
    n_merges = len(json.loads((tiny_model_dir / "tokenizer.json").read_text())["model"]["merges"])
    full = load_model(write_gguf(tiny_model_dir, tmp_path / "full.gguf"))
    cut = load_model(write_gguf(tiny_model_dir, tmp_path / "cut.gguf", merges=n_merges - 60))
    assert cut.tokenizer(TEXT)["input_ids"] != full.tokenizer(TEXT)["input_ids"]
    # before: both 'b47a41e52d226e3b…' (the same weights and config.json, the same vocabulary)
    assert cut.fingerprint != full.fingerprint
    assert tokenizer_fingerprint(cut.tokenizer) != tokenizer_fingerprint(full.tokenizer)
    cfg = ARProbeConfig(batch_size=4)
    probe_ar(full, TEXTS, cfg, cache_dir=cache_dir())
    cached = probe_ar(cut, TEXTS, cfg, cache_dir=cache_dir())
    np.testing.assert_array_equal(cached.logp, probe_ar(cut, TEXTS, cfg).logp)


# 2. a GGUF file must hold exactly the model its metadata describes; a model folder every weight its config needs

@pytest.mark.parametrize("damage, needle", [
    (dict(drop=("blk.1.ffn_up.weight",)), "tensor blk.1.ffn_up.weight (model.layers.1.mlp.up_proj.weight) of the "
                                          "model the metadata describes is not in the file (1 missing)"),
    (dict(block_count=3), "tensor blk.2.attn_norm.weight (model.layers.2.input_layernorm.weight) of the model the "
                          "metadata describes is not in the file (9 missing)"),
    (dict(extra={"blk.2.ffn_up.weight": np.zeros((64, 32))}), "tensor blk.2.ffn_up.weight is not part of the model"),
    (dict(extra={"blk.0.ffn_up.weight": np.zeros((65, 32))}),
     "tensor blk.0.ffn_up.weight (model.layers.0.mlp.up_proj.weight) is [65, 32] where the metadata makes it [64, 32]"),
])
def test_a_gguf_whose_tensors_do_not_cover_its_model_is_refused(tiny_model_dir, tmp_path, damage, needle):
    # before: the first three imported with exit 0 (missing weights drawn at random, the extra tensor dropped), the
    # last said "You set `ignore_mismatched_sizes` to `False` ... look at the above report!"
    bad = write_gguf(tiny_model_dir, tmp_path / "bad.gguf", **damage)
    with pytest.raises(ModelLoadError, match="bad.gguf: ") as err:
        load_model(bad)
    assert needle in str(err.value)
    assert not (cache_dir() / "models").exists() or not any((cache_dir() / "models").iterdir())  # nothing kept


def test_mia_and_import_refuse_a_gguf_with_a_tensor_missing(tiny_model_dir, tmp_path):
    bad = write_gguf(tiny_model_dir, tmp_path / "bad.gguf", drop=("blk.1.ffn_up.weight",))
    members = write_jsonl(tmp_path / "m.jsonl", make_texts(8, seed=1))
    nonmembers = write_jsonl(tmp_path / "n.jsonl", make_texts(8, seed=2))
    assert_user_error(lmaudit("mia", "--model", bad, "--members", members, "--nonmembers", nonmembers,
                              "--attacks", "loss", "--no-report", "--out", tmp_path / "run"), "blk.1.ffn_up.weight")
    assert_user_error(lmaudit("models", "import", bad, "--out", tmp_path / "m"), "bad.gguf", "blk.1.ffn_up.weight")
    assert not (tmp_path / "m").exists() and not (tmp_path / "run").exists()


def test_two_imports_of_one_gguf_are_the_same_weights(tiny_model_dir, tmp_path):
    file = write_gguf(tiny_model_dir, tmp_path / "t.gguf", qtype="Q8_0")
    assert_ok(lmaudit("models", "import", file, "--out", tmp_path / "a"))
    assert_ok(lmaudit("models", "import", file, "--out", tmp_path / "b"))
    a, b = (load_file(tmp_path / d / "model.safetensors") for d in "ab")
    assert sorted(a) == sorted(b) and all(torch.equal(a[k], b[k]) for k in a)


def _folder_without(src: Path, dst: Path, tensor: str, **config) -> Path:
    """A copy of the model folder ``src`` whose weights lack ``tensor`` and whose config.json has ``config`` set."""
    shutil.copytree(src, dst)
    weights = load_file(dst / "model.safetensors")
    del weights[tensor]
    save_file(weights, dst / "model.safetensors", metadata={"format": "pt"})
    cfg = json.loads((dst / "config.json").read_text())
    (dst / "config.json").write_text(json.dumps({**cfg, **config}))
    return dst


def test_a_model_folder_whose_weights_lack_a_tensor_is_refused(tiny_model_dir, tmp_path):
    bad = _folder_without(tiny_model_dir, tmp_path / "bad", "model.layers.1.mlp.up_proj.weight")
    with pytest.raises(ModelLoadError, match=r"lack 1 tensor\(s\) config.json needs \(e.g. "
                                             r"model.layers.1.mlp.up_proj.weight\)"):
        load_model(bad)
    # an output head tied to the embeddings is never stored: its absence is fine, unless the config unties it
    assert "lm_head.weight" not in load_file(tiny_model_dir / "model.safetensors")
    untied = shutil.copytree(tiny_model_dir, tmp_path / "untied")
    cfg = json.loads((untied / "config.json").read_text())
    (untied / "config.json").write_text(json.dumps({**cfg, "tie_word_embeddings": False}))
    with pytest.raises(ModelLoadError, match=r"\(e.g. lm_head.weight\)"):
        load_model(untied)


# 3. damaged metadata: one line naming the file and the key

@pytest.mark.parametrize("damage, needle", [
    (dict(without=("merges",)), "the metadata key tokenizer.ggml.merges (needed by a 'gpt2' tokenizer) is missing"),
    (dict(without=("tokens",)), "the metadata key tokenizer.ggml.tokens (the tokenizer's vocabulary) is missing"),
    (dict(without=("model",)), "the metadata key tokenizer.ggml.model (the tokenizer's kind: the file holds no "
                               "tokenizer) is missing"),
])
def test_damaged_gguf_metadata_is_one_line_naming_the_key(tiny_model_dir, tmp_path, damage, needle):
    # before: "transformers cannot load this GGUF file ('scores')" for the first, "('tokens')" for the second
    bad = write_gguf(tiny_model_dir, tmp_path / "bad.gguf", **damage)
    assert_user_error(lmaudit("models", "import", bad, "--out", tmp_path / "m"), f"{bad}: {needle}")


# 4. an import never replaces another model

def test_models_import_refuses_to_replace_another_model(tiny_model_dir, tmp_path):
    first = write_gguf(tiny_model_dir, tmp_path / "first.gguf")
    second = write_gguf(tiny_model_dir, tmp_path / "second.gguf", qtype="Q8_0")
    out = tmp_path / "model"
    (out).mkdir()  # an empty folder may be written
    assert_ok(lmaudit("models", "import", first, "--out", out))
    assert_ok(lmaudit("models", "import", first, "--out", out))  # an earlier import of the same file: replaced
    before = (out / "model.safetensors").read_bytes()
    # before: exit 0 and the folder replaced by the other file's import
    assert_user_error(lmaudit("models", "import", second, "--out", out), f"--out '{out}' holds the import of another "
                      f"file ({first}", "importing second.gguf would replace it")
    tuned = shutil.copytree(tiny_model_dir, tmp_path / "tuned")  # a fine-tuned model lmaudit wrote
    from lmaudit.folders import write_manifest
    write_manifest(tuned, "model")
    assert_user_error(lmaudit("models", "import", first, "--out", tuned), "holds a model folder that no GGUF import "
                      "wrote")
    assert (out / "model.safetensors").read_bytes() == before and (tuned / "config.json").is_file()


# 5. --quiet hides the conversion's progress bar

def test_quiet_hides_the_gguf_conversion_bar(tiny_model_dir, tmp_path, capfd):
    from lmaudit.models.gguf import import_gguf
    from lmaudit.progress import set_quiet

    file = write_gguf(tiny_model_dir, tmp_path / "t.gguf")
    import_gguf(file, tmp_path / "loud")
    # without --quiet lmaudit says what it imports (and transformers 5.17 draws its conversion bar; 5.23 and later
    # no longer do)
    assert "importing t.gguf" in capfd.readouterr().err
    set_quiet(True)
    try:
        import_gguf(file, tmp_path / "quiet")
    finally:
        set_quiet(False)
    assert capfd.readouterr().err == ""  # before: "Converting and de-quantizing GGUF tensors...: 100%|..."


# 6. absurd context lengths

def test_an_absurd_context_length_is_refused(tiny_model_dir, tmp_path):
    # before: imported with max_position_embeddings 4294967295
    bad = write_gguf(tiny_model_dir, tmp_path / "bad.gguf", context_length=2**32 - 1)
    with pytest.raises(ModelLoadError, match=r"bad.gguf: llama.context_length is 4,294,967,295, not a context length "
                                             r"\(lmaudit accepts 1 to 16,777,216 positions\)"):
        load_model(bad)
    folder = shutil.copytree(tiny_model_dir, tmp_path / "folder")
    cfg = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**cfg, "max_position_embeddings": 2**32 - 1}))
    with pytest.raises(ModelLoadError, match=r"'max_position_embeddings' is 4,294,967,295, not a context length"):
        load_model(folder)
    (folder / "config.json").write_text(json.dumps({**cfg, "max_position_embeddings": 2**24}))
    assert load_model(folder).model.config.max_position_embeddings == 2**24  # the bound itself is accepted


# 7. temporaries of killed writers are removed by the next writer into the same folder, a live writer's never

_KILLED_WRITERS = """
import os, signal, sys
from pathlib import Path
from lmaudit.cache import cached_build
from lmaudit.folders import output_folder
from lmaudit.utils import atomic_path

def die(*_):
    os.kill(os.getpid(), signal.SIGKILL)

where, what = Path(sys.argv[1]), sys.argv[2]
if what == "file":
    with atomic_path(where / "a.json") as tmp:
        tmp.write_text("half")
        die()
elif what == "folder":
    with output_folder(where / "run") as tmp:
        (tmp / "results.json").write_text("{}")
        die()
elif what == "build":
    cached_build("models", ("killed",), lambda tmp: ((tmp / "w").write_text("half"), die()))
else:  # a live writer: holds its temporary until its input closes
    with atomic_path(where / "live.json") as tmp:
        tmp.write_text("live")
        print(tmp, flush=True)
        sys.stdin.read()
"""


def _hidden(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.glob(".*"))


def _killed(where: Path, what: str) -> None:
    proc = subprocess.run([sys.executable, "-c", _KILLED_WRITERS, str(where), what], capture_output=True, text=True)
    assert proc.returncode == -9, proc.stderr


def test_a_killed_writers_temporaries_go_with_the_next_write_beside_them(tmp_path):
    from lmaudit.cache import cached_build
    from lmaudit.folders import output_folder
    from lmaudit.utils import atomic_path

    _killed(tmp_path, "file")
    assert [n.endswith(".tmp") for n in _hidden(tmp_path)] == [True]
    with atomic_path(tmp_path / "b.json") as tmp:  # another file in the same folder
        tmp.write_text("{}")
    assert _hidden(tmp_path) == []  # before: .a.json.XXXX.tmp stayed
    _killed(tmp_path, "folder")
    assert [n.endswith(".partial") for n in _hidden(tmp_path)] == [True]
    with output_folder(tmp_path / "other") as tmp:
        (tmp / "results.json").write_text("{}")
    assert _hidden(tmp_path) == []  # before: .run.XXXX.partial stayed
    _killed(tmp_path, "build")
    builds = cache_dir() / "models"
    assert [n.endswith(".build") for n in _hidden(builds)] == [True]
    cached_build("models", ("another",), lambda tmp: (tmp / "w").write_text("whole"))
    assert _hidden(builds) == []  # before: the killed build's folder stayed


def test_a_live_writers_temporary_is_never_removed(tmp_path):
    from lmaudit.utils import atomic_path, remove_stale_temps

    live = subprocess.Popen([sys.executable, "-c", _KILLED_WRITERS, str(tmp_path), "live"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    try:
        held = Path(live.stdout.readline().strip())
        assert held.is_file() and held.parent == tmp_path
        with atomic_path(tmp_path / "mine.json") as tmp:
            tmp.write_text("{}")
        assert remove_stale_temps(tmp_path) == [] and held.is_file()
    finally:
        live.kill()
        live.wait()
    assert remove_stale_temps(tmp_path) == [held] and not held.exists()  # its writer is gone now


def test_temporaries_whose_writer_cannot_be_asked_go_after_a_day(tmp_path):
    from lmaudit.utils import atomic_path

    old, new = time.time() - 25 * 3600, time.time() - 3600
    names = {".a.json.lmtmp12-abcdef.k2j4h5g6.tmp": old,  # another machine's, a day old
             ".b.json.lmtmp12-abcdef.k2j4h5g6.tmp": new,  # another machine's, an hour old: it may still write
             ".c.json.x1y2z3w4.tmp": old,  # an older version's (no writer in the name)
             ".notes.txt": old}  # not a temporary at all
    for name, mtime in names.items():
        (tmp_path / name).write_text("x")
        os.utime(tmp_path / name, (mtime, mtime))
    with atomic_path(tmp_path / "d.json") as tmp:
        tmp.write_text("{}")
    assert _hidden(tmp_path) == [".b.json.lmtmp12-abcdef.k2j4h5g6.tmp", ".notes.txt"]


def test_a_killed_swaps_previous_folder_stays_until_its_folder_is_written_again(tmp_path):
    from lmaudit.folders import output_folder
    from lmaudit.utils import temp_prefix

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    prefix = temp_prefix("run").replace(f"lmtmp{os.getpid()}-", f"lmtmp{dead.stdout.strip()}-")
    aside = tmp_path / f"{prefix}1a2b3c4d.prev"  # what a writer killed mid-swap leaves: the old run
    aside.mkdir()
    with output_folder(tmp_path / "other") as tmp:
        (tmp / "results.json").write_text("{}")
    assert aside.is_dir()  # another folder's writer leaves it: the user recovers "run" from it
    with output_folder(tmp_path / "run") as tmp:
        (tmp / "results.json").write_text("{}")
    assert not aside.exists() and (tmp_path / "run" / "results.json").is_file()
