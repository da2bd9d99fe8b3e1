"""The interface's training jobs build into the model cache when given no output folder: the way experiments and the
demo make their models, keyed as they were before (a cached model is never trained again)."""

from pathlib import Path

import pytest
import scipy

import lmaudit
from helpers import make_texts
from lmaudit.data.corpus import build_corpus
from lmaudit.data.loaders import TextSet
from lmaudit.models.build import cached_pretrain, corpus_tokenizer
from lmaudit.runs import training as bodies
from lmaudit.utils import cache_dir, stable_hash

PACKAGES = (str(Path(scipy.__file__).parent / "optimize"),)


def _no_training(*args, **kwargs):
    raise AssertionError("a cached model was trained again")


def test_a_fine_tuning_without_out_is_built_once_into_the_cache_under_the_experiments_key(tiny_model_dir,
                                                                                          monkeypatch):
    data = TextSet.from_texts(make_texts(16, seed=21))
    settings = dict(epochs=1, lr=3e-2, block=32, batch_size=8)
    ft = lmaudit.finetune(tiny_model_dir, data, **settings)
    # the key the experiments' workspace cached its fine-tunings under: their models are found, not retrained
    key = ("finetune", str(tiny_model_dir), data.fingerprint(), "dft", 1, 3e-2, 32, 8, 0, None)
    assert ft.path == cache_dir() / "models" / stable_hash(key) and ft.training["stage"] == "finetune"
    with_lora = lmaudit.finetune(tiny_model_dir, data, lora=4, **settings)
    assert with_lora.path.name == stable_hash(key + ("lora", 4)) and with_lora.training["lora"]["rank"] == 4
    named = lmaudit.finetune(tiny_model_dir, data, cache_key=("mine", 1), **settings)
    assert named.path.name == stable_hash(("mine", 1))
    monkeypatch.setattr(bodies, "finetune", _no_training)  # the job's body, as the interface runs it
    assert lmaudit.finetune(tiny_model_dir, data, **settings).path == ft.path  # read back, not trained again
    with pytest.raises(AssertionError, match="trained again"):  # another setting is another model
        lmaudit.finetune(tiny_model_dir, data, **{**settings, "seed": 1})


def test_an_unlearning_without_out_is_built_once_into_the_cache(tiny_model_dir, monkeypatch):
    forget, retain = (TextSet.from_texts(make_texts(8, seed=s)) for s in (22, 23))
    settings = dict(method="gradient_ascent", epochs=1, lr=1e-3, block=32, batch_size=4)
    first = lmaudit.unlearn(tiny_model_dir, forget, retain, **settings)
    assert first.path.parent == cache_dir() / "models" and first.training["method"] == "gradient_ascent"
    monkeypatch.setattr(bodies, "unlearn", _no_training)
    assert lmaudit.unlearn(tiny_model_dir, forget, retain, **settings).path == first.path
    named = ("unlearn", "mine")
    with pytest.raises(AssertionError, match="trained again"):
        lmaudit.unlearn(tiny_model_dir, forget, retain, cache_key=named, **settings)


def test_a_pretraining_without_out_is_the_cached_pretraining_the_demo_and_experiments_read(monkeypatch):
    corpus = build_corpus(PACKAGES)
    made = lmaudit.pretrain(tokens=2000, packages=PACKAGES)
    assert made.path == cached_pretrain(corpus, corpus_tokenizer(corpus), tokens=2000)  # one key, one folder
    monkeypatch.setattr(bodies, "pretrain", _no_training)
    assert lmaudit.pretrain(tokens=2000, packages=corpus, tokenizer=corpus_tokenizer(corpus)).path == made.path
