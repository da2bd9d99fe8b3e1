"""The Python interface: the same jobs as the commands, on model folders or loaded models, paths or text sets.

Every job returns a result whose ``write(folder)`` writes the files the command
writes; ``lmaudit.attacks.list_attacks()`` lists the attacks. The Examples of each
function run as tests (``tests/test_doctests.py``), with ``MODEL`` a tiny model folder and
``members.jsonl``, ``nonmembers.jsonl``, ``suspect.jsonl``, ``redacted.jsonl`` and
``prompts.jsonl`` in the working folder. In a notebook::

    import lmaudit
    target = lmaudit.load_model("models/ft")
    result = lmaudit.mia(target, "members.jsonl", "nonmembers.jsonl", reference="models/base")
    print(result.attacks["reference"]["auc"])
    records = lmaudit.probe(target, "members.jsonl")  # the probes' statistics, kept
    lmaudit.score(records, ["min_k"], params={"min_k": {"k": 0.5}})  # re-scored, no forward pass
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from lmaudit.data.corpus import DEFAULT_PACKAGES, build_corpus
from lmaudit.data.loaders import TextSet, given_texts, load_member_sets, load_texts
from lmaudit.errors import SettingError
from lmaudit.extraction.reconstruct import redacted_records
from lmaudit.models import build
from lmaudit.models import unlearn as unlearning
from lmaudit.models.dp import DPSpec
from lmaudit.models.handle import ModelHandle
from lmaudit.models.loading import load_model
from lmaudit.models.lora import LoraSpec
from lmaudit.models.shadows import ShadowSet, train_shadows
from lmaudit.privacy.audit import canary_bounds, epsilon_payload, mia_bounds, write_epsilon
from lmaudit.report.build import read_results, verify_run
from lmaudit.runs.audit_set import AuditConfig, run_audit, write_audit
from lmaudit.runs.common import PROVENANCE_KEYS, RunResult
from lmaudit.runs.dataset_inference import InferenceConfig, run_dataset_inference, write_inference
from lmaudit.runs.extract import ExtractConfig, run_extraction, write_extraction
from lmaudit.runs.mia import MIAResult, RunConfig, run_mia
from lmaudit.runs.pii import ReconstructConfig, run_reconstruction, write_reconstruction
from lmaudit.runs.privleak import check_before_run, privleak_against, read_retrained
from lmaudit.runs.records import ProbeRecords, probe_records, score_records
from lmaudit.runs.training import TrainedModel, check_training_out

__all__ = ["audit_set", "epsilon", "extract", "finetune", "generate", "load_model", "load_results", "mia", "pretrain", "probe",
           "reconstruct_pii", "score", "shadows", "unlearn"]


def _model(model: ModelHandle | str | Path, kind: str | None = None, **options) -> ModelHandle:
    return model if isinstance(model, ModelHandle) else load_model(model, kind=kind, **options)


def _models(model, reference, load_options: dict) -> tuple[ModelHandle, ModelHandle | None]:
    """The target and (when given) the reference, loaded with the same options and the target's kind."""
    target = _model(model, **load_options)
    return target, None if reference is None else _model(reference, **{**load_options, "kind": target.kind})


def _texts(data, text_field: str = "text", split: str | None = None, name: str = "texts") -> TextSet:
    """A text set from a data file, a :class:`TextSet` or a list of strings (:func:`_given`)."""
    data = given_texts(data, name)
    return data if isinstance(data, TextSet) else load_texts(data, text_field=text_field, split=split)


