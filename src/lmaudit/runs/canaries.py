"""Canary exposure as a job: the canaries of a folder (:mod:`lmaudit.privacy.secrets`) and never-inserted fillings
of their format scored by the model, each canary's exposure (:mod:`lmaudit.privacy.exposure`) and its interval.

**Log-perplexity** (what ranks the fillings): the negative log-likelihood, in bits, of the canary's whole text,
summed over every token the AR probe scores (:func:`~lmaudit.probes.ar.probe_ar`: every token after the first, or
after the tokenizer's BOS). The text before the first slot is the same in every filling of a format, so it adds the
same amount to each and leaves the ranks as they are; scoring the whole text (rather than the secret's tokens given
a prefix) keeps the tokens exactly those the model was trained on, where splitting the text at a slot could tokenize
the boundary differently. The first token of a text is scored only after a BOS token: a served model never scores
it, nor a local one whose tokenizer adds no BOS. Before the first slot that token is the same in every filling (the
log-perplexities shift by one constant, the ranks stay); a template that starts with a slot loses a secret token
there, so give it some text before the first slot. A model whose tokens are scored masked (a diffusion model) is
refused: it has no left-to-right log-perplexity.

**Chance, and the controls.** A canary the model never saw ranks uniformly among its fillings: its exposure is a draw
with P(exposure ≥ e) = 2^−e (mean about 1.44 bits, median about 1), not a fixed value, and the interval of one canary's
exposure says how well the sampled candidates locate that canary's rank, not where chance lies. So each canary also
gets ``chance_p`` = 2^−exposure (how often a never-trained canary scores at least as high), and the canaries of each
insertion count are compared with the controls, the canaries inserted 0 times, by the shift of their exposures over
the controls' with a distribution-free interval (:func:`~lmaudit.privacy.exposure.versus_controls`).
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from lmaudit.credentials import mask_secrets
from lmaudit.data.loaders import Record, TextSet
from lmaudit.errors import LmauditError, SettingError
from lmaudit.models.handle import ModelHandle
from lmaudit.privacy.exposure import by_insertions, canary_exposure, chance_p, versus_controls
from lmaudit.privacy.secrets import ALPHABETS, ExposureCanaries
from lmaudit.probes.ar import ARProbeConfig, probe_ar
from lmaudit.probes.segments import segment_mean
from lmaudit.report.exposure import exposure_report
from lmaudit.runs.common import Job, RunResult, register_job, write_results
from lmaudit.settings import boolean, check_settings, integer, seed_value, setting
from lmaudit.utils import cache_dir, stable_seed

TYPE = "canary-exposure"
CANDIDATES_FILE = "candidates.csv"


@dataclass
class ExposureConfig:
    """Settings of a canary exposure audit (recorded in ``results.json``): ``candidates`` never-inserted fillings
    scored to rank each canary among (at most as many as the format has; that many gives the exact rank),
    ``bootstrap`` resamples of the skew-normal fit where a canary beats every candidate, ``seed`` of both draws.

    Examples
    --------
    >>> lmaudit.ExposureConfig(candidates=2000).candidates
    2000
    >>> lmaudit.ExposureConfig(candidates=0)
    Traceback (most recent call last):
    ...
    lmaudit.errors.SettingError: candidates must be an integer between 1 and 10,000,000, got 0
    """

    candidates: int = setting(10_000, check=integer(1, 10_000_000))
    bootstrap: int = setting(50, check=integer(1, 10_000))
    seed: int = setting(0, check=seed_value())
    use_cache: bool = setting(True, check=boolean())

    def __post_init__(self) -> None:
        check_settings(self)


def check_candidates(cfg: ExposureConfig, canaries: ExposureCanaries) -> None:
    """The candidates asked must fit in the never-inserted fillings of the canaries' format (said before any model
    loads)."""
    pool, fmt = canaries.pool_size, canaries.format
    if cfg.candidates > pool:
        shown = fmt.template.replace("{", "{{").replace("}", "}}")
        raise SettingError("candidates", f"{{name}} {cfg.candidates:,}: the format '{shown}' has only {pool:,} "
                                         f"fillings that are no canary's secret ({fmt.size:,} in all, "
                                         f"{len(canaries.secrets)} canaries)",
                           hint=f"use at most {pool:,} candidates ({pool:,} scores every one of them: the exact rank)")


def _ar_bits(loaded: ModelHandle, textset: TextSet, use_cache: bool) -> np.ndarray:
    stats = probe_ar(loaded, textset, ARProbeConfig(), cache_dir=cache_dir() if use_cache else None,
                     description="canaries and candidates")
    lengths = np.diff(stats.offsets)
    return -segment_mean(stats.logp, stats.offsets) * lengths / np.log(2)


# How a model scores a token (its adapter's ``scoring``) maps to how a text's log-perplexity is read: one causal
# pass, or a served model's prompt log-probabilities (a masked model: no entry)
LOG_PERPLEXITY = {"left-to-right": _ar_bits, "served": _ar_bits}


def _scorer(loaded: ModelHandle):
    score = LOG_PERPLEXITY.get(loaded.adapter.scoring)
    if score is None:
        raise LmauditError("canary exposure ranks texts by their left-to-right log-perplexity, which this model "
                           "(its tokens scored masked) does not give",
                           hint="audit an autoregressive model: a folder, a GGUF file or a served model's URL")
    return score


def log_perplexity(loaded: ModelHandle, textset: TextSet, *, use_cache: bool = True) -> np.ndarray:
    """(S,) each text's log-perplexity in bits (module docstring)."""
    return _scorer(loaded)(loaded, textset, use_cache)


