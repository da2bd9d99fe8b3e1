"""Rebuild docs/callback-auc.png, the plot of docs/how-to/training-callback.md: a transformers Trainer fine-tunes the
embedded tiny AR model (trained on first use and cached) on 200 docstring passages with 40 canaries inserted, while
a LeakageCallback audits it every 10 steps against 200 held-out passages and 40 decoys never inserted.

    OMP_NUM_THREADS=1 PYTHONPATH=src .venv/bin/python docs/callback_plot.py [OUT_DIR]

OUT_DIR (default: a temporary folder) receives the Trainer's folder and the callback's results folders. The script
prints each evaluation's AUCs and the size of the PNG. About a minute on one CPU core once the base is cached
(threads that share busy cores can make the tiny model's steps many times slower).
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import torch
from transformers import DataCollatorForLanguageModeling, Trainer, TrainingArguments

import lmaudit
from lmaudit.data.corpus import build_corpus
from lmaudit.integrations.transformers import LeakageCallback
from lmaudit.models.build import embedded_models
from lmaudit.privacy.canaries import make_canaries

DOCS = Path(__file__).resolve().parent
N_TEXTS, N_CANARIES, EVERY = 200, 40, 10


class Texts(torch.utils.data.Dataset):
    """Each text tokenised on its own: one example per text, padded by the collator."""

    def __init__(self, tokenizer, texts: list[str]) -> None:
        self.ids = [tokenizer(t, truncation=True, max_length=128)["input_ids"] for t in texts]

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict:
        return {"input_ids": self.ids[i]}


def main(out: Path) -> None:
    handle = lmaudit.load_model(embedded_models()[0])
    model, tokenizer = handle.model, handle.tokenizer
    corpus = build_corpus()  # the base was pretrained on its "pretrain" pool, never on these two
    members = corpus.passages("member", N_TEXTS, max_chars=300, seed=0)
    heldout = corpus.passages("nonmember", N_TEXTS, max_chars=300, seed=0)
    canaries = make_canaries(N_CANARIES, "rare", seed=0)
    decoys = make_canaries(N_CANARIES, "rare", seed=0, stream="decoy")
    train = members + canaries

    leakage = LeakageCallback(members, heldout, canaries=canaries, decoys=decoys, every_steps=EVERY, at_start=True,
                              train_texts=train, out_dir=out / "leakage",
                              config=lmaudit.RunConfig(n_bootstrap=100, blind=False))
    args = TrainingArguments(output_dir=str(out / "trainer"), num_train_epochs=4, per_device_train_batch_size=8,
                             learning_rate=1e-3, warmup_steps=10, logging_steps=EVERY, report_to=[],
                             save_strategy="no", seed=0, use_cpu=True, disable_tqdm=True)
    trainer = Trainer(model=model, args=args, train_dataset=Texts(tokenizer, train), processing_class=tokenizer,
                      data_collator=DataCollatorForLanguageModeling(tokenizer, mlm=False), callbacks=[leakage])
    leakage.attach(trainer)
    model.train()
    trainer.train()

    for e in leakage.history:
        print(f"step {e.step:4d}: " + ", ".join(f"{k.removeprefix('lmaudit/')} {v:.3f}"
                                               for k, v in e.metrics.items() if k.endswith("/auc")))
    png = leakage.plot(DOCS / "callback-auc.png")
    print(f"{png}: {png.stat().st_size / 1024:.0f} KiB")


if __name__ == "__main__":
    if len(sys.argv) > 1:
        main(Path(sys.argv[1]))
    else:
        with tempfile.TemporaryDirectory() as tmp:
            main(Path(tmp))
