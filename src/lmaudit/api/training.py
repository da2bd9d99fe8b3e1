"""Training jobs: pretraining, fine-tuning, unlearning and shadow models; each writes a folder and returns it read."""

from __future__ import annotations

from lmaudit.data.corpus import DEFAULT_PACKAGES, build_corpus
from lmaudit.models import build
from lmaudit.models import unlearn as unlearning
from lmaudit.models.dp import DPSpec
from lmaudit.models.lora import LoraSpec
from lmaudit.models.shadows import train_shadows
from lmaudit.runs.inputs import base_of, lora_of, source_of, texts_of
from lmaudit.runs.training import TrainedModel, TrainedShadows, check_training_out

# what lmaudit.api (and lmaudit) exports of this module: its jobs and the settings they take
__all__ = ["finetune", "unlearn", "pretrain", "shadows", "LoraSpec", "DPSpec"]


def finetune(model, data, out, *, mode: str = "dft", epochs: float = 4.0, lr: float | None = None,
             block: int | None = None, batch_size: int | None = None, seed: int = 0, mask_ratio: float | None = None,
             lora: LoraSpec | int | None = None, dp: DPSpec | None = None, chat_template: bool | None = None,
             text_field: str = "text", split: str | None = None, kind: str | None = None,
             **load_options) -> TrainedModel:
    """Fine-tune ``model`` (a folder, a GGUF file or a name) on ``data`` and write it to ``out``.

    DFT packs texts into blocks; IFT trains on responses only (in the tokenizer's chat
    template when it has one). ``lr``/``block``/``batch_size`` left None take the defaults of
    what is trained (a tiny preset, or a pretrained model fully or with LoRA). ``lora``: a
    rank or a :class:`LoraSpec` (``out`` is then an adapter folder); ``dp``: a :class:`DPSpec`.
    ``out`` must not be an input or the cache (refused before any work).

    Examples
    --------
    >>> ft = lmaudit.finetune(MODEL, "members.jsonl", "models/ft", epochs=1, lora=4)
    >>> ft.training["stage"], ft.training["lora"]["rank"]
    ('finetune', 4)
    >>> ft.load().kind
    'ar'
    """
    model = source_of(model)
    check_training_out(out, "model", {"model": model, "data": data, **base_of(load_options)})
    texts = texts_of(data, text_field, split)
    build.finetune(model, texts, out, mode=mode, epochs=epochs, lr=lr, block=block, batch_size=batch_size, seed=seed,
                   kind=kind, mask_ratio=mask_ratio, load_options=load_options, lora=lora_of(lora), dp=dp,
                   chat_template=chat_template)
    return TrainedModel.read(out)


def unlearn(model, forget, retain, out, *, method: str, base=None, epochs: float = 2.0, lr: float = 1e-4,
            batch_size: int = 16, block: int = 64, mode: str = "dft", retain_weight: float = 1.0,
            npo_beta: float = 0.1, seed: int = 0, lora: LoraSpec | int | None = None, text_field: str = "text",
            split: str | None = None, kind: str | None = None, **load_options) -> TrainedModel:
    """Unlearn ``forget`` from the fine-tuned ``model`` (``method``: retrain, gradient_ascent, npo or finetune;
    ``retrain`` fine-tunes ``base`` on ``retain``, the gold standard) and write the result to ``out``.

    Examples
    --------
    >>> ul = lmaudit.unlearn(MODEL, "suspect.jsonl", "members.jsonl", "models/ul", method="gradient_ascent", epochs=1)
    >>> ul.training["stage"], ul.training["method"]
    ('unlearn', 'gradient_ascent')
    """
    model = source_of(model)
    check_training_out(out, "model", {"model": model, "base": base, "forget": forget, "retain": retain,
                                      **base_of(load_options)})
    sets = [texts_of(d, text_field, split) for d in (forget, retain)]
    unlearning.unlearn(model, *sets, out, method=method, base_dir=base, epochs=epochs, lr=lr, batch_size=batch_size,
                       block=block, mode=mode, retain_weight=retain_weight, npo_beta=npo_beta, seed=seed, kind=kind,
                       load_options=load_options, lora=lora_of(lora))
    return TrainedModel.read(out)


def pretrain(out, *, kind: str = "ar", preset: str = "tiny", tokens: int | None = None, seed: int = 0,
             init_from=None, packages=DEFAULT_PACKAGES, block: int | None = None, batch_size: int | None = None,
             lr: float | None = None) -> TrainedModel:
    """Pretrain a ``preset`` model of ``kind`` on the corpus of ``packages``, or adapt a Llama-family AR folder
    ``init_from`` into a DLM (:func:`lmaudit.models.build.pretrain`: block, batch_size, lr); write it to ``out``.

    Examples
    --------
    >>> base = lmaudit.pretrain("models/base", tokens=2000, packages=PACKAGES)
    >>> base.training["stage"], base.training["kind"]
    ('pretrain', 'ar')
    """
    check_training_out(out, "model", {"init_from": init_from})
    corpus = build_corpus(tuple(packages))
    build.pretrain(corpus, build.corpus_tokenizer(corpus), out, kind=kind, preset=preset, tokens=tokens, seed=seed,
                   init_from=init_from, block=block, batch_size=batch_size, lr=lr)
    return TrainedModel.read(out)


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
    check_training_out(out, "shadows", {"model": model, "pool": pool, **base_of(load_options)})
    train_shadows(model, texts_of(pool, text_field, split), out, k=k, seed=seed, epochs=epochs, lr=lr, block=block,
                  batch_size=batch_size, mode=mode, kind=kind, load_options=load_options, lora=lora_of(lora), dp=dp)
    return TrainedShadows.read(out)
