"""Membership jobs: per-record membership inference, its probes and scores, and set-level audits."""

from __future__ import annotations

import numpy as np

from lmaudit.data.given import given_texts, texts_of
from lmaudit.data.loaders import load_member_sets
from lmaudit.errors import LmauditError, SettingError, spell
from lmaudit.models.loading import load_model, load_models
from lmaudit.models.shadows import ShadowSet
from lmaudit.runs.audit_set import AuditConfig, AuditResult, estimate_rho, run_set_audit, suspect_membership
from lmaudit.runs.dataset_inference import InferenceConfig, InferenceResult, run_dataset_inference
from lmaudit.runs.inputs import check_backend, running
from lmaudit.runs.mia import MIAResult, RunConfig, run_mia, score_set
from lmaudit.runs.privleak import check_planned, privleak_against, read_retrained
from lmaudit.runs.records import ProbeRecords, probe_records, score_records

# what lmaudit.api (and lmaudit) exports of this module: its jobs and the settings they take
__all__ = ["mia", "probe", "score", "score_texts", "audit_set", "audit_features", "dataset_inference", "RunConfig",
           "AuditConfig", "InferenceConfig"]


def mia(model, members=None, nonmembers=None, *, data=None, label_field: str | None = None, text_field: str = "text",
        split: str | None = None, reference=None, shadows=None, config: RunConfig | None = None,
        retrained=None, backend=None, **load_options) -> MIAResult:
    """Membership inference: every attack that can run (or ``config.attacks``), AUC and TPR@FPR per attack.

    ``model``/``reference``: folders or loaded models; ``members``/``nonmembers``:
    data files or :class:`~lmaudit.data.loaders.TextSet`, or instead one labelled file
    ``data`` whose ``label_field`` is 1 for members and 0 for non-members (as WikiMIA and
    MIMIR ship); ``text_field`` and ``split`` as the command's options; ``shadows``: a
    folder from ``lmaudit shadows``. ``load_options`` go to :func:`load_model`. The data
    is read before any model is loaded. ``retrained``: the folder (or result) of the same run on a model
    retrained without the members; the result then holds MUSE's PrivLeak per attack (``result.privleak``), once
    the two runs are found comparable (:func:`~lmaudit.runs.privleak.check_comparable`): their texts before any model
    loads, their models (kind, fingerprint) and settings with PrivLeak, one step after the run. ``members`` and
    ``nonmembers`` may also be lists of strings (records ``members:0``, ...). ``backend``: where the shard work runs
    (:func:`~lmaudit.runs.inputs.on_backend`: None the current one, ``"local"``, ``"ray"`` or a backend object).

    Examples
    --------
    >>> result = lmaudit.mia(MODEL, "members.jsonl", "nonmembers.jsonl",
    ...                      config=lmaudit.RunConfig(attacks=["loss", "zlib"], n_bootstrap=50))
    >>> result.n_members, result.n_nonmembers, sorted(result.attacks)
    (12, 12, ['loss', 'zlib'])
    >>> lo, hi = result.attacks["loss"]["auc_ci95"]
    >>> bool(lo <= result.attacks["loss"]["auc"] <= hi)
    True
    """
    mem, non = load_member_sets(given_texts(members, "members"), given_texts(nonmembers, "nonmembers"), data=data,
                                label_field=label_field, text_field=text_field, split=split)
    shadow_set = None if shadows is None else ShadowSet.load(shadows)
    config = config or RunConfig()
    other, where = (None, None) if retrained is None else read_retrained(retrained)
    if other is not None:
        check_planned(other, where, mem, non, config)
    check_backend(backend)
    target, ref = load_models(model, reference, **load_options)
    with running(backend, target, ref):
        result = run_mia(target, mem, non, reference=ref, config=config, shadows=shadow_set)
    if other is not None:
        result.privleak = privleak_against(result, other, where)
    return result


def probe(model, texts, *, reference=None, shadows=None, config: RunConfig | None = None, backend=None,
          **load_options) -> ProbeRecords:
    """The probe records of ``texts`` for ``config.attacks`` (None: every attack that can run), to score with
    :func:`score` under other attacks or parameters without running the model again.

    ``texts``: a data file or a :class:`~lmaudit.data.loaders.TextSet`; ``model``, ``reference``,
    ``shadows``, ``backend`` and ``load_options`` as in :func:`mia`. Probes share the cache of ``mia``.

    Examples
    --------
    >>> records = lmaudit.probe(MODEL, "members.jsonl", config=lmaudit.RunConfig(attacks=["min_k"]))
    >>> len(records), records.attacks
    (12, ['min_k'])
    """
    textset = texts_of(texts)
    shadow_set = None if shadows is None else ShadowSet.load(shadows)
    check_backend(backend)
    target, ref = load_models(model, reference, **load_options)
    with running(backend, target, ref):
        return probe_records(target, textset, reference=ref, shadows=shadow_set, config=config)


