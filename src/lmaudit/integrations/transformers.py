"""A ``transformers`` callback that audits membership leakage while a ``Trainer`` trains, without changing training.

::

    from lmaudit.integrations.transformers import LeakageCallback

    leakage = LeakageCallback(members, heldout, every_steps=200, out_dir="runs/leakage", stop_above_auc=0.8)
    trainer = Trainer(model=model, args=args, train_dataset=train, processing_class=tokenizer, callbacks=[leakage])
    leakage.attach(trainer)  # the metrics then go through trainer.log: log_history and every report_to
    trainer.train()
    leakage.plot("leakage-auc.png")

Every ``every_steps`` optimizer steps (or at the end of each epoch with ``on="epoch"``), and after the last step
when no audit fell on it, it runs a :class:`~lmaudit.integrations.live.LiveAudit` on the model being trained, in the
training process, inside :func:`~lmaudit.integrations.live.untouched`: the training loss curve is the same, bit for
bit, with the callback as without it. The metrics are named as ``lmaudit track`` names them
(:func:`lmaudit.utils.metric_name`): ``lmaudit/ATTACK/auc``, ``lmaudit/ATTACK/tpr_at_1pct_fpr``,
``lmaudit/canaries/ATTACK/auc``. They are logged with ``trainer.log`` once :meth:`LeakageCallback.attach` has given
the callback its trainer, so they reach ``state.log_history`` and whatever ``report_to`` names (a
``TrainerCallback`` is never handed the trainer, and a value added to ``logs`` in ``on_log`` would reach neither the
history nor the reporters called before it). Unattached, they are appended to ``state.log_history`` only, with a
warning at the start of training.

The texts are tokenised with ``tokenizer=``, else the Trainer's ``processing_class`` (a processor's tokenizer);
with neither, :meth:`~LeakageCallback.attach` or the start of training raises. An error inside an audit is logged as
a warning (``logging``, logger ``lmaudit.integrations.transformers``) and that audit is skipped; training goes on
(``raise_errors=True`` raises it instead). Settings that can be checked before training (the texts, the attack
names, the schedule) raise at construction, and sets too small for reliable figures are said once, there.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, fields
from pathlib import Path

from transformers import PreTrainedTokenizerBase, TrainerCallback

from lmaudit.api.membership import RunConfig
from lmaudit.errors import SettingError, warn
from lmaudit.integrations.live import Evaluation, LiveAudit
from lmaudit.runs.mia_notes import MIN_PER_CLASS

logger = logging.getLogger(__name__)
SCHEDULES = ("steps", "epoch")
PAIRS = (("members", "nonmembers", "member(s)", "non-member(s)"), ("canaries", "decoys", "canaries", "decoys"))
TOO_FEW = f"(fewer than {MIN_PER_CLASS} per class)"  # what lmaudit.mia says of small sets, once per attack


@dataclass
class Record(Evaluation):
    """One audit of :attr:`LeakageCallback.history`, read either way: ``h.step`` or ``h["step"]`` (keys ``step``,
    ``epoch``, ``metrics``, ``folders``); ``dict(h)`` is the plain dict."""

    def keys(self) -> list[str]:
        return [f.name for f in fields(self)]

    def __getitem__(self, key: str):
        if key not in self.keys():
            raise KeyError(key)
        return getattr(self, key)

    def get(self, key: str, default=None):
        return getattr(self, key) if key in self.keys() else default

    def __iter__(self) -> Iterator[str]:
        return iter(self.keys())

    def __len__(self) -> int:
        return len(self.keys())

    def __contains__(self, key) -> bool:
        return key in self.keys()


def tokenizer_of(found):
    """The tokenizer of what a Trainer holds as ``processing_class``: itself, or a processor's ``tokenizer``."""
    for candidate in (found, getattr(found, "tokenizer", None)):
        if isinstance(candidate, PreTrainedTokenizerBase):
            return candidate
    return None


