"""``pii-reconstruction``: top-1 ASR of redacted e-mails and phones per ranking signal (DLM; AR with ``ar``).

The DLM adapted from the AR base is fine-tuned on synthetic PII messages (each ``repeats``
times); for ``n_targets`` of them per field the value is replaced by a placeholder and
reconstructed (``[reconstruct]``: keys of ReconstructConfig, each a value or a table of one
per field; ``include_truth = true`` is inference mode), reference = the DLM base; α of the
combined signal is fitted on ``n_calibration`` further training messages; ``n_unseen``
messages never trained on are the control. Payload: ``mode`` (generation or inference),
``asr`` (per signal, per field: percent per seed), ``generation_asr`` (inference mode: the
same for the generated candidates only), ``unseen_asr`` and ``n_unseen`` (the control,
when asked for), ``alpha_sweep`` (per field: the α grid and the combined signal's percent
per α, per seed), ``fields`` (per field, per seed: coverage, α, seconds per record,
distinct candidates, the control's and the AR model's coverage), ``ranks`` and (inference
mode) ``generation_ranks`` (per signal, per field, per seed: the true value's rank per
record, null when nothing was generated; the paired comparisons are computed from them),
``n_targets`` and ``n_calibration``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from dataclasses import fields as dataclass_fields

import numpy as np

from lmaudit import api
from lmaudit.data.loaders import TextSet
from lmaudit.errors import LmauditError
from lmaudit.experiments.config import BaseConfig
from lmaudit.experiments.registry import register_experiment
from lmaudit.experiments.workspace import Workspace
from lmaudit.extraction.reconstruct import paired_signals, redact, wilson_interval
from lmaudit.runs.pii import ReconstructConfig
from lmaudit.seeds import seed_std
from lmaudit.settings import boolean, each, integer, setting, table, text


@dataclass
class ReconstructionConfig(BaseConfig):
    pii_fields: list[str] = setting(default_factory=lambda: ["email", "phone"], check=each(text()))
    reconstruct: dict = setting(default_factory=dict, check=table())  # keys of ReconstructConfig
    n_targets: int = setting(50, check=integer(1))  # redacted records per field
    n_calibration: int = setting(10, check=integer(1))  # known records to fit alpha on
    repeats: int = setting(1, check=integer(1))  # copies of each message in the fine-tuning data
    # control: messages never trained on, reconstructed the same way (with the fitted α)
    n_unseen: int = setting(0, check=integer(0))
    # also the AR model of the same lineage, fine-tuned on the same messages (signal "AR ce")
    ar: bool = setting(False, check=boolean())


def _collect(store: dict, by_signal: dict, pii_field: str, prefix: str = "") -> None:
    """Append each signal's ASR percent of one seed to ``store[prefix + signal][pii_field]``."""
    for signal, a in by_signal.items():
        store.setdefault(prefix + signal, {}).setdefault(pii_field, []).append(a["percent"])


def _collect_ranks(store: dict, ranks: dict, pii_field: str, prefix: str = "") -> None:
    """Append each signal's per-record ranks of one seed to ``store[prefix + signal][pii_field]``."""
    for signal, r in ranks.items():
        store.setdefault(prefix + signal, {}).setdefault(pii_field, []).append(r)


def _for_field(raw: dict, pii_field: str) -> dict:
    """``[reconstruct]`` for one field: a table value keyed by field (``mask_length = {email = 16, phone = 12}``)
    gives that field's value."""
    out = dict(raw)
    for key, value in raw.items():
        if isinstance(value, dict):
            if pii_field not in value:
                raise LmauditError(f"key 'reconstruct.{key}' has no value for field '{pii_field}'",
                                   hint=f"give one per field of pii_fields, e.g. {key} = {{ {pii_field} = ... }}")
            out[key] = value[pii_field]
    return out


def _redacted(records: list, source: str, pii_field: str) -> TextSet | None:
    """The records with their ``pii_field`` value replaced by the placeholder (None for no records)."""
    return redact(TextSet(records, source=source), pii_field) if records else None


def _reconstruct(model, records: TextSet, config: ReconstructConfig, *, reference=None, calibration=None) -> dict:
    """PII reconstruction through the interface (:func:`lmaudit.api.reconstruct_pii`): the job's payload."""
    return api.reconstruct_pii(model, records, reference=reference, calibration=calibration, config=config).payload


