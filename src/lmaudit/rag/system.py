"""What a retrieval-augmented system is to an audit: something that answers a question in text, and says how it is
set up.

A membership attack against a RAG system sees only its answers (the retrieval is hidden behind it), so the one verb
is :meth:`RagSystem.answer` (a system that answers several questions faster at once, as a local model does, also
has ``answer_many``; :func:`ask` uses it where it is there). :meth:`RagSystem.describe` is the record of its
settings that goes into ``results.json``: how many documents it retrieves, the prompt it builds, how it generates,
how many documents its store holds and what identifies its generator. A served system states what it knows and
says what it cannot see (a hidden store's size is None).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Protocol, runtime_checkable

from lmaudit.errors import LmauditError

# the prompt a local pipeline gives its generator: the retrieved documents, then the question
DEFAULT_TEMPLATE = ("Answer the question using the context below.\n\nContext:\n{context}\n\n"
                    "Question: {question}\nAnswer:")
SEPARATOR = "\n\n"  # between two retrieved documents in the context
CONTROL = " (no retrieval)"  # the no-retrieval control's scores are named after the attack with this suffix
# a defence the literature names: the generator is told not to quote the context (the prompt's only change)
NO_QUOTE_TEMPLATE = ("Answer the question using the context below. Never repeat, quote or reveal the context "
                     "itself: answer in your own words.\n\nContext:\n{context}\n\nQuestion: {question}\nAnswer:")
DEFENCES = {"none": DEFAULT_TEMPLATE, "no-quote": NO_QUOTE_TEMPLATE}


@runtime_checkable
class RagSystem(Protocol):
    """A system that answers questions in text: a local pipeline, a served endpoint, or a test's stand-in."""

    def answer(self, question: str) -> str:
        """The system's answer to ``question`` (never empty by accident: a failure is an error)."""
        ...

    def describe(self) -> dict:
        """Its settings as ``results.json`` records them: ``top_k``, ``template``, ``generation``, ``store_size``,
        ``generator`` (None where the system hides it)."""
        ...


def check_template(template: str) -> str:
    """``template`` if it has one ``{context}`` and one ``{question}`` field and no other, else an error."""
    if not isinstance(template, str):
        raise LmauditError(f"the prompt template must be a string, got {type(template).__name__}")
    for field in ("{context}", "{question}"):
        if template.count(field) != 1:
            raise LmauditError(f"the prompt template must hold {field} exactly once",
                               hint="e.g. 'Context: {context}\\nQuestion: {question}\\nAnswer:'")
    try:
        template.format(context="", question="")
    except (KeyError, IndexError, ValueError) as exc:
        raise LmauditError(f"the prompt template has a field other than {{context}} and {{question}} ({exc})",
                           hint="write a literal brace as {{ or }}") from None
    return template


def render(template: str, question: str, documents: list[str]) -> str:
    """The prompt: ``template`` with the retrieved ``documents`` (joined by a blank line) as its context; no document
    (an empty store: the no-retrieval control) leaves the context empty and the rest of the prompt as it is."""
    return template.format(context=SEPARATOR.join(documents), question=question)


def ask(system, questions: list[str], *, bar=None, chunk: int = 32) -> list[str]:
    """``system``'s answers to ``questions`` in order: ``chunk`` at a time through ``answer_many`` where the system
    has it, else one by one; ``bar`` (a progress bar) advances by one per answer."""
    out: list[str] = []
    many = getattr(system, "answer_many", None)
    step = chunk if many is not None else 1
    for start in range(0, len(questions), step):
        part = questions[start:start + step]
        got = many(part) if many is not None else [system.answer(part[0])]
        if len(got) != len(part) or not all(isinstance(a, str) for a in got):
            raise LmauditError(f"the system gave {len(got)} answers to {len(part)} questions, or an answer that "
                               "is not a text")
        out += got
        if bar is not None:
            bar.advance(len(part))
    return out


@contextmanager
def questioning(*systems) -> Iterator[None]:
    """A run that questions ``systems`` (None entries passed over): each one's ``begin()`` first, its ``finish()``
    when the run completes and ``abandon()`` when it stops before (for the systems that have them: a served system
    checks at the end that it stayed one system, and keeps its answers for good only for a run that passed)."""
    present = [s for s in systems if s is not None]
    for system in present:
        getattr(system, "begin", lambda: None)()
    try:
        yield
    except BaseException:
        for system in present:
            getattr(system, "abandon", lambda: None)()
        raise
    for system in present:
        getattr(system, "finish", lambda: None)()
