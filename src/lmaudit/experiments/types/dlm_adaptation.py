"""``dlm-adaptation``: does an AR model adapted into a diffusion LM fill masks?

The experiment's base (a pretrained ``base`` such as SmolLM2-135M, or the tiny model of ``preset``) is adapted
Dream-style (:func:`lmaudit.models.build.pretrain` with ``init_from``: full attention, shifted logits, a mask token
added when its tokenizer has none) on ``adapt_tokens`` tokens of the corpus' pretraining pool, cached. Before
(the AR weights read as a DLM, the mask token untrained) and after, its masked-token accuracy and NLL at each of
``ratios`` on held-out passages (the first seed's non-members, never in the pretraining pool;
:func:`lmaudit.probes.fill_quality.mask_filling`); with ``beside_embedded``, the same for the embedded tiny DLM
and its AR base, on the same texts. A working DLM fills far more masks after than before, and more at low ratios
(more context) than at high ones.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

from lmaudit import api
from lmaudit.data.corpus import build_corpus
from lmaudit.experiments.config import BaseConfig
from lmaudit.experiments.registry import register_experiment
from lmaudit.experiments.workspace import Workspace
from lmaudit.models.build import EMBEDDED_DLM, corpus_tokenizer
from lmaudit.models.kinds import dlm_before_adaptation
from lmaudit.models.loading import load_model
from lmaudit.models.sources import TRAINING_FILE
from lmaudit.probes.fill_quality import RATIOS, mask_filling
from lmaudit.settings import boolean, each, fraction, setting


@dataclass
class AdaptationConfig(BaseConfig):
    ratios: list[float] = setting(default_factory=lambda: list(RATIOS), check=each(fraction()))
    beside_embedded: bool = setting(True, check=boolean())  # also the embedded tiny DLM (the quick demo's)


def embedded_pair() -> tuple[Path, Path]:
    """(the embedded AR model, the embedded diffusion LM adapted from it), pretrained through the interface into the
    model cache: the folders :func:`lmaudit.models.build.embedded_models` gives its jobs (the same settings, so the
    same cache keys)."""
    corpus = build_corpus()
    settings = {"preset": EMBEDDED_DLM["preset"], "seed": EMBEDDED_DLM["seed"], "packages": corpus,
                "tokenizer": corpus_tokenizer(corpus)}
    base = api.pretrain(kind="ar", tokens=EMBEDDED_DLM["ar_tokens"], **settings).path
    return base, api.pretrain(kind="dlm", tokens=EMBEDDED_DLM["dlm_tokens"], init_from=base, **settings).path


def run(ws: Workspace, cfg: AdaptationConfig) -> dict:
    _, texts = ws.data(cfg.seeds[0])
    t0 = time.perf_counter()
    adapted = ws.base(kind="dlm")
    built_s = time.perf_counter() - t0
    pairs = {cfg.base or f"tiny ({cfg.preset})": (ws.base(kind="ar"), adapted)}
    if cfg.beside_embedded:
        pairs["embedded tiny DLM"] = embedded_pair()
    rows = {}
    for name, (ar, dlm) in pairs.items():
        before = dlm_before_adaptation(ar)  # the AR weights read as a DLM, the mask token untrained
        after = load_model(dlm)
        record = json.loads((Path(dlm) / TRAINING_FILE).read_text())
        rows[name] = {
            "before": mask_filling(before, texts, cfg.ratios, description=f"{name}: before"),
            "after": mask_filling(after, texts, cfg.ratios, description=f"{name}: after"),
            "training": {k: record.get(k) for k in ("tokens", "block", "steps", "loss_start", "loss_end",
                                                    "train_config")},
        }
    return {"rows": rows, "n_texts": len(texts), "adaptation_s": round(built_s, 1),
            "note": "adaptation_s is the time this run spent building the adapted model (about 0 when cached)"}


def tables(record: dict) -> list[tuple[str, list[str], list[list[str]]]]:
    rows = record["rows"]
    ratios = list(next(iter(rows.values()))["before"])
    headers = ["model", "stage", "adaptation tokens"] + [h for r in ratios for h in (f"acc@{r}", f"NLL@{r}")]
    cells = []
    for name, row in rows.items():
        for stage in ("before", "after"):
            tokens = f"{row['training']['tokens']:,}" if stage == "after" else "0"
            cells.append([name, stage, tokens] + [v for r in ratios for v in (
                f"{100 * row[stage][r]['accuracy']:.1f}%", f"{row[stage][r]['nll']:.2f}")])
    return [(f"Masked-token accuracy (top-1) and NLL (nats) at each mask ratio on {record['n_texts']} held-out "
             "passages: before adaptation (the AR weights read as a DLM) and after.", headers, cells)]


def setting(exp: dict) -> str:
    """The line of ``table.md`` that says how the adapted model was made (no fine-tuning here)."""
    what = f"`{exp['base']}` (pretrained)" if exp.get("base") else f"the tiny `{exp['preset']}` AR model"
    how = ", ".join(f"{name} {exp[key]:g}" for name, key in (("lr", "adapt_lr"), ("block", "adapt_block"),
                                                             ("batch", "adapt_batch_size")) if exp.get(key))
    return (f"{what} adapted into a DLM on {exp['adapt_tokens']:,} tokens of the pretraining pool"
            + (f" ({how})" if how else " (the preset's training settings)") + "; no fine-tuning.")


register_experiment("dlm-adaptation", config=AdaptationConfig, run=run, tables=tables, setting=setting)