def mia(model, members=None, nonmembers=None, *, data=None, label_field: str | None = None, text_field: str = "text",
        split: str | None = None, reference=None, shadows=None, config: RunConfig | None = None,
        retrained=None, **load_options) -> MIAResult:
    """Membership inference: every attack that can run (or ``config.attacks``), AUC and TPR@FPR per attack.

    ``model``/``reference``: folders or loaded models; ``members``/``nonmembers``:
    data files or :class:`~lmaudit.data.loaders.TextSet`, or instead one labelled file
    ``data`` whose ``label_field`` is 1 for members and 0 for non-members (as WikiMIA and
    MIMIR ship); ``text_field`` and ``split`` as the command's options; ``shadows``: a
    folder from ``lmaudit shadows``. ``load_options`` go to :func:`load_model`. The data
    is read before any model is loaded. ``retrained``: the folder (or result) of the same run on a model
    retrained without the members; the result then holds MUSE's PrivLeak per attack (``result.privleak``), once
    the two runs are found comparable (:func:`~lmaudit.runs.privleak.check_comparable`). ``members`` and
    ``nonmembers`` may also be lists of strings (records ``members:0``, ...).

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
    other, where = (None, None) if retrained is None else read_retrained(retrained)
    target, ref = _models(model, reference, load_options)
    config = config or RunConfig()
    if other is not None:
        check_before_run(other, where, target, mem, non, config)
    result = run_mia(target, mem, non, reference=ref, config=config, shadows=shadow_set)
    if other is not None:
        result.privleak = privleak_against(result, other, where)
    return result


def probe(model, texts, *, reference=None, shadows=None, config: RunConfig | None = None,
          **load_options) -> ProbeRecords:
    """The probe records of ``texts`` for ``config.attacks`` (None: every attack that can run), to score with
    :func:`score` under other attacks or parameters without running the model again.

    ``texts``: a data file or a :class:`~lmaudit.data.loaders.TextSet`; ``model``, ``reference``,
    ``shadows`` and ``load_options`` as in :func:`mia`. Probes share the cache of ``mia``.

    Examples
    --------
    >>> records = lmaudit.probe(MODEL, "members.jsonl", config=lmaudit.RunConfig(attacks=["min_k"]))
    >>> len(records), records.attacks
    (12, ['min_k'])
    """
    textset = _texts(texts)
    shadow_set = None if shadows is None else ShadowSet.load(shadows)
    target, ref = _models(model, reference, load_options)
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


def audit_set(model, members=None, nonmembers=None, suspect=None, *, data=None, label_field: str | None = None,
              text_field: str = "text", split: str | None = None, reference=None, config: AuditConfig | None = None,
              **load_options) -> RunResult:
    """Set-level audit: ρ, the fraction of ``suspect`` that behaves like non-members (SMI / SMI-M, 90% intervals).

    Members and non-members as in :func:`mia` (two files, or one labelled ``data`` file); ``suspect``: a data
    file or text set. The data is read before any model is loaded.

    Examples
    --------
    >>> audit = lmaudit.audit_set(MODEL, "members.jsonl", "nonmembers.jsonl", "suspect.jsonl",
    ...                           config=lmaudit.AuditConfig(method="smi", bootstrap=20))
    >>> audit.type, list(audit.to_frame()["method"])
    ('set-audit', ['smi'])
    """
    if suspect is None:
        raise SettingError("suspect", "missing {name}: the set to audit", hint="a data file or a TextSet")
    mem, non = load_member_sets(members, nonmembers, data=data, label_field=label_field, text_field=text_field,
                                split=split)
    sets = [mem, non, _texts(suspect, text_field, split)]
    target, ref = _models(model, reference, load_options)
    return RunResult(run_audit(target, *sets, config or AuditConfig(), reference=ref), write_audit)


def dataset_inference(model, suspect, validation, *, members=None, reference=None, text_field: str = "text",
                      split: str | None = None, config: InferenceConfig | None = None, **load_options) -> RunResult:
    """A p-value for "``model`` was trained on ``suspect``" against ``validation`` (texts drawn alike, never trained
    on); with ``members`` (known training texts), SMI's ρ beside it. Data files or text sets, read before the model.

    Examples
    --------
    >>> found = lmaudit.dataset_inference(MODEL, "members.jsonl", "nonmembers.jsonl",
    ...                                   config=lmaudit.InferenceConfig(attacks=["loss", "min_k"], splits=5))
    >>> found.type, sorted(found["decision"])
    ('dataset-inference', ['0.01', '0.05'])
    """
    sets = [None if ts is None else _texts(ts, text_field, split) for ts in (suspect, validation, members)]
    target, ref = _models(model, reference, load_options)
    payload, scores = run_dataset_inference(target, *sets[:2], reference=ref, members=sets[2],
                                            config=config or InferenceConfig())
    return RunResult(payload, lambda p, out, report=False: write_inference(p, out, scores=scores, report=report))


def extract(model, data, *, config: ExtractConfig | None = None, text_field: str = "text", split: str | None = None,
            show_pii: bool = False, **load_options) -> RunResult:
    """(n, p)-discoverable extraction of every record's masked tokens (``config.mask``, ``config.steps``, ...).

    The data is read before the model is loaded. Record ids that look like e-mail addresses or phone numbers are
    masked in ``records.csv`` unless ``show_pii``.

    Examples
    --------
    >>> found = lmaudit.extract(MODEL, "members.jsonl", config=lmaudit.ExtractConfig(mask="suffix:4", n=100))
    >>> found.type, len(found.to_frame())
    ('extraction', 12)
    """
    texts = _texts(data, text_field, split)
    target = _model(model, **load_options)
    payload = run_extraction(target, texts, config or ExtractConfig())
    payload["model"], payload["show_pii"] = target.path, show_pii
    return RunResult(payload, write_extraction)


def reconstruct_pii(model, records, *, reference=None, calibration=None, config: ReconstructConfig | None = None,
                    placeholder: str = "[REDACTED]", show_pii: bool = False, text_field: str = "text",
                    split: str | None = None, **load_options) -> RunResult:
    """Recover a redacted field of each record; top-1 attack success rate per ranking signal.

    The records (and calibration records) are read and checked before any model is loaded.

    Examples
    --------
    >>> rec = lmaudit.reconstruct_pii(MODEL, "redacted.jsonl",
    ...                               config=lmaudit.ReconstructConfig(field="email", candidates=4))
    >>> rec.type, len(rec.to_frame())
    ('pii-reconstruction', 3)
    """
    cfg = config or ReconstructConfig()
    recs = redacted_records(_texts(records, text_field, split), cfg.field, placeholder=placeholder)
    calib = None if calibration is None else redacted_records(_texts(calibration, text_field, split), cfg.field,
                                                              placeholder=placeholder)
    target, ref = _models(model, reference, load_options)
    payload = run_reconstruction(target, recs, cfg, reference=ref, calibration=calib)
    payload.update({"config": {**cfg.__dict__, "placeholder": placeholder}, "model": target.path,
                    "reference": None if ref is None else ref.path, "show_pii": show_pii})
    return RunResult(payload, lambda p, out, report=False: write_reconstruction(p, out, show_pii=show_pii, report=report))


def epsilon(run_dir, *, delta: float = 1e-5, confidence: float = 0.95, attack: str | None = None, seed: int = 0,
            canaries=None) -> RunResult:
    """ε lower bounds of a membership-inference run folder: per attack, the largest ε the run shows the training was
    not (ε, δ)-DP for (a threshold chosen on a seeded half of the scores, the bound on the other), or with
    ``canaries`` (a folder from ``lmaudit corpus canaries``) the one-run bound over the canaries' scores.
    ``write(folder)`` writes ``epsilon.json``.

    Examples
    --------
    >>> run = lmaudit.mia(MODEL, "members.jsonl", "nonmembers.jsonl",
    ...                   config=lmaudit.RunConfig(attacks=["loss"], n_bootstrap=20))
    >>> _ = run.write("runs/mia")
    >>> bounds = lmaudit.epsilon("runs/mia", delta=1e-4)
    >>> list(bounds.to_frame()["attack"]), bool(bounds["attacks"]["loss"]["epsilon"] >= 0)
    (['loss'], True)
    """
    if canaries is None:
        bounds = mia_bounds(run_dir, attack=attack, delta=delta, confidence=confidence, seed=seed)
    else:
        bounds = canary_bounds(run_dir, canaries, attack=attack, delta=delta, confidence=confidence)
    payload = epsilon_payload(run_dir, bounds, delta=delta, confidence=confidence,
                              seed=seed if canaries is None else None, canaries=canaries)
    return RunResult({k: v for k, v in payload.items() if k not in PROVENANCE_KEYS},
                     lambda p, out, report=False: write_epsilon(out, {**payload, **p}))


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
    texts = _texts(prompts)
    target = _model(model, **load_options)
    tok = target.tokenizer
    rows = []
    for i, rec in enumerate(texts.records):
        prompt = np.asarray(tok(rec.text)["input_ids"], dtype=np.int64)
        x = np.concatenate([prompt, np.zeros(gen_length, dtype=np.int64)])  # the continuation is filled in
        new = target.adapter.fill(x, np.arange(len(prompt), len(x)), samples=1, steps=steps, temperature=temperature,
                                  remasking=remasking, block_length=block_length, seed=seed + i)[0]
        rows.append({"id": rec.id, "prompt": rec.text, "continuation": tok.decode(new)})
    return pd.DataFrame(rows, columns=["id", "prompt", "continuation"])


def _lora(lora: LoraSpec | int | None) -> LoraSpec | None:
    return LoraSpec(lora) if isinstance(lora, int) and not isinstance(lora, bool) else lora


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
    model = _source(model)
    check_training_out(out, "model", {"model": model, "data": data, **_base(load_options)})
    texts = _texts(data, text_field, split)
    build.finetune(model, texts, out, mode=mode, epochs=epochs, lr=lr, block=block, batch_size=batch_size, seed=seed,
                   kind=kind, mask_ratio=mask_ratio, load_options=load_options, lora=_lora(lora), dp=dp,
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
    model = _source(model)
    check_training_out(out, "model", {"model": model, "base": base, "forget": forget, "retain": retain,
                                      **_base(load_options)})
    sets = [_texts(d, text_field, split) for d in (forget, retain)]
    unlearning.unlearn(model, *sets, out, method=method, base_dir=base, epochs=epochs, lr=lr, batch_size=batch_size,
                       block=block, mode=mode, retain_weight=retain_weight, npo_beta=npo_beta, seed=seed, kind=kind,
                       load_options=load_options, lora=_lora(lora))
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
            **load_options) -> TrainedModel:
    """Fine-tune ``k`` shadow models of ``model`` (the target's base) on random halves of ``pool``, for LiRA and
    RMIA (``lmaudit.mia(..., shadows=out)``); use the target's own fine-tuning settings.

    Examples
    --------
    >>> sh = lmaudit.shadows(MODEL, "members.jsonl", "models/shadows", k=2, epochs=1)
    >>> sh.type, len(sh.load().paths)
    ('shadows', 2)
    """
    model = _source(model)
    check_training_out(out, "shadows", {"model": model, "pool": pool, **_base(load_options)})
    train_shadows(model, _texts(pool, text_field, split), out, k=k, seed=seed, epochs=epochs, lr=lr, block=block,
                  batch_size=batch_size, mode=mode, kind=kind, load_options=load_options, lora=_lora(lora), dp=dp)
    return TrainedModel.read(out, type="shadows")


def _source(model) -> str | Path:
    """A model to train from: a folder, a GGUF file or a name (a loaded model gives its folder)."""
    return Path(model.path) if isinstance(model, ModelHandle) else model


def _base(load_options: dict) -> dict:
    """An adapter base given in the load options, an input like the model."""
    return {"adapter_base": load_options["adapter_base"]} if load_options.get("adapter_base") else {}


def load_results(folder: str | Path, *, verify: bool = True) -> MIAResult | RunResult:
    """A results folder read back: an :class:`MIAResult` (``mia``, the demo's AR part; its ``write()`` writes it
    again) or a :class:`RunResult` (``audit-set``, ``extract``, ``pii``: its payload, ``to_frame()`` and repr).

    The folder is first checked as ``lmaudit report`` checks one (:func:`~lmaudit.report.build.verify_run`): files
    changed since the run wrote them are refused, naming the file. ``verify=False`` loads them anyway, with a
    warning: a figure edited by hand then comes back as if measured.

    Examples
    --------
    >>> _ = lmaudit.mia(MODEL, "members.jsonl", "nonmembers.jsonl",
    ...                 config=lmaudit.RunConfig(attacks=["loss"], n_bootstrap=20)).write("runs/again")
    >>> lmaudit.load_results("runs/again").n_members
    12
    """
    folder = Path(folder)
    verify_run(folder, verify=verify)
    res = read_results(folder / "results.json")
    if res.get("type") in ("set-audit", "extraction", "pii-reconstruction", "dataset-inference"):
        payload = {k: v for k, v in res.items() if k not in PROVENANCE_KEYS}
        if (folder / "records.csv").is_file():
            payload["records"] = pd.read_csv(folder / "records.csv").to_dict("list")
        return RunResult(payload, writer=None, source=folder)
    return MIAResult.load(folder)