def check_alphabet(tokenizer, canaries: ExposureCanaries) -> None:
    """Every character a slot can hold must have a token: one the tokenizer reads as unknown would be a special
    token, which the probe never scores, so fillings holding it would look likelier than they are."""
    unk = getattr(tokenizer, "unk_token_id", None)
    if unk is None:
        return
    chars = sorted({ch for name, _ in canaries.format.slots for ch in ALPHABETS[name]})
    ids = tokenizer([f" {ch}" for ch in chars], add_special_tokens=False)["input_ids"]
    unknown = [ch for ch, row in zip(chars, ids) if unk in row]
    if unknown:
        raise LmauditError(f"the model's tokenizer has no token for {', '.join(map(repr, unknown))} (it reads them "
                           f"as {tokenizer.unk_token!r}, which is not scored): fillings of "
                           f"'{canaries.format.template}' holding them would be ranked wrongly",
                           hint="use slots whose characters the tokenizer knows (digits or letters)")


def _rounded(x: float) -> float:
    return float(round(float(x), 6))


def run_exposure(loaded: ModelHandle, canaries: ExposureCanaries, cfg: ExposureConfig) -> ExposureResult:
    """Score the canaries and ``cfg.candidates`` never-inserted fillings; return the result, its ``results.json``
    payload with ``records`` (one row per canary) and ``candidate_bits`` (the candidates' log-perplexities)."""
    t0 = time.perf_counter()
    check_candidates(cfg, canaries)
    score = _scorer(loaded)  # a model without a log-perplexity is refused before anything is drawn
    check_alphabet(loaded.tokenizer, canaries)
    fmt = canaries.format
    rng = np.random.default_rng(stable_seed("exposure-candidates", fmt.template, cfg.seed))
    drawn = fmt.draw(cfg.candidates, rng, exclude=canaries.secrets)
    records = [Record(id=i, target=t) for i, t in zip(canaries.ids, canaries.texts)]
    records += [Record(id=f"candidate:{j}", target=fmt.fill(s)) for j, s in enumerate(drawn)]
    bits = score(loaded, TextSet(records, source=f"canaries of {canaries.folder}"), cfg.use_cache)
    mine, theirs = bits[:len(canaries.ids)], bits[len(canaries.ids):]
    found = canary_exposure(mine, theirs, pool_size=canaries.pool_size, bootstrap=cfg.bootstrap, seed=cfg.seed)
    rows = {"id": list(canaries.ids), "insertions": list(canaries.insertions),
            "log_perplexity_bits": [_rounded(v) for v in mine], "exposure": [_rounded(v) for v in found["exposure"]],
            "exposure_lo": [_rounded(v) for v in found["lo"]], "exposure_hi": [_rounded(v) for v in found["hi"]],
            "estimate": list(found["estimate"]), "beaten_by": [int(k) for k in found["beaten"]],
            "log2_rank": [_rounded(v) for v in found["log2_rank"]],
            "chance_p": [float(f"{v:.6g}") for v in chance_p(found["exposure"])]}
    exposure = {cid: {"exposure": rows["exposure"][i], "exposure_ci95": [rows["exposure_lo"][i],
                                                                         rows["exposure_hi"][i]],
                      "insertions": rows["insertions"][i], "estimate": rows["estimate"][i],
                      "log_perplexity_bits": rows["log_perplexity_bits"][i], "beaten_by": rows["beaten_by"][i],
                      "log2_rank": rows["log2_rank"][i], "chance_p": rows["chance_p"][i]}
                for i, cid in enumerate(canaries.ids)}
    # the model as mia records it (folder, fingerprint, kind, precision; a served one's URL without credentials)
    facts = loaded.facts()
    facts["path"] = mask_secrets(facts.get("path"))
    payload = {"type": TYPE, "model": mask_secrets(loaded.path), "target": facts,
               "canaries": mask_secrets(str(canaries.folder)),
               "format": fmt.template,
               "space_size": fmt.size, "space_log2": fmt.size_log2, "n_canaries": len(canaries.ids),
               "config": asdict(cfg),
               "log_perplexity": "bits: -sum of log2 p over every scored token of the whole canary text",
               "reference": {"pool": canaries.pool_size, "candidates": len(drawn),
                             "enumerated": len(drawn) == canaries.pool_size,
                             "max_exposure": math.log2(canaries.pool_size + 1),
                             "median_bits": float(np.median(theirs)), "min_bits": float(theirs.min()),
                             "max_bits": float(theirs.max()), "skewnorm": found["fit"]},
               "exposure": exposure, "by_insertions": by_insertions(found["exposure"], canaries.insertions),
               "versus_controls": versus_controls(found["exposure"], canaries.insertions,
                                                  space_size=canaries.pool_size + 1, values=mine,
                                                  candidates=theirs, seed=cfg.seed),
               "runtime_s": round(time.perf_counter() - t0, 2), "records": rows,
               "candidate_bits": [float(v) for v in theirs]}
    return ExposureResult(payload)


