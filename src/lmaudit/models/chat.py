"""Instruction pairs in a model's chat template: prompt tokens stay unscored and untrained, as trainers do.

A tokenizer with a chat template (SmolLM2-Instruct's, Llama-3's, ...) expects a pair as the
conversation it was tuned on, not as the bare prompt followed by the response. With the
template, a record's context becomes the rendered conversation up to the assistant's turn
(the template's generation prompt) and its target the rest: the response and the template's
end-of-turn text. Special tokens are never scored, so the scored tokens are the response's
(the turn's closing newline, where a template has one, counts as a response token).
Plain texts (no prompt) are left as they are. A template that does not parse, raises, or reaches outside
Jinja's sandbox is an error naming the model folder and the template's own message.
"""

from __future__ import annotations

from lmaudit.data.loaders import Record, TextSet
from lmaudit.errors import LmauditError, spell


def has_chat_template(tokenizer) -> bool:
    return bool(getattr(tokenizer, "chat_template", None))


def use_chat_template(tokenizer, textset: TextSet, wanted: bool | None) -> bool:
    """Whether ``textset``'s pairs are formatted: ``wanted`` (True/False), or by default when the tokenizer has a
    template and the set has prompts. Asking for it without a template is an error."""
    if wanted and not has_chat_template(tokenizer):
        raise LmauditError("{chat}: the model's tokenizer has no chat template",
                           hint="leave the option out (pairs are then prompt followed by response)",
                           options={"chat": spell("chat_template", True)})
    return bool(textset.has_context and (has_chat_template(tokenizer) if wanted is None else wanted))


def chat_records(textset: TextSet, tokenizer) -> TextSet:
    """``textset`` with every prompt/response pair rendered in the tokenizer's chat template (see the module)."""
    records = []
    for r in textset.records:
        if not r.context:
            records.append(r)
            continue
        turns = [{"role": "user", "content": r.context}]
        prompt = _render(tokenizer, turns, textset, r, add_generation_prompt=True)
        full = _render(tokenizer, [*turns, {"role": "assistant", "content": r.target}], textset, r)
        if not full.startswith(prompt) or len(full) == len(prompt):
            raise LmauditError(f"{textset.source}: record '{r.id}': the chat template does not render the reply after "
                               "the prompt", hint="pass {no_chat} to use prompt + response as given",
                               options={"no_chat": ("chat_template=False", "--no-chat-template")})
        records.append(Record(r.id, full[len(prompt):], prompt, r.fields))
    return TextSet(records, source=textset.source, meta={**textset.meta, "chat_template": True})


def _render(tokenizer, turns: list[dict], textset: TextSet, record: Record, **how) -> str:
    """The conversation ``turns`` in the tokenizer's chat template; its failure names the model and the record."""
    try:
        return tokenizer.apply_chat_template(turns, tokenize=False, **how)
    except MemoryError:
        raise
    except Exception as exc:  # the template is the model's code: a syntax error, its raise_exception, the sandbox
        model = getattr(tokenizer, "name_or_path", "") or "the model"
        raise LmauditError(f"{_plain(model)}: the tokenizer's chat template failed on {_plain(textset.source)}: "
                           f"record '{_plain(record.id)}' ({type(exc).__name__}: {_plain(exc)})",
                           hint="fix the template in the model's tokenizer_config.json or chat_template.jinja, or "
                                "pass {no_chat} to use prompt + response as given",
                           options={"no_chat": ("chat_template=False", "--no-chat-template")}) from exc


def _plain(value) -> str:
    """``value`` as one line of a message whose ``{setting}`` placeholders are filled (its own braces kept)."""
    return " ".join(str(value).split()).replace("{", "{{").replace("}", "}}")


def formatted(textset: TextSet, tokenizer, wanted: bool | None) -> tuple[TextSet, bool]:
    """(the set to train on or score, whether the chat template was applied)."""
    used = use_chat_template(tokenizer, textset, wanted)
    return (chat_records(textset, tokenizer) if used else textset), used
