"""``checkpoint``: membership inference on a model folder and data files you give, at any scale (GPU-ready).

The experiment for real checkpoints (Pythia, Llama, LLaDA, Dream, ...) and real data
(WikiMIA- or MIMIR-style labelled files, or members and non-members files): no
embedded corpus, no tiny models. Two settings:

- **detection** (``finetune = false``): the model as it is; the members are texts it
  was pretrained on (e.g. WikiMIA's label 1). ``reference`` is optional.
- **fine-tuning** (``finetune = true``): the model is first fine-tuned on the members
  (``lora`` > 0: a LoRA adapter of that rank, as the papers do on a GPU) for
  ``epochs``; the given model is the reference.

Paths are local (nothing is downloaded) and relative to the working directory.
``n_members``/``n_nonmembers`` take the first texts of each set (all when a set is
shorter). Payload: ``rows`` as the ``mia`` type (mean ± std over seeds), and
``throughput``: the texts' tokens per second of probing, per seed.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from lmaudit import api
from lmaudit.data.loaders import TextSet, load_labelled, load_texts
from lmaudit.errors import LmauditError
from lmaudit.experiments.config import BaseConfig
from lmaudit.experiments.registry import register_experiment
from lmaudit.experiments.types.membership import rows_tables
from lmaudit.experiments.workspace import Workspace, aggregate, metrics
from lmaudit.models.loading import load_model
from lmaudit.models.sources import DTYPE_NAMES
from lmaudit.runs.mia import RunConfig
from lmaudit.settings import boolean, each, integer, one_of, setting, text


@dataclass
class CheckpointConfig(BaseConfig):
    model: str = setting("", check=text())  # local model folder: audited as it is, or fine-tuned first (finetune)
    reference: str = setting("", check=text())  # detection: an optional reference model folder
    data: str = setting("", check=text())  # one labelled file or datasets folder (label_field: 1 member, 0 not) ...
    label_field: str = setting("label", check=text())
    members: str = setting("", check=text())  # ... or a members and a non-members file
    nonmembers: str = setting("", check=text())
    text_field: str = setting("", check=text())  # "" = the loaders' default (text, or prompt + response)
    split: str = setting("", check=text())  # a datasets folder's split
    # with the base config's lora (rank; 0: full fine-tuning), epochs, lr, block, batch_size
    finetune: bool = setting(False, check=boolean())
    dtype: str = setting("auto", check=one_of(DTYPE_NAMES))
    device: str = setting("auto", check=text())
    trust_remote_code: bool = setting(False, check=boolean())
    max_tokens: int = setting(0, check=integer(0))  # 0: the model's context length
    long_texts: str = setting("truncate", check=one_of(("truncate", "window")))
    max_batch_tokens: int = setting(0, check=integer(0))  # 0: no token cap on batches
    budget: int = setting(16, check=integer(1))
    attacks: list[str] | None = setting(None, check=each(text(), optional=True))


def _sets(cfg: CheckpointConfig) -> tuple[TextSet, TextSet]:
    opts = {"split": cfg.split or None, **({"text_field": cfg.text_field} if cfg.text_field else {})}
    if bool(cfg.data) == bool(cfg.members or cfg.nonmembers):
        raise LmauditError(f"experiment '{cfg.name}': give either data (with label_field) or members and nonmembers")
    if cfg.data:
        members, nonmembers = load_labelled(cfg.data, label_field=cfg.label_field, **opts)
    else:
        members, nonmembers = load_texts(cfg.members, **opts), load_texts(cfg.nonmembers, **opts)
    return (TextSet(members.records[: cfg.n_members], source=members.source),
            TextSet(nonmembers.records[: cfg.n_nonmembers], source=nonmembers.source))


def run(ws: Workspace, cfg: CheckpointConfig) -> dict:
    """Membership inference on the given (or fine-tuned) checkpoint, one run per seed."""
    if not cfg.model:
        raise LmauditError(f"experiment '{cfg.name}': the key 'model' (a local model folder) is required")
    members, nonmembers = _sets(cfg)
    load = {"dtype": cfg.dtype, "device": cfg.device, "trust_remote_code": cfg.trust_remote_code}
    rows: dict[str, list] = {}
    throughput = []
    for seed in cfg.seeds:
        target, reference = Path(cfg.model), Path(cfg.reference) if cfg.reference else None
        if cfg.finetune:
            key = ("checkpoint-finetune", str(target.resolve()), members.fingerprint(), cfg.mode, cfg.epochs, cfg.lr,
                   cfg.block, cfg.batch_size, cfg.lora, seed)
            reference = target
            target = api.finetune(target, members, mode=cfg.mode, epochs=cfg.epochs, lr=cfg.lr, block=cfg.block,
                                  batch_size=cfg.batch_size, seed=seed, lora=cfg.lora or None, cache_key=key,
                                  **{k: v for k, v in load.items() if v not in ("auto", False)}).path
        run_cfg = RunConfig(attacks=cfg.attacks, seed=seed, budget=cfg.budget, n_bootstrap=200,
                            max_length=cfg.max_tokens or None, long_texts=cfg.long_texts,
                            max_batch_tokens=cfg.max_batch_tokens or None)
        tgt = load_model(target, **load)
        result = api.mia(tgt, members, nonmembers, reference=reference or None, config=run_cfg, **load)
        for name in result.attacks:
            rows.setdefault(name, []).append(metrics(result, name))
        n_tokens = sum(len(tgt.tokenizer(r.context + r.target)["input_ids"])
                       for r in members.records + nonmembers.records)
        probe_s = sum(v for k, v in result.timings_s.items() if k.startswith("probe_"))
        throughput.append({"seed": seed, "tokens": n_tokens, "probe_s": round(probe_s, 3),
                           "tokens_per_s": round(n_tokens / probe_s, 1) if probe_s else None,
                           "dtype": tgt.dtype, "device": tgt.device})
    return {"rows": {k: {"per_seed": v, **aggregate(v)} for k, v in rows.items()}, "throughput": throughput,
            "data": {"members": members.source, "nonmembers": nonmembers.source,
                     "n_members": len(members), "n_nonmembers": len(nonmembers)}}


def tables(record: dict) -> list[tuple[str, list[str], list[list[str]]]]:
    """The attacks table (as ``mia``), then the probe's throughput per seed."""
    speed = [[str(t["seed"]), f"{t['tokens']:,}", f"{t['probe_s']:.1f}", f"{t['tokens_per_s'] or 0:,.0f}",
              f"{t['dtype']} on {t['device']}"] for t in record["throughput"]]
    return rows_tables(record, "attack") + [("Throughput: the texts' tokens per second of probing (all probes of the "
                                             "run: target, reference, and for a DLM every masked forward).",
                                             ["seed", "tokens", "probe s", "tokens/s", "precision"], speed)]


register_experiment("checkpoint", config=CheckpointConfig, run=run, tables=tables)