def versus_controls_text(found: dict | None) -> str:
    """One line: each insertion count's shift over the controls (never trained on), with its interval."""
    if not found:
        return "no comparison with controls recorded"
    if found["controls"] is None:
        return ("no controls (canaries inserted 0 times) to compare with: chance alone is the baseline (median "
                f"{found['chance']['median']:.2f}, mean {found['chance']['mean']:.2f} bits)")
    parts = [f"{k}× {g['shift']:+.2f} [{g['ci'][0]:+.2f}, {g['ci'][1]:+.2f}] ({g['verdict']})"
             for k, g in found["groups"].items()]
    c = found["controls"]
    return (f"over the {c['n']} controls (median {c['median']:.2f} bits, chance {found['chance']['median']:.2f}): "
            + (", ".join(parts) or "no trained canaries"))


class ExposureResult(RunResult):
    """A canary exposure audit: ``to_frame()`` has one row per canary (as ``records.csv``: its insertions,
    log-perplexity, exposure and 95% interval, which estimate gave it, and ``chance_p``); ``payload["exposure"]``
    is what ``lmaudit gate --max-exposure`` reads, ``payload["by_insertions"]`` the exposures per insertion count,
    ``payload["versus_controls"]`` each count against the controls (inserted 0 times) and chance."""

    def headline(self) -> str:
        exposure = self.payload["exposure"]
        worst = max(exposure, key=lambda c: exposure[c]["exposure"])
        groups = ", ".join(f"{k}×: {g['median']:.1f}" for k, g in self.payload["by_insertions"].items())
        return (f"largest exposure {exposure[worst]['exposure']:.2f} bits ({worst}, {exposure[worst]['insertions']} "
                f"insertions) of at most {self.payload['reference']['max_exposure']:.2f}; median by insertions "
                f"{groups}; {versus_controls_text(self.payload.get('versus_controls'))}")

    def _write(self, out: Path, report: bool) -> Path:
        body = {k: v for k, v in self.payload.items() if k not in ("records", "candidate_bits")}
        tables = {"records.csv": pd.DataFrame(self.payload["records"])}
        if "candidate_bits" in self.payload:
            tables[CANDIDATES_FILE] = pd.DataFrame({"log_perplexity_bits": self.payload["candidate_bits"]})
        return write_results(out, body, kind=TYPE, tables=tables, report=report)

    @classmethod
    def load(cls, folder: str | Path) -> ExposureResult:
        """The result a run wrote to ``folder``, its candidates' log-perplexities too."""
        result = super().load(folder)
        path = Path(folder) / CANDIDATES_FILE
        if path.is_file():
            result.payload["candidate_bits"] = pd.read_csv(path)["log_perplexity_bits"].tolist()
        return result


JOB = register_job(Job("canaries", TYPE, "canaries", ExposureResult, run_exposure, ExposureConfig, exposure_report))