class LeakageCallback(TrainerCallback):
    """Membership AUC of a member sample against held-out texts, per attack, every N steps or each epoch.

    Parameters
    ----------
    members, nonmembers
        Texts the model trains on, and texts drawn alike that it never sees: lists of strings, data files or
        :class:`~lmaudit.data.loaders.TextSet`.
    every_steps
        Audit after every ``every_steps`` optimizer steps (``global_step`` a multiple of it), and after the last.
    on
        ``"steps"`` (needs ``every_steps``) or ``"epoch"`` (after each epoch); default ``"steps"`` when
        ``every_steps`` is given, else ``"epoch"``.
    attacks
        Attack names (default loss, zlib, min_k); ``config`` a :class:`~lmaudit.RunConfig` for the rest.
    canaries, decoys
        Canaries inserted in the training data and decoys never inserted (lists, files), or ``canaries`` a canary
        folder (``lmaudit corpus canaries``): their AUC is logged as ``lmaudit/canaries/ATTACK/auc``.
    tokenizer
        What tokenises the audit's texts (default: the Trainer's ``processing_class``, or a processor's tokenizer).
    out_dir
        Write each evaluation as a results folder ``OUT/step-NNNNNN`` (and ``-canaries``) and ``OUT/history.json``.
    stop_above_auc
        Stop training (``control.should_training_stop``) after the first evaluation with an AUC above it; the
        reason is logged as a warning and kept in :attr:`stop_reason`.
    train_texts
        The training texts: a warning at construction names members missing from them and non-members in them.
    at_start
        Also audit before the first step (the baseline of the plot).
    raise_errors
        Raise an audit's error instead of logging it and skipping that audit.
    prefix
        The first part of every metric name.

    Attributes
    ----------
    history
        One :class:`Record` per audit that ran: ``h["step"]`` or ``h.step``, ``epoch``, ``metrics`` (named as
        logged), ``folders``.
    errors
        ``{"step", "error"}`` of each audit skipped.
    stop_reason
        Why the callback stopped training, or None.
    """

    def __init__(self, members, nonmembers, *, every_steps: int | None = None, on: str | None = None, attacks=None,
                 canaries=None, decoys=None, tokenizer=None, config: RunConfig | None = None,
                 out_dir: str | Path | None = None, stop_above_auc: float | None = None, train_texts=None,
                 at_start: bool = False, raise_errors: bool = False, prefix: str = "lmaudit") -> None:
        self.on = on or ("steps" if every_steps is not None else "epoch")
        if self.on not in SCHEDULES:
            raise SettingError("on", f"{{name}} must be one of {', '.join(SCHEDULES)}, got {on!r}")
        if self.on == "steps" and (isinstance(every_steps, bool) or not isinstance(every_steps, int)
                                   or every_steps < 1):
            raise SettingError("every_steps", f"{{name}} must be an integer ≥ 1 with on='steps', got {every_steps!r}",
                               hint="or audit after each epoch with on='epoch'")
        if self.on == "epoch" and every_steps is not None:
            raise SettingError("every_steps", "{name} applies to on='steps' only", hint="leave it out with on='epoch'")
        self.every_steps = every_steps
        self.audit = LiveAudit(members, nonmembers, attacks=attacks, canaries=canaries, decoys=decoys, config=config,
                               out_dir=out_dir, stop_above_auc=stop_above_auc, train_texts=train_texts, prefix=prefix)
        for note in self.audit.notes:
            warn(f"LeakageCallback: {note}; a member the model never trains on cannot leak, and a "
                          "non-member it trains on is no held-out text", UserWarning)
        for inside, outside, one, other in PAIRS:  # said once here, not by every attack of every audit
            sizes = [len(self.audit.sets[s]) for s in (inside, outside) if s in self.audit.sets]
            if len(sizes) == 2 and min(sizes) < MIN_PER_CLASS:
                warn(f"LeakageCallback: only {sizes[0]} {one} and {sizes[1]} {other} {TOO_FEW}: the AUC "
                              "intervals and the TPRs of every audit are unreliable", UserWarning)
        self.tokenizer = tokenizer
        self.at_start = at_start
        self.raise_errors = raise_errors
        self.trainer = None
        self.errors: list[dict] = []
        self.stop_reason: str | None = None
        self._records: list[Record] = []
        self._said: set[str] = set()
        self._found_tokenizer = None
        self._last_step: int | None = None

    @property
    def history(self) -> list[Record]:
        for e in self.audit.history[len(self._records):]:
            self._records.append(Record(e.step, e.epoch, dict(e.metrics), list(e.folders)))
        return list(self._records)

    def attach(self, trainer) -> LeakageCallback:
        """Log through ``trainer`` (``trainer.log``: ``state.log_history`` and every ``report_to``), and add this
        callback to it unless it is already there. Returns the callback. Raises when neither ``tokenizer=`` nor the
        trainer's ``processing_class`` can tokenise the audit's texts."""
        self._need_tokenizer(getattr(trainer, "processing_class", None))
        if not any(cb is self for cb in trainer.callback_handler.callbacks):
            trainer.add_callback(self)
        self.trainer = trainer
        return self

    def plot(self, path: str | Path) -> Path:
        """AUC against steps (:func:`~lmaudit.integrations.live.plot_history`), written to ``path`` as a PNG."""
        return self.audit.plot(path)

    def _need_tokenizer(self, processing_class=None, **kwargs):
        """``tokenizer=``, else the Trainer's ``processing_class`` (or ``tokenizer``, in older ``transformers``);
        raises when there is none, so that no audit is skipped for want of one."""
        candidates = (processing_class, kwargs.get("tokenizer"), getattr(self.trainer, "processing_class", None))
        found = self.tokenizer if self.tokenizer is not None else next(
            (t for t in map(tokenizer_of, candidates) if t is not None), None)
        if found is None:
            raise SettingError("tokenizer", "LeakageCallback has no tokenizer for the audit's texts: none given as "
                                            "{name}, and the Trainer's processing_class is none",
                               hint="pass tokenizer=... to LeakageCallback, or processing_class=tokenizer to Trainer")
        self._found_tokenizer = found
        return found

    def on_train_begin(self, args, state, control, model=None, processing_class=None, **kwargs):
        self.stop_reason, self._last_step = None, None
        self._need_tokenizer(processing_class, **kwargs)
        if self.trainer is None or self.trainer.state is not state:
            logger.warning("LeakageCallback is not attached to the Trainer that runs it: its metrics go to "
                           "state.log_history only, not to report_to (call callback.attach(trainer) first)")
        if self.at_start:
            self._audit(state, control, model)
        return control

    def on_step_end(self, args, state, control, model=None, **kwargs):
        last = control.should_training_stop or 0 < state.max_steps <= state.global_step
        if self.on == "steps" and (state.global_step % self.every_steps == 0 or last):
            self._audit(state, control, model)
        return control

    def on_epoch_end(self, args, state, control, model=None, **kwargs):
        if self.on == "epoch":
            self._audit(state, control, model)
        return control

    def on_train_end(self, args, state, control, model=None, **kwargs):
        """The weights training ends with, audited when no audit fell on the last step (another callback stopped
        training after this one's turn): into ``state.log_history`` only, the reporters having closed their runs."""
        self._audit(state, control, model, report=False)
        return control

    def _audit(self, state, control, model, *, report: bool = True) -> None:
        """One audit of ``model`` after ``state.global_step`` (once per step): logged, checked against the
        threshold; an error is logged and the audit skipped unless ``raise_errors``."""
        step = state.global_step
        if step == self._last_step:
            return
        self._last_step = step
        tokenizer = self._found_tokenizer or self._need_tokenizer()
        failed = None
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                evaluation = self.audit.evaluate(model, tokenizer, step, state.epoch, write=state.is_world_process_zero)
            except Exception as exc:
                failed = exc
        self._say_once([str(w.message) for w in caught])
        if failed is not None:
            if self.raise_errors:
                raise failed
            self.errors.append({"step": step, "error": f"{type(failed).__name__}: {failed}"})
            logger.warning("LeakageCallback: the leakage audit after step %d was skipped (training goes on): %s: %s",
                           step, type(failed).__name__, failed)
            return
        self._log(dict(evaluation.metrics), state, control, report=report)
        reason = self.audit.stop_reason(evaluation)
        if reason is not None:
            if self.stop_reason is None:
                self.stop_reason = reason
                logger.warning("LeakageCallback: stopping training: %s", reason)
            control.should_training_stop = True

    def _say_once(self, messages: list[str]) -> None:
        """What the audits warned of, each said once per callback (a small set's note was said at construction)."""
        for message in messages:
            if TOO_FEW not in message and message not in self._said:
                self._said.add(message)
                logger.warning("LeakageCallback: %s", message)

    def _log(self, metrics: dict[str, float], state, control, *, report: bool = True) -> None:
        """Through the attached trainer (history and reporters), else into ``state.log_history`` as it would.

        ``trainer.log`` clears ``should_log``; it is put back, so that the step's own log (its training loss, the
        mean since the last one) still comes as it would have without the audit."""
        if report and self.trainer is not None and self.trainer.state is state:
            pending = control.should_log
            self.trainer.log(metrics)
            control.should_log = self.trainer.control.should_log = pending
            return
        if state.epoch is not None:
            metrics["epoch"] = state.epoch
        state.log_history.append({**metrics, "step": state.global_step})