def score(records: ProbeRecords, attacks: list[str] | None = None, *,
          params: dict[str, dict] | None = None) -> dict[str, np.ndarray]:
    """{attack: scores, higher = more member-like} from probe records alone (no model, no forward pass).

    ``attacks`` (None: those probed for) with ``params`` over each attack's defaults, e.g.
    ``lmaudit.score(records, ["min_k"], params={"min_k": {"k": 0.5}})``. An attack that reads
    another probe than the records hold (a DLM attack with another mask plan or budget) is an error.

    Examples
    --------
    >>> records = lmaudit.probe(MODEL, "members.jsonl", config=lmaudit.RunConfig(attacks=["min_k"]))
    >>> scores = lmaudit.score(records, ["min_k", "loss"], params={"min_k": {"k": 0.5}})
    >>> sorted(scores), scores["loss"].shape
    (['loss', 'min_k'], (12,))
    """
    return score_records(records, attacks, params=params)


def score_texts(model, texts, *, reference=None, shadows=None, config: RunConfig | None = None, backend=None,
                **load_options) -> dict[str, np.ndarray]:
    """{attack: scores, higher = more member-like} of one unlabelled text set: the scores :func:`mia` gives those
    texts (the same probes and probe cache), without labels or metrics. Arguments as in :func:`mia`; ``shadows`` a
    folder or a :class:`~lmaudit.models.shadows.ShadowSet`.

    Examples
    --------
    >>> scores = lmaudit.score_texts(MODEL, "suspect.jsonl", config=lmaudit.RunConfig(attacks=["loss", "zlib"]))
    >>> sorted(scores), scores["loss"].shape
    (['loss', 'zlib'], (8,))
    """
    textset = texts_of(texts)
    shadow_set = shadows if shadows is None or isinstance(shadows, ShadowSet) else ShadowSet.load(shadows)
    check_backend(backend)
    target, ref = load_models(model, reference, **load_options)
    with running(backend, target, ref):
        return score_set(target, textset, reference=ref, config=config, shadows=shadow_set)


def audit_features(members, nonmembers, suspect, *, config: AuditConfig | None = None) -> dict[str, dict]:
    """ρ of a suspect set from features already measured (no model): ``members``, ``nonmembers`` and ``suspect``
    are (n, k) arrays of one row per text (attack scores, hidden states), standardised together as
    :func:`audit_set` does; {method: its estimate, with ``trained_fraction`` = 1 − ρ} for ``config.method``.

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> m, n = rng.normal(1.0, 1.0, (60, 2)), rng.normal(0.0, 1.0, (60, 2))
    >>> est = lmaudit.audit_features(m, n, np.vstack([m[:30], n[:30]]),
    ...                              config=lmaudit.AuditConfig(method="smi", bootstrap=20))
    >>> sorted(est), bool(0.0 <= est["smi"]["rho"] <= 1.0)
    (['smi'], True)
    """
    config = config or AuditConfig()
    if config.method == "duci":
        raise SettingError("method", "{name} duci reads shadow models' scores, not features",
                           hint="use smi, smi-m or both")
    return estimate_rho(np.asarray(members), np.asarray(nonmembers), np.asarray(suspect), config)


