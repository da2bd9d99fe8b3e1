"""The interrogation attack (Naseh et al., 2025, "Riddle Me This! Stealthy Membership Inference for
Retrieval-Augmented Generation"): ask the system natural yes/no questions that only the document answers, and count
how many it answers as the document does. A system that retrieves the document answers them; one that does not
guesses.

**Published way** (``question_source="helper"``). A helper model, named by the user, writes ``n_questions`` yes/no
questions from the document (asked to quote its names, numbers and phrases, so that a question retrieves it, and to
be answerable from it alone), one per line as ``Q1: ...``; the helper then answers each question with the document
as its context, which gives the question's true answer. Questions the helper writes twice, or answers with neither
yes nor no, are dropped. The paper's helper is a large model; a document for which it writes no usable question is
an error naming the document (a small model writes none: see the how-to). The paper's optional step that keeps the
questions a relevance model ranks highest is not done.

**Variant** (``question_source="statements"``, no model). The document's words are cut into ``n_questions`` runs
in order; each run's first :data:`STATEMENT_WORDS` words are a statement, and the question asks whether the
context says it. Every second statement (the 2nd, 4th, ...) is made false by replacing its longest word (of at least
three characters, holding a letter, not a stop word; first on ties) with a word of the same kind drawn from the
other documents of the run, never one of this document; its true answer is "no", the others' "yes". A system that
answers "yes" to everything scores 0.5 on every document, member or not.

score = the share of a document's questions whose answer's first "yes" or "no" (a whole word, any case) is the
true answer; an answer with neither counts as wrong. Queries per document: its number of questions.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from lmaudit.errors import DataError, LmauditError
from lmaudit.rag.attacks import STOP_WORDS, QuestionSet

QUESTION_SOURCES = ("helper", "statements")
STATEMENT_WORDS = 16  # words of a statement at most
_YES_NO = re.compile(r"\b(yes|no)\b", re.IGNORECASE)
_NUMBERED = re.compile(r"^\s*Q\s*(\d+)\s*[:.)]\s*(.+?)\s*$", re.IGNORECASE)
_WORD = re.compile(r"\w*[^\W\d_]\w*")


@dataclass(frozen=True)
class Interrogation:
    """One document's questions and their true answers (``"yes"`` or ``"no"``)."""

    questions: tuple[str, ...]
    truths: tuple[str, ...]


def yes_no(answer: str) -> str | None:
    """The first whole-word "yes" or "no" of ``answer``, lower-cased; None when it has neither.

    >>> yes_no("Yes, it does."), yes_no("The answer is no"), yes_no("Nobody knows")
    ('yes', 'no', None)
    """
    m = _YES_NO.search(answer)
    return m.group(1).lower() if m else None


def score(interrogation: Interrogation, answers: list[str]) -> float:
    """The share of the questions answered with their true answer."""
    if len(answers) != len(interrogation.questions):
        raise LmauditError(f"{len(answers)} answers to {len(interrogation.questions)} questions")
    return sum(yes_no(a) == t for a, t in zip(answers, interrogation.truths)) / len(answers)


def question(statement: str) -> str:
    """The question the statements variant asks of one statement."""
    return f'According to the context, is this statement true? "{statement}" Answer Yes or No.'


# ------------------------------------------------------------------------------------------------ variant

def _words(document: str) -> list[str]:
    return [w for w in _WORD.findall(document) if len(w) >= 3 and w.lower() not in STOP_WORDS]


