"""``lmaudit demo``: the whole pipeline on the embedded default.

Corpus → tokenizer → pretrained tiny AR model → fine-tuned on a member split →
every AR attack (the pretrained base is the reference model). Then the AR base is
adapted into a diffusion LM (Dream-style), fine-tuned on the same members, and every
DLM attack runs on a subset (``OUT/dlm/``). Tables, results and one report follow.
Corpus, tokenizer and models are cached, so a second run only re-reads them.
"""

from __future__ import annotations

import json
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from lmaudit import api
from lmaudit.data.corpus import build_corpus
from lmaudit.data.loaders import TextSet, load_texts
from lmaudit.models.build import EMBEDDED_DLM, corpus_tokenizer
from lmaudit.models.fingerprint import tokenizer_fingerprint
from lmaudit.models.gguf import local_model
from lmaudit.models.presets import PRESETS
from lmaudit.progress import info
from lmaudit.runs.mia import MIAResult, RunConfig
from lmaudit.settings import check_settings, integer, one_of, positive, seed_value, setting, text


@dataclass(frozen=True)
class DemoConfig:
    """The demo on the embedded default: a tiny model pretrained on the corpus, fine-tuned on members, audited."""

    preset: str = setting("tiny", check=one_of(tuple(PRESETS), noun="preset"))
    pretrain_tokens: int = setting(2_000_000, check=integer(1))
    n_members: int = setting(1000, check=integer(2))
    n_nonmembers: int = setting(1000, check=integer(2))
    passage_chars: int = setting(300, check=integer(1))
    finetune_epochs: float = setting(4, check=positive())
    finetune_lr: float = setting(1e-3, check=positive())
    seed: int = setting(0, check=seed_value())
    dlm_adapt_tokens: int = setting(500_000, check=integer(1))  # diffusion training of the AR base
    dlm_samples: int = setting(300, check=integer(2))  # members and as many non-members scored by the DLM attacks

    def __post_init__(self) -> None:
        check_settings(self)


FULL = DemoConfig()
QUICK = DemoConfig(pretrain_tokens=EMBEDDED_DLM["ar_tokens"], n_members=300, n_nonmembers=300, finetune_epochs=4,
                   dlm_adapt_tokens=EMBEDDED_DLM["dlm_tokens"], dlm_samples=100)  # its base DLM is the embedded one


@dataclass(frozen=True)
class RealDemoConfig:
    """``demo --real``: a LoRA fine-tune of a real pretrained model on corpus members, every AR attack after it."""

    model: str = setting("smollm2-135m", check=text())
    n_members: int = setting(200, check=integer(2))
    n_nonmembers: int = setting(200, check=integer(2))
    passage_chars: int = setting(500, check=integer(1))
    finetune_epochs: float = setting(3, check=positive())
    lora: int = setting(16, check=integer(1))
    seed: int = setting(0, check=seed_value())
    # probes: 4 texts × ~130 positions × a 49k vocabulary is ~100 MB of logits a batch
    batch_size: int = setting(4, check=integer(1))

    def __post_init__(self) -> None:
        check_settings(self)


REAL = RealDemoConfig()


