"""A byte-level BPE tokenizer trained locally with ``tokenizers``."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import PreTrainedTokenizerFast

SPECIAL_TOKENS = ["<pad>", "<unk>", "<bos>", "<eos>", "<mask>"]


def train_tokenizer(texts: Iterable[str], *, vocab_size: int = 4096, out_dir: str | Path | None = None):
    """Train a byte-level BPE on ``texts`` and wrap it as a ``transformers`` tokenizer.

    The tokenizer adds ``<bos>`` in front of every encoded text and defines pad,
    unk, bos, eos and mask tokens (ids 0–4). Saved with ``save_pretrained`` when
    ``out_dir`` is given.
    """

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer)
    bos_id = tok.token_to_id("<bos>")
    tok.post_processor = processors.TemplateProcessing(
        single="<bos> $A", pair="<bos> $A $B", special_tokens=[("<bos>", bos_id)]
    )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<bos>",
        eos_token="<eos>",
        pad_token="<pad>",
        unk_token="<unk>",
        mask_token="<mask>",
        model_max_length=1 << 20,
    )
    if out_dir is not None:
        fast.save_pretrained(str(out_dir))
    return fast
