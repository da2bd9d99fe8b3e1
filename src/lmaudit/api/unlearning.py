"""Unlearning jobs: whether a forget set that an audit reads as forgotten comes back under relearning or
quantisation (:mod:`lmaudit.runs.unlearning_check`)."""

from __future__ import annotations

from lmaudit.data.given import texts_of
from lmaudit.errors import LmauditError
from lmaudit.models.gguf import local_model
from lmaudit.runs.inputs import lora_of, source_of
from lmaudit.runs.unlearning_check import CheckConfig, CheckResult, check_roles, run_unlearning_check

# what lmaudit.api (and lmaudit) exports of this module: its jobs and the settings they take
__all__ = ["unlearning_check", "CheckConfig"]


def _weights(model, name: str):
    """A model whose weights can be fine-tuned and quantised here: a folder, a GGUF file or a name."""
    model = source_of(model)
    if isinstance(model, str) and model.startswith(("http://", "https://")):
        raise LmauditError(f"{name}: {model} is a served model; relearning and quantisation change weights, which "
                           "an endpoint does not give", hint=f"give the {name} model's folder")
    return str(local_model(model))


def unlearning_check(unlearned, retrained, forget, members, nonmembers, *, relearn_on=None,
                     config: CheckConfig | None = None, lora=None, reference=None, text_field: str = "text",
                     split: str | None = None, **load_options) -> CheckResult:
    """Relearning and quantisation checks of ``unlearned`` against ``retrained`` (the base fine-tuned without the
    forget set): the audited part of ``forget`` read against ``members`` (texts the models keep, e.g. the retain
    set) and ``nonmembers`` (held-out texts), before and after each check, with paired intervals. The forget set was
    trained on, the members by both models, the non-members by neither: a forget text among the non-members or the
    members, or a member among the non-members, is refused before any model is read
    (:func:`~lmaudit.runs.unlearning_check.check_roles`).

    ``relearn_on``: texts to relearn on (refused when they share a text with the forget set or the non-members);
    None relearns on ``config.relearn_fraction`` of the forget set and audits the rest. ``lora``: relearn a LoRA
    adapter of that rank (or :class:`LoraSpec`) on top, as a pretrained model is fine-tuned. ``reference``: the base
    both models were tuned from, for the reference attacks (``config.attacks`` naming ``reference``).

    Examples
    --------
    >>> retrained = lmaudit.finetune(MODEL, "members.jsonl", "models/retrained", epochs=1)
    >>> checked = lmaudit.unlearning_check(MODEL, "models/retrained", "suspect.jsonl", "members.jsonl",
    ...                                    "nonmembers.jsonl", relearn_on="prompts.jsonl",
    ...                                    config=lmaudit.CheckConfig(steps=2, quantize=["q8_0"], bootstrap=50))
    >>> checked.type, sorted(checked["checks"])
    ('unlearning-check', ['q8_0', 'relearn'])
    """
    sets = [texts_of(d, text_field, split, name=n) for d, n in ((forget, "forget"), (members, "members"),
                                                                (nonmembers, "nonmembers"))]
    check_roles(*sets)  # before any model is read
    models = [_weights(unlearned, "unlearned"), _weights(retrained, "retrained")]
    ref = None if reference is None else _weights(reference, "reference")
    again = None if relearn_on is None else texts_of(relearn_on, text_field, split, name="relearn_on")
    return run_unlearning_check(*models, *sets, relearn_on=again, config=config or CheckConfig(), lora=lora_of(lora),
                                load_options=load_options, reference=ref)