def _write_jsonl(path: Path, texts: list[str], prefix: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as fh:
        for i, t in enumerate(texts):
            fh.write(json.dumps({"id": f"{prefix}{i}", "text": t}, ensure_ascii=False) + "\n")


def _finetuned(base: Path, members: TextSet, cfg: DemoConfig) -> Path:
    """``base`` fine-tuned on the members, through the interface into the model cache (the demo's own key)."""
    key = ("finetune", str(base), members.fingerprint(), cfg.finetune_epochs, cfg.finetune_lr, cfg.seed)
    return api.finetune(base, members, mode="dft", epochs=cfg.finetune_epochs, lr=cfg.finetune_lr, seed=cfg.seed,
                        cache_key=key).path


def _member_sets(corpus, out: Path, n_members: int, n_nonmembers: int, chars: int, seed: int):
    """The corpus' member and non-member passages: {name: texts}, and the two sets read back as a user's files
    would be (their source named as ``OUT/NAME.jsonl``, where ``write()`` keeps them)."""
    passages = {"members": corpus.passages("member", n_members, max_chars=chars, seed=seed),
                "nonmembers": corpus.passages("nonmember", n_nonmembers, max_chars=chars, seed=seed)}
    with tempfile.TemporaryDirectory() as scratch:
        for name, texts in passages.items():
            _write_jsonl(Path(scratch) / f"{name}.jsonl", texts, name[0])
        members, nonmembers = (TextSet(load_texts(Path(scratch) / f"{name}.jsonl").records,
                                       source=str(out / f"{name}.jsonl"))
                               for name in passages)
    return passages, members, nonmembers


def _data_files(passages: dict, extra=None):
    """``files(folder)`` for ``write()``: the members and non-members the run scored (and ``extra(folder)``)."""
    def files(folder: Path) -> None:
        for name, texts in passages.items():
            _write_jsonl(folder / f"{name}.jsonl", texts, name[0])
        if extra is not None:
            extra(folder)
    return files


def run_real_demo(out_dir: str | Path, cfg: RealDemoConfig = REAL, *, report: bool = False) -> MIAResult:
    """``demo --real``: import the pretrained model (once), LoRA-fine-tune it on corpus members (cached), run every
    AR attack with the pretrained model as the reference; write ``OUT/`` (and the report when ``report``)."""
    out = Path(out_dir)
    t_start = time.perf_counter()
    corpus = build_corpus()
    base = local_model(cfg.model)
    info(f"pretrained model: {cfg.model} ({base})")
    passages, members, nonmembers = _member_sets(corpus, out, cfg.n_members, cfg.n_nonmembers, cfg.passage_chars,
                                                 cfg.seed)
    key = ("finetune-real", str(base), members.fingerprint(), cfg.finetune_epochs, cfg.lora, cfg.seed)
    target = api.finetune(base, members, mode="dft", epochs=cfg.finetune_epochs, seed=cfg.seed, lora=cfg.lora,
                          cache_key=key).path
    info(f"fine-tuned target (LoRA rank {cfg.lora}): {target}")
    result = api.mia(target, members, nonmembers, reference=base,
                     config=RunConfig(seed=cfg.seed, batch_size=cfg.batch_size))
    result.timings_s["demo_total"] = time.perf_counter() - t_start
    result.built_from = {"corpus": corpus.fingerprint}  # the members' and non-members' passages
    result.write(out, files=_data_files(passages), report=report, kind="demo")
    return result


def built_from(corpus, tokenizer) -> dict:
    """What the embedded default's models were built from: the corpus' and the tokenizer's content hashes."""
    return {"corpus": corpus.fingerprint, "tokenizer": tokenizer_fingerprint(tokenizer)}


def run_demo(out_dir: str | Path, cfg: DemoConfig = FULL, *, report: bool = False) -> tuple[MIAResult, MIAResult]:
    """Run the AR and DLM parts; write ``OUT/`` and ``OUT/dlm/`` (and the report when ``report``); return both."""
    out = Path(out_dir)
    t_start = time.perf_counter()
    corpus = build_corpus()
    info(f"corpus: {corpus.manifest['n_documents']} documents, {corpus.manifest['n_chars'] / 1e6:.1f}M chars "
         f"({', '.join(f'{k} {v}' for k, v in corpus.manifest['pools'].items())})")
    tokenizer = corpus_tokenizer(corpus)

    base = api.pretrain(kind="ar", preset=cfg.preset, tokens=cfg.pretrain_tokens, seed=cfg.seed, packages=corpus,
                        tokenizer=tokenizer).path
    info(f"base model: {base}")

    passages, members, nonmembers = _member_sets(corpus, out, cfg.n_members, cfg.n_nonmembers, cfg.passage_chars,
                                                 cfg.seed)

    target = _finetuned(base, members, cfg)
    info(f"fine-tuned target: {target}")
    result = api.mia(target, members, nonmembers, reference=base, config=RunConfig(seed=cfg.seed))

    dlm_base = api.pretrain(kind="dlm", preset=cfg.preset, tokens=cfg.dlm_adapt_tokens, seed=cfg.seed, init_from=base,
                            packages=corpus, tokenizer=tokenizer).path
    dlm_target = _finetuned(dlm_base, members, cfg)
    info(f"diffusion LM: base {dlm_base}, fine-tuned {dlm_target}")
    n = cfg.dlm_samples
    dlm_result = api.mia(dlm_target, TextSet(members.records[:n], source=members.source),
                         TextSet(nonmembers.records[:n], source=nonmembers.source), reference=dlm_base,
                         config=RunConfig(seed=cfg.seed))
    result.timings_s["demo_total"] = time.perf_counter() - t_start
    result.built_from = dlm_result.built_from = built_from(corpus, tokenizer)

    # one unit: the AR run, its data and the DLM run
    result.write(out, files=_data_files(passages, lambda folder: dlm_result.write(folder / "dlm")), report=report,
                 kind="demo")
    return result, dlm_result


