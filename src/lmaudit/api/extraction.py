"""Extraction jobs: (n, p)-discoverable extraction, PII reconstruction, canary exposure and plain generation."""

from __future__ import annotations

import numpy as np
import pandas as pd

from lmaudit.data.given import texts_of
from lmaudit.extraction.reconstruct import redacted_records
from lmaudit.models.generate import GenerateConfig
from lmaudit.models.loading import load_models
from lmaudit.privacy.secrets import read_exposure_canaries
from lmaudit.runs.canaries import ExposureConfig, ExposureResult, check_candidates, run_exposure
from lmaudit.runs.extract import ExtractConfig, ExtractionResult, run_extraction
from lmaudit.runs.inputs import check_backend, running
from lmaudit.runs.pii import ReconstructConfig, ReconstructionResult, run_reconstruction

# what lmaudit.api (and lmaudit) exports of this module: its jobs and the settings they take
__all__ = ["extract", "reconstruct_pii", "canaries", "generate", "ExtractConfig", "ReconstructConfig",
           "ExposureConfig"]


def extract(model, data, *, config: ExtractConfig | None = None, text_field: str = "text", split: str | None = None,
            show_pii: bool = False, backend=None, **load_options) -> ExtractionResult:
    """(n, p)-discoverable extraction of every record's masked tokens (``config.mask``, ``config.steps``, ...).

    The data is read before the model is loaded. Record ids that look like e-mail addresses or phone numbers are
    masked in ``records.csv`` unless ``show_pii``; ``backend`` as in :func:`mia`.

    Examples
    --------
    >>> found = lmaudit.extract(MODEL, "members.jsonl", config=lmaudit.ExtractConfig(mask="suffix:4", n=100))
    >>> found.type, len(found.to_frame())
    ('extraction', 12)
    """
    texts = texts_of(data, text_field, split)
    check_backend(backend)
    target, _ = load_models(model, **load_options)
    with running(backend, target):
        return run_extraction(target, texts, config or ExtractConfig(), show_pii=show_pii)


def reconstruct_pii(model, records, *, reference=None, calibration=None, config: ReconstructConfig | None = None,
                    placeholder: str = "[REDACTED]", show_pii: bool = False, text_field: str = "text",
                    split: str | None = None, backend=None, **load_options) -> ReconstructionResult:
    """Recover a redacted field of each record; top-1 attack success rate per ranking signal.

    The records (and calibration records) are read and checked before any model is loaded; ``backend`` as in
    :func:`mia`.

    Examples
    --------
    >>> rec = lmaudit.reconstruct_pii(MODEL, "redacted.jsonl",
    ...                               config=lmaudit.ReconstructConfig(field="email", candidates=4))
    >>> rec.type, len(rec.to_frame())
    ('pii-reconstruction', 3)
    """
    cfg = config or ReconstructConfig()
    recs = redacted_records(texts_of(records, text_field, split), cfg.field, placeholder=placeholder)
    calib = None if calibration is None else redacted_records(texts_of(calibration, text_field, split), cfg.field,
                                                              placeholder=placeholder)
    check_backend(backend)
    target, ref = load_models(model, reference, **load_options)
    with running(backend, target, ref):
        return run_reconstruction(target, recs, cfg, reference=ref, calibration=calib, placeholder=placeholder,
                                  show_pii=show_pii)


def canaries(model, canaries_dir, *, config: ExposureConfig | None = None, backend=None,
             **load_options) -> ExposureResult:
    """Canary exposure (Carlini et al., 2019) of the canaries of ``canaries_dir`` (a folder from ``lmaudit canaries
    make``, or :func:`lmaudit.api.secrets.write_exposure_canaries`): each canary's log-perplexity under ``model``
    ranked among ``config.candidates`` never-inserted fillings of its format, exposure = log₂|R| − log₂ rank in bits
    with a 95% interval (:mod:`lmaudit.privacy.exposure`), and the exposures per insertion count.

    The canary folder and the settings are checked before the model loads. ``model``: any autoregressive model
    source (a folder, a GGUF file, a served model's URL with ``tokenizer=``); ``backend`` as in :func:`mia`.

    Examples
    --------
    >>> from lmaudit.api.secrets import write_exposure_canaries
    >>> _ = write_exposure_canaries("pins", "my pin is {digits:3}", n=4, insertions=[0, 2])
    >>> found = lmaudit.canaries(MODEL, "pins", config=lmaudit.ExposureConfig(candidates=200))
    >>> found.type, sorted(found.to_frame()["insertions"]), sorted(found["by_insertions"])
    ('canary-exposure', [0, 0, 2, 2], ['0', '2'])
    >>> e = found["exposure"]["canary-0"]
    >>> bool(e["exposure_ci95"][0] <= e["exposure"] <= e["exposure_ci95"][1] <= found["space_log2"])
    True
    """
    planted = read_exposure_canaries(canaries_dir)
    cfg = config or ExposureConfig()
    check_candidates(cfg, planted)
    check_backend(backend)
    target, _ = load_models(model, **load_options)
    with running(backend, target):
        return run_exposure(target, planted, cfg)


def generate(model, prompts, *, gen_length: int = 32, steps: int = 32, block_length: int | None = None,
             temperature: float = 1.0, remasking: str = "low_confidence", seed: int = 0,
             **load_options) -> pd.DataFrame:
    """A continuation of ``gen_length`` tokens for each prompt (a data file or a TextSet): left-to-right sampling for
    an AR model, LLaDA-style unmasking in ``steps`` steps for a DLM (``block_length``: semi-autoregressive blocks).
    One row per prompt: ``id``, ``prompt``, ``continuation``; prompt i samples with seed ``seed + i``.

    Examples
    --------
    >>> rows = lmaudit.generate(MODEL, "prompts.jsonl", gen_length=4, seed=0)
    >>> list(rows.columns), len(rows)
    (['id', 'prompt', 'continuation'], 2)
    """
    GenerateConfig(gen_length=gen_length, steps=steps, block_length=block_length, temperature=temperature,
                   remasking=remasking, seed=seed)  # every setting checked before the prompts are read
    texts = texts_of(prompts)
    target, _ = load_models(model, **load_options)
    tok = target.tokenizer
    rows = []
    with running(None, target):
        for i, rec in enumerate(texts.records):
            prompt = np.asarray(tok(rec.text)["input_ids"], dtype=np.int64)
            x = np.concatenate([prompt, np.zeros(gen_length, dtype=np.int64)])  # the continuation is filled in
            new = target.adapter.fill(x, np.arange(len(prompt), len(x)), samples=1, steps=steps,
                                      temperature=temperature, remasking=remasking, block_length=block_length,
                                      seed=seed + i)[0]
            rows.append({"id": rec.id, "prompt": rec.text, "continuation": tok.decode(new)})
    return pd.DataFrame(rows, columns=["id", "prompt", "continuation"])