def audit_set(model, members=None, nonmembers=None, suspect=None, *, data=None, label_field: str | None = None,
              text_field: str = "text", split: str | None = None, reference=None, shadows=None,
              config: AuditConfig | None = None, backend=None, **load_options) -> AuditResult:
    """Set-level audit: ρ, the fraction of ``suspect`` that behaves like non-members (SMI / SMI-M, 90% intervals);
    with ``config.method="duci"``, DUCI's estimate of the proportion of ``suspect`` used in training (1 − ρ's scale),
    calibrated on ``shadows`` (a folder from ``lmaudit shadows`` whose pool held the suspect set, or a
    :class:`~lmaudit.models.shadows.ShadowSet`) instead of members and non-members.

    Members and non-members as in :func:`mia` (two files or lists of texts, or one labelled ``data`` file);
    ``suspect``: a data file, text set or list of texts. The data is read before any model is loaded; ``backend``
    as in :func:`mia`. DUCI loads each shadow as a model of the target's kind with ``load_options``' dtype and device.

    Examples
    --------
    >>> audit = lmaudit.audit_set(MODEL, "members.jsonl", "nonmembers.jsonl", "suspect.jsonl",
    ...                           config=lmaudit.AuditConfig(method="smi", bootstrap=20))
    >>> audit.type, list(audit.to_frame()["method"])
    ('set-audit', ['smi'])
    """
    if suspect is None:
        raise SettingError("suspect", "missing {name}: the set to audit", hint="a data file or a TextSet")
    config = config or AuditConfig()
    if config.method == "duci":
        return _duci(model, members, nonmembers, suspect, data=data, text_field=text_field, split=split,
                     reference=reference, shadows=shadows, config=config, backend=backend, **load_options)
    if shadows is not None:
        raise LmauditError("shadow models calibrate method duci only", hint="pass {method}, or leave out {shadows}",
                           options={"method": spell("method", "duci"), "shadows": ("shadows=", "--shadows")})
    mem, non = load_member_sets(given_texts(members, "members"), given_texts(nonmembers, "nonmembers"), data=data,
                                label_field=label_field, text_field=text_field, split=split)
    sus = texts_of(suspect, text_field, split, name="suspect")
    check_backend(backend)
    target, ref = load_models(model, reference, **load_options)
    with running(backend, target, ref):
        return run_set_audit(target, sus, config, members=mem, nonmembers=non, reference=ref)


_SHADOW_LOADING = ("dtype", "device", "trust_remote_code", "allow_pickle", "mask_token_id", "shift_logits")


def _duci(model, members, nonmembers, suspect, *, data, text_field, split, reference, shadows, config, backend,
          **load_options) -> AuditResult:
    """:func:`audit_set` with method duci: the suspect set and the shadows read (and checked) before any model."""
    names = {"method": spell("method", "duci"), "shadows": ("shadows=", "--shadows"),
             "members": ("members=", "--members"), "nonmembers": ("nonmembers=", "--nonmembers"),
             "data": ("data=", "--data")}
    if shadows is None:
        raise LmauditError("{method} calibrates its attack on reference models of known membership: it needs "
                           "{shadows} DIR", options=names,
                           hint="train them with 'lmaudit shadows --model BASE --pool FILE --out DIR' on a pool that "
                                "holds the suspect set")
    given = [n for n, v in (("members", members), ("nonmembers", nonmembers), ("data", data)) if v is not None]
    if given:
        raise LmauditError("{method} reads no members or non-members (its reference models are the shadows): "
                           f"{', '.join('{' + n + '}' for n in given)} would be ignored",
                           hint="leave them out (SMI / SMI-M of the same suspect set is a second run, without "
                                "{shadows})",
                           options=names)
    shadow_set = shadows if isinstance(shadows, ShadowSet) else ShadowSet.load(shadows)
    where = "the given shadows" if isinstance(shadows, ShadowSet) else str(shadows)
    sus = texts_of(suspect, text_field, split, name="suspect")
    suspect_membership(shadow_set, sus, where)  # before any model loads: the shadows must know the suspect set
    check_backend(backend)
    target, ref = load_models(model, reference, **load_options)
    local = {k: v for k, v in load_options.items() if k in _SHADOW_LOADING}
    with running(backend, target, ref):
        return run_set_audit(target, sus, config, shadows=shadow_set, where=where, reference=ref,
                             load=lambda path: load_model(path, **{**local, "kind": target.kind}))


def dataset_inference(model, suspect, validation, *, members=None, reference=None, text_field: str = "text",
                      split: str | None = None, config: InferenceConfig | None = None, backend=None,
                      **load_options) -> InferenceResult:
    """A p-value for "``model`` was trained on ``suspect``" against ``validation`` (texts drawn alike, never trained
    on); with ``members`` (known training texts), SMI's ρ beside it. Data files or text sets, read before the model;
    ``backend`` as in :func:`mia`.

    Examples
    --------
    >>> found = lmaudit.dataset_inference(MODEL, "members.jsonl", "nonmembers.jsonl",
    ...                                   config=lmaudit.InferenceConfig(attacks=["loss", "min_k"], splits=5))
    >>> found.type, sorted(found["decision"])
    ('dataset-inference', ['0.01', '0.05'])
    """
    sets = [None if ts is None else texts_of(ts, text_field, split) for ts in (suspect, validation, members)]
    check_backend(backend)
    target, ref = load_models(model, reference, **load_options)
    with running(backend, target, ref):
        return run_dataset_inference(target, *sets[:2], reference=ref, members=sets[2],
                                     config=config or InferenceConfig())