def run(ws: Workspace, cfg: ReconstructionConfig) -> dict:
    """Top-1 ASR per ranking signal for redacted e-mails and phones of training messages (DLM; AR with ``ar``)."""
    known = {f.name for f in dataclass_fields(ReconstructConfig)} - {"field", "seed"}  # set per run
    for key in cfg.reconstruct:
        if key not in known:
            raise LmauditError(f"unknown key 'reconstruct.{key}'", hint=f"known keys: {', '.join(sorted(known))}")
    if cfg.n_targets + cfg.n_calibration > cfg.n_members:
        raise LmauditError(f"n_targets + n_calibration = {cfg.n_targets + cfg.n_calibration} training messages "
                           f"needed, n_members = {cfg.n_members}", hint="raise n_members or lower the others")
    if cfg.n_unseen > cfg.n_nonmembers:
        raise LmauditError(f"n_unseen = {cfg.n_unseen} unseen messages needed, n_nonmembers = {cfg.n_nonmembers}")
    store: dict[str, dict] = {"asr": {}, "generation_asr": {}, "unseen_asr": {}, "ranks": {}, "generation_ranks": {}}
    sweep: dict[str, dict] = {}
    extra: dict[str, dict[str, list]] = {}
    mode = "generation"
    for seed in cfg.seeds:
        train, unseen, models = ws.pii_models(seed, kinds=("dlm", "ar") if cfg.ar else ("dlm",), repeats=cfg.repeats)
        target, base = ws.load(models["dlm"]), ws.load(ws.base(kind="dlm"))
        for pii_field in cfg.pii_fields:
            recs = _redacted(train.records[: cfg.n_targets], train.source, pii_field)
            calib = _redacted(train.records[cfg.n_targets : cfg.n_targets + cfg.n_calibration], train.source, pii_field)
            control = _redacted(unseen.records[: cfg.n_unseen], unseen.source, pii_field)
            rcfg = ReconstructConfig(**{"field": pii_field, **_for_field(cfg.reconstruct, pii_field), "seed": seed})
            t0 = time.perf_counter()
            out = _reconstruct(target, recs, rcfg, reference=base, calibration=calib)
            per_record = (time.perf_counter() - t0) / (len(recs) + (len(calib) if calib else 0))
            mode = out["mode"]
            fitted = replace(rcfg, alpha=out["alpha"] if out["alpha"] is not None else rcfg.alpha)
            e = extra.setdefault(pii_field, {"coverage": [], "alpha": [], "seconds_per_record": [],
                                             "mean_candidates": []})
            e["coverage"].append(out["coverage"]["percent"])
            e["alpha"].append(out["alpha"])
            e["seconds_per_record"].append(per_record)
            e["mean_candidates"].append(out["mean_candidates"])
            if out["alpha_sweep"] is not None:
                sw = sweep.setdefault(pii_field, {"alpha": out["alpha_sweep"]["alpha"], "percent": []})
                sw["percent"].append(out["alpha_sweep"]["percent"])
            runs = [("", target, base, out)]
            if cfg.ar:  # the AR model continues the left context; ce is its only signal (Q-Skew needs a DLM)
                ar = ws.load(models["ar"])
                runs.append(("AR ", ar, None, _reconstruct(ar, recs, rcfg)))
                e.setdefault("ar_coverage", []).append(runs[-1][3]["coverage"]["percent"])
            for prefix, model, ref, res in runs:
                _collect(store["asr"], res["asr"], pii_field, prefix)
                _collect(store["generation_asr"], res.get("generation", {}).get("asr", {}), pii_field, prefix)
                _collect_ranks(store["ranks"], {sig: res["records"][f"rank_{sig}"] for sig in res["asr"]}, pii_field,
                               prefix)
                _collect_ranks(store["generation_ranks"], res.get("generation", {}).get("ranks", {}), pii_field, prefix)
                if control:
                    ctrl = _reconstruct(model, control, fitted, reference=ref)
                    _collect(store["unseen_asr"], ctrl["asr"], pii_field, prefix)
                    e.setdefault(f"{prefix.strip().lower() + '_' if prefix else ''}unseen_coverage", []).append(
                        ctrl["coverage"]["percent"])
    payload = {"mode": mode, "asr": store["asr"], "alpha_sweep": sweep, "fields": extra, "n_targets": cfg.n_targets,
               "n_calibration": cfg.n_calibration, "ranks": store["ranks"]}
    if store["generation_asr"]:
        payload.update(generation_asr=store["generation_asr"], generation_ranks=store["generation_ranks"])
    if store["unseen_asr"]:
        payload.update(unseen_asr=store["unseen_asr"], n_unseen=cfg.n_unseen)
    return payload


def _pm(values) -> str:
    return f"{np.mean(values):.1f} ± {seed_std(values):.1f}"


def _pooled(percents, n: int) -> str:
    """The Wilson 95% interval (%) of every seed's records pooled: Σ hits of n·seeds (hits = percent·n/100)."""
    hits = sum(round(p * n / 100) for p in percents)
    lo, hi = wilson_interval(hits, n * len(percents))
    return f"[{100 * lo:.1f}, {100 * hi:.1f}]"


def _asr_table(by_signal: dict, fields: list[str], n: int) -> tuple[list[str], list[list[str]]]:
    header = ["signal"] + [h for f in fields for h in (f, f"{f} 95% interval")]
    rows = [[signal] + [c for f in fields for c in (_pm(by_field[f]), _pooled(by_field[f], n))]
            for signal, by_field in by_signal.items()]
    return header, rows


