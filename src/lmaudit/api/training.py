"""Training jobs: pretraining, fine-tuning, unlearning and shadow models; each writes a folder and returns it read.

The model-making jobs (:func:`finetune`, :func:`unlearn`, :func:`pretrain`) write to ``out``, or, with ``out`` None,
into the model cache (:func:`~lmaudit.cache.cached_build`): keyed by every setting that determines the weights (or
by ``cache_key``), built once and then read back, as experiments build their models.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

from lmaudit.cache import cached_build
from lmaudit.data.corpus import DEFAULT_PACKAGES, Corpus, build_corpus
from lmaudit.data.given import texts_of
from lmaudit.models import build
from lmaudit.models.dp import DPSpec
from lmaudit.models.lora import LoraSpec
from lmaudit.models.train import PretrainConfig
from lmaudit.runs import training as jobs
from lmaudit.runs.common import JOBS
from lmaudit.runs.inputs import base_of, lora_of, source_of
from lmaudit.runs.training import TrainedModel, TrainedShadows, check_training_out

# what lmaudit.api (and lmaudit) exports of this module: its jobs and the settings they take
__all__ = ["finetune", "unlearn", "pretrain", "shadows", "LoraSpec", "DPSpec"]


def _written(out, key: tuple, make: Callable[[Path], object], kind: str, inputs: dict) -> TrainedModel:
    """``make(folder)`` into ``out`` (checked first: :func:`check_training_out`), or into the model cache under
    ``key`` when ``out`` is None (built once; a second call reads the folder back)."""
    if out is None:
        return TrainedModel.read(cached_build("models", key, make))
    check_training_out(out, kind, inputs)
    return make(Path(out))


def _finetune_key(model, data, *, mode, epochs, lr, block, batch_size, seed, mask_ratio, lora, dp, chat_template,
                  kind, load_options) -> tuple:
    """The cache key of a fine-tuning: the model as given, the data's content and every setting that changes the
    weights; a setting left at its default adds nothing (keys of earlier builds stay)."""
    key = ("finetune", str(model), data.fingerprint(), mode, epochs, lr, block, batch_size, seed, mask_ratio)
    if lora is not None:
        key += ("lora", lora.rank) if lora == LoraSpec(lora.rank) else ("lora", asdict(lora))
    extra = {"dp": None if dp is None else asdict(dp), "chat_template": chat_template, "kind": kind,
             "load_options": load_options or None}
    return key + tuple((k, v) for k, v in extra.items() if v is not None)


def finetune(model, data, out=None, *, mode: str = "dft", epochs: float = 4.0, lr: float | None = None,
             block: int | None = None, batch_size: int | None = None, seed: int = 0, mask_ratio: float | None = None,
             lora: LoraSpec | int | None = None, dp: DPSpec | None = None, chat_template: bool | None = None,
             text_field: str = "text", split: str | None = None, kind: str | None = None,
             cache_key: tuple | None = None, **load_options) -> TrainedModel:
    """Fine-tune ``model`` (a folder, a GGUF file or a name) on ``data`` and write it to ``out``.

    DFT packs texts into blocks; IFT trains on responses only (in the tokenizer's chat
    template when it has one). ``lr``/``block``/``batch_size`` left None take the defaults of
    what is trained (a tiny preset, or a pretrained model fully or with LoRA). ``lora``: a
    rank or a :class:`LoraSpec` (``out`` is then an adapter folder); ``dp``: a :class:`DPSpec`.
    ``out`` must not be an input or the cache (refused before any work); None builds into the model cache, under
    ``cache_key`` when given (else one made of the model, the data's content and every setting above).

    Examples
    --------
    >>> ft = lmaudit.finetune(MODEL, "members.jsonl", "models/ft", epochs=1, lora=4)
    >>> ft.training["stage"], ft.training["lora"]["rank"]
    ('finetune', 4)
    >>> ft.load().kind
    'ar'
    """
    model, lora = source_of(model), lora_of(lora)
    texts = texts_of(data, text_field, split)
    key = cache_key or _finetune_key(model, texts, mode=mode, epochs=epochs, lr=lr, block=block,
                                     batch_size=batch_size, seed=seed, mask_ratio=mask_ratio, lora=lora, dp=dp,
                                     chat_template=chat_template, kind=kind, load_options=load_options)
    return _written(out, key, lambda folder: jobs.finetune(
        model, texts, folder, mode=mode, epochs=epochs, lr=lr, block=block, batch_size=batch_size, seed=seed,
        kind=kind, mask_ratio=mask_ratio, load_options=load_options, lora=lora, dp=dp, chat_template=chat_template),
        JOBS["finetune"].type, {"model": model, "data": data, **base_of(load_options)})


def unlearn(model, forget, retain, out=None, *, method: str, base=None, epochs: float = 2.0, lr: float = 1e-4,
            batch_size: int = 16, block: int = 64, mode: str = "dft", retain_weight: float = 1.0,
            npo_beta: float = 0.1, seed: int = 0, lora: LoraSpec | int | None = None, text_field: str = "text",
            split: str | None = None, kind: str | None = None, cache_key: tuple | None = None,
            **load_options) -> TrainedModel:
    """Unlearn ``forget`` from the fine-tuned ``model`` (``method``: retrain, gradient_ascent, npo or finetune;
    ``retrain`` fine-tunes ``base`` on ``retain``, the gold standard) and write the result to ``out`` (None: into the
    model cache, as :func:`finetune`).

    Examples
    --------
    >>> ul = lmaudit.unlearn(MODEL, "suspect.jsonl", "members.jsonl", "models/ul", method="gradient_ascent", epochs=1)
    >>> ul.training["stage"], ul.training["method"]
    ('unlearn', 'gradient_ascent')
    """
    model, lora = source_of(model), lora_of(lora)
    sets = [texts_of(d, text_field, split) for d in (forget, retain)]
    settings = {"method": method, "base": None if base is None else str(base), "epochs": epochs, "lr": lr,
                "batch_size": batch_size, "block": block, "mode": mode, "retain_weight": retain_weight,
                "npo_beta": npo_beta, "seed": seed, "lora": None if lora is None else asdict(lora), "kind": kind,
                "load_options": load_options}
    key = cache_key or ("unlearn", str(model), *(ts.fingerprint() for ts in sets), settings)
    return _written(out, key, lambda folder: jobs.unlearn(
        model, *sets, folder, method=method, base_dir=base, epochs=epochs, lr=lr, batch_size=batch_size, block=block,
        mode=mode, retain_weight=retain_weight, npo_beta=npo_beta, seed=seed, kind=kind, load_options=load_options,
        lora=lora), JOBS["unlearn"].type, {"model": model, "base": base, "forget": forget, "retain": retain,
                              **base_of(load_options)})


def pretrain(out=None, *, kind: str = "ar", preset: str = "tiny", tokens: int | None = None, seed: int = 0,
             init_from=None, packages: tuple[str, ...] | Corpus = DEFAULT_PACKAGES, block: int | None = None,
             batch_size: int | None = None, lr: float | None = None, include=None, repeats: int = 1,
             tokenizer=None) -> TrainedModel:
    """Pretrain a ``preset`` model of ``kind`` on the corpus of ``packages`` (or a corpus already built), or adapt a
    Llama-family AR folder ``init_from`` into a DLM (:func:`lmaudit.models.build.pretrain`: block, batch_size, lr,
    and ``include``: texts the pretraining stream holds ``repeats`` times each); write it to ``out``, or with ``out``
    None into the model cache (keyed by the corpus, its tokenizer and every setting). ``tokenizer``: the corpus'
    tokenizer when already trained (:func:`~lmaudit.models.build.corpus_tokenizer`; by default trained on it).

    Examples
    --------
    >>> base = lmaudit.pretrain("models/base", tokens=2000, packages=PACKAGES)
    >>> base.training["stage"], base.training["kind"]
    ('pretrain', 'ar')
    """
    PretrainConfig(kind=kind, tokens=tokens, seed=seed, repeats=repeats, block=block, batch_size=batch_size, lr=lr)
    corpus = packages if isinstance(packages, Corpus) else build_corpus(tuple(packages))
    tokenizer = build.corpus_tokenizer(corpus) if tokenizer is None else tokenizer
    included = None if include is None else texts_of(include, name="include")
    settings = dict(kind=kind, preset=preset, tokens=tokens, seed=seed, init_from=init_from, include=included,
                    repeats=repeats, block=block, batch_size=batch_size, lr=lr)
    return _written(out, build.pretrain_key(corpus, tokenizer, **settings),
                    lambda folder: jobs.pretrain(corpus, tokenizer, folder, **settings),
                    JOBS["pretrain"].type, {"init_from": init_from})


def shadows(model, pool, out, *, k: int = 8, epochs: float = 4.0, lr: float | None = None, block: int | None = None,
            batch_size: int | None = None, mode: str = "dft", seed: int = 0, lora: LoraSpec | int | None = None,
            dp: DPSpec | None = None, text_field: str = "text", split: str | None = None, kind: str | None = None,
            **load_options) -> TrainedShadows:
    """Fine-tune ``k`` shadow models of ``model`` (the target's base) on random halves of ``pool``, for LiRA and
    RMIA (``lmaudit.mia(..., shadows=out)``); use the target's own fine-tuning settings.

    Examples
    --------
    >>> sh = lmaudit.shadows(MODEL, "members.jsonl", "models/shadows", k=2, epochs=1)
    >>> sh.type, len(sh.load().paths)
    ('shadows', 2)
    """
    model = source_of(model)
    check_training_out(out, JOBS["shadows"].type, {"model": model, "pool": pool, **base_of(load_options)})
    return jobs.train_shadows(model, texts_of(pool, text_field, split), out, k=k, seed=seed, epochs=epochs, lr=lr,
                              block=block, batch_size=batch_size, mode=mode, kind=kind, load_options=load_options,
                              lora=lora_of(lora), dp=dp)