def statement_questions(documents: list[str], n_questions: int, *, seed: int = 0,
                        names: list[str] | None = None) -> list[Interrogation]:
    """The statements variant (see the module) for every document; ``seed`` draws the replacing words."""
    names = names or [f"document {i}" for i in range(len(documents))]
    rng = np.random.default_rng(seed)
    pool = sorted({w for d in documents for w in _words(d)})
    out = []
    for document, name in zip(documents, names):
        words = document.split()
        if len(words) < 4:
            raise DataError(f"{name} has fewer than four words: the interrogation attack makes no statement of it",
                            hint="drop short documents, or leave interrogation out of the attacks")
        own = {w.lower() for w in _words(document)}
        others = [w for w in pool if w.lower() not in own]
        questions, truths = [], []
        for k, run in enumerate(np.array_split(np.arange(len(words)), min(n_questions, len(words) // 4))):
            part = [words[i] for i in run[:STATEMENT_WORDS]]
            truth = "yes"
            if k % 2 == 1 and others:
                spots = [(len(_words(w)[0]), -j) for j, w in enumerate(part) if _words(w)]
                if spots:
                    j = -max(spots)[1]
                    old = _words(part[j])[0]
                    part[j] = part[j].replace(old, others[int(rng.integers(len(others)))], 1)
                    truth = "no"
            questions.append(question(" ".join(part)))
            truths.append(truth)
        out.append(Interrogation(tuple(questions), tuple(truths)))
    return out


# ------------------------------------------------------------------------------------------------ published way

def write_prompt(document: str, n_questions: int) -> str:
    """What the helper is asked to write questions from (the paper's instructions, in our words)."""
    return (f"Write exactly {n_questions} questions that can be answered with Yes or No, about the document below.\n"
            f"Document: {document}\n"
            "Each question must make sense on its own, quote the document's own names, numbers and phrases, be "
            "specific enough to find this document when searched with, and be answerable from this document "
            "alone.\nWrite them as:\n" + "\n".join(f"Q{i}: ..." for i in range(1, min(n_questions, 2) + 1))
            + (f"\n... up to Q{n_questions}." if n_questions > 2 else ""))


def truth_prompt(document: str, asked: str) -> str:
    """What the helper is asked to find a question's true answer with: the document as its context."""
    return f"Context: {document}\n\nUsing only the context, answer Yes or No.\nQuestion: {asked}\nAnswer:"


def parse_questions(text: str, n_questions: int) -> list[str]:
    """The numbered questions of the helper's text (``Q1: ...`` lines), in order, each once, at most
    ``n_questions``; a line without a question mark or with fewer than three words is passed over.

    >>> parse_questions("Q1: Is numpy fast?\\nQ2: ...\\nQ3: Is numpy fast?\\nQ4: Does solve raise LinAlgError?", 5)
    ['Is numpy fast?', 'Does solve raise LinAlgError?']
    """
    out: list[str] = []
    for line in text.splitlines():
        m = _NUMBERED.match(line)
        if m and "?" in m.group(2) and len(m.group(2).split()) >= 3 and m.group(2) not in out:
            out.append(m.group(2))
    return out[:n_questions]


TRUTH_TOKENS = 8  # a yes or a no, and room for the helper to say it in a sentence


def helper_questions(helper: Callable[[list[str]], list[str]], documents: list[str], n_questions: int, *,
                     answer: Callable[[list[str]], list[str]] | None = None,
                     names: list[str] | None = None) -> list[Interrogation]:
    """The published way (see the module): ``helper`` maps prompts to the helper model's answers; ``answer`` (default
    ``helper``) answers the questions with the document as context (a model's: :data:`TRUTH_TOKENS` new tokens)."""
    names = names or [f"document {i}" for i in range(len(documents))]
    written = helper([write_prompt(d, n_questions) for d in documents])
    asked = [parse_questions(t, n_questions) for t in written]
    flat = [(i, q) for i, qs in enumerate(asked) for q in qs]
    truths = (answer or helper)([truth_prompt(documents[i], q) for i, q in flat]) if flat else []
    kept: list[list[tuple[str, str]]] = [[] for _ in documents]
    for (i, q), answer in zip(flat, truths):
        if yes_no(answer) is not None:
            kept[i].append((q, yes_no(answer)))
    out = []
    for i, pairs in enumerate(kept):
        if not pairs:
            excerpt = " / ".join(line.strip() for line in written[i].splitlines() if line.strip())
            raise DataError(f"the helper wrote no yes/no question it could answer for {names[i]} "
                            f"(it wrote: '{excerpt[:80]}{'…' if len(excerpt) > 80 else ''}')",
                            hint="name a larger helper model, or use the variant without a model "
                                 "(question_source='statements', --question-source statements)")
        out.append(Interrogation(tuple(q for q, _ in pairs), tuple(t for _, t in pairs)))
    return out


def plan(interrogations: list[Interrogation]) -> QuestionSet:
    """The attack's questions per document and its score of their answers."""
    return QuestionSet([list(x.questions) for x in interrogations],
                       lambda i, answers: score(interrogations[i], answers),
                       {"interrogation_questions": [len(x.questions) for x in interrogations],
                        "interrogation_false": [x.truths.count("no") for x in interrogations]})