PAIRS = (("combined_paper", "ce"), ("combined", "ce"), ("skew_pii", "ce"), ("skew_context", "ce"), ("ce", "AR ce"))


def paired_tables(record: dict) -> list[tuple[str, list[str], list[list[str]]]]:
    """ASR(a) − ASR(b) on the same records (every seed pooled) with the paired bootstrap 95% interval, per mode."""
    rows = []
    for a, b in PAIRS:
        for mode, f, d, lo, hi in paired_signals(record, a, b):
            rows.append([mode, f, f"{a} − {b}", f"{100 * d:+.1f}", f"[{100 * lo:+.1f}, {100 * hi:+.1f}]",
                         f"{a} ahead" if lo > 0 else f"{b} ahead" if hi < 0 else "tied"])
    rows.sort(key=lambda r: r[0] != "inference")  # stable: inference first, then generation, each in pair order
    if not rows:  # results written before ranks were stored
        return []
    return [("Top-1 ASR difference (points) between two signals on the same records (every seed pooled), with the "
             "paired bootstrap 95% interval (2,000 resamples of records): 'ahead' only when it excludes 0; "
             "generation mode ranks the generated candidates only.",
             ["mode", "field", "signals", "difference", "95% CI", "verdict"], rows)]


def tables(record: dict) -> list[tuple[str, list[str], list[list[str]]]]:
    """ASR per signal and field (mean ± std over seeds, pooled Wilson 95% interval), generation-mode ASR (inference
    runs), the α sweep, then coverage, α, candidates and cost per field."""
    fields = list(record["fields"])
    n, seeds = record["n_targets"], len(next(iter(record["fields"].values()))["coverage"])
    mode = record.get("mode", "generation")
    what = ("the true value added to the generated candidates (inference mode)" if mode == "inference" else
            "generated candidates only (generation mode: a record whose value was never generated is a miss)")
    caption = (f"Top-1 attack success rate (%) on {n} redacted training messages per field, {what}: mean ± std over "
               f"{seeds} seed(s), and the Wilson 95% interval of the {n * seeds} records of all seeds pooled; α "
               f"fitted on {record['n_calibration']} further known messages."
               + (" 'AR ce': the AR model of the same lineage fine-tuned on the same messages, generating from the "
                  "left context, ranked by cross-entropy." if any(s.startswith("AR ") for s in record["asr"]) else ""))
    out = [(caption, *_asr_table(record["asr"], fields, n))]
    if "generation_asr" in record:
        out.append(("The same scores in generation mode: the ranks among the generated candidates only.",
                    *_asr_table(record["generation_asr"], fields, n)))
    if "unseen_asr" in record:
        m = record["n_unseen"]
        out.append((f"Control: {m} messages per field never trained on, reconstructed the same way ({mode} mode, the "
                    f"fitted α): what the signals reach without memorisation (e.g. a value guessed from the name, or a "
                    f"well-formed value outranking malformed candidates); pooled Wilson 95% interval of {m * seeds} "
                    "records.", *_asr_table(record["unseen_asr"], fields, m)))
    out += paired_tables(record)
    sweep = record.get("alpha_sweep") or {}
    if sweep:
        grid = next(iter(sweep.values()))["alpha"]
        rows = [[f"{a:g}"] + [_pm([per_seed[i] for per_seed in sweep[f]["percent"]]) if f in sweep else "-"
                              for f in fields] for i, a in enumerate(grid)]
        out.append(("ASR (%) of combined = −(1−α)·Z(ce) + α·Z(skew) for a fixed α (mean ± std over seeds; the Q-Skew "
                    "paper's Appendix F.1): α = 0 is ce alone, α = 1 the Q-Skew signal alone.",
                    ["α"] + fields, rows))
    info = [[label] + [_pm(record["fields"][f][key]) for f in fields]
            for label, key in (("true value among generated candidates (%)", "coverage"), ("fitted α", "alpha"),
                               ("distinct candidates per record", "mean_candidates"),
                               ("seconds per record", "seconds_per_record"))]
    info.insert(1, ["coverage 95% interval (pooled)"] + [_pooled(record["fields"][f]["coverage"], n) for f in fields])
    for key, label in (("unseen_coverage", "unseen messages: true value among generated candidates (%)"),
                       ("ar_coverage", "AR: true value among generated candidates (%)"),
                       ("ar_unseen_coverage", "AR, unseen messages: true value among generated candidates (%)")):
        if key in record["fields"][fields[0]]:
            info.insert(len(info) - 3, [label] + [_pm(record["fields"][f][key]) for f in fields])
    out.append(("Candidates, α and cost.", [""] + fields, info))
    return out


register_experiment("pii-reconstruction", config=ReconstructionConfig, run=run, tables=tables)
