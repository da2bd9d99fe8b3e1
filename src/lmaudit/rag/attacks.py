"""Membership attacks on a retrieval-augmented system that read only its answers: higher = more likely in its store.

**S²MIA** (Li et al., 2024, "Generating Is Believing"). A document x is cut into its query part x_q (its first
``split`` share of words) and its remainder x_r. The system is asked, in one query, to continue x_q; a system that
retrieves x gives back words of x_r. The published membership feature is the similarity of the answer to x_r, which
the paper measures with BLEU: score = BLEU(answer, x_r) (:func:`bleu`: sentence BLEU-4 over lower-cased words, the
modified n-gram precisions of orders 2-4 smoothed by adding one to their counts (Lin and Och, 2004), with the brevity
penalty; 0 when the answer shares no word with x_r). The paper's second feature, the perplexity of the answer, and its
classifier over both features are not built here.

**MBA** (Liu et al., WWW 2025, "Mask-based Membership Inference Attacks for Retrieval-Augmented Generation"). M words
of x are replaced by numbered masks ``[MASK_1]`` ... and the system is asked, in one query, to fill them; a system
that retrieves x reads the answers in it. score = the share of masks filled with their word (compared lower-cased,
punctuation at either end dropped). The paper masks the words a proxy language model finds hardest to predict, so that
the generator cannot guess them without the document; here (``selection="proxy"``) each word's difficulty is its
log-probability under a local proxy model named by the user (the sum over its tokens given the text before it: a word
the tokenizer splits counts whole, as the paper's fragmented-word step intends), and the M least probable words are
masked, no two side by side. Words are runs of letters and digits of at least three characters, holding a letter, not
among a short stop-word list; the first word (no text before it) is never masked. The paper's spelling correction is
not done. ``selection="spread"`` is a variant needing no model: the document's candidate words are split into M
runs in order and the longest word of each run is masked (a long word is rarely guessed), again no two side by side.
A document with fewer candidate words than M gets as many masks as it has candidates; one with none is an error
naming it.

Each of the two asks one query per document (:data:`QUERIES`); the interrogation attack
(:mod:`lmaudit.rag.interrogation`) asks several. An attack's :class:`QuestionSet` holds its questions per document
and how it scores their answers, so every attack is asked and scored the same way.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from lmaudit.data.loaders import TextSet
from lmaudit.errors import DataError, LmauditError
from lmaudit.models.handle import ModelHandle
from lmaudit.probes.ar import probe_ar

ATTACKS = ("s2mia", "mba", "interrogation")
DEFAULT_ATTACKS = ("s2mia", "mba")  # the interrogation attack needs a helper able to write questions, or its variant
QUERIES = {"s2mia": 1, "mba": 1}  # queries S²MIA and MBA ask the system per document
SELECTIONS = ("proxy", "spread")
STOP_WORDS = frozenset("the and for are but not you all any can had her was one our out has him his how its may "
                       "new now see who did get let say she too use that with have this will your from they been "
                       "were what when which their there than then them these those into also such".split())
_WORD = re.compile(r"\w+")
_CANDIDATE = re.compile(r"\w*[^\W\d_]\w*")  # a word holding a letter


@dataclass(frozen=True)
class QuestionSet:
    """An attack's ``questions`` (per document, in order) and ``score(i, answers)``: document i's score from the
    system's answers to its questions; ``detail``: columns per document for the records table."""

    questions: list[list[str]]
    score: Callable[[int, list[str]], float]
    detail: dict[str, list] = field(default_factory=dict)


@dataclass(frozen=True)
class RagScore:
    """One document's score under one attack, the queries it took and the system's (last) answer."""

    score: float
    queries: int
    answer: str


# ------------------------------------------------------------------------------------------------ S²MIA

def words(text: str) -> list[str]:
    """The lower-cased words (runs of letters, digits and underscores) BLEU compares."""
    return _WORD.findall(text.lower())


def _ngrams(tokens: list[str], n: int) -> Counter:
    return Counter(tuple(tokens[i:i + n]) for i in range(len(tokens) - n + 1))


def bleu(candidate: str, reference: str, *, max_n: int = 4) -> float:
    """Sentence BLEU of ``candidate`` against ``reference`` (see the module): exp(Σ_n log p_n / N) × BP, with p_1 the
    clipped unigram precision, p_n (n ≥ 2) = (clipped matches + 1) / (candidate n-grams + 1), N = ``max_n`` and
    BP = min(1, exp(1 − |reference| / |candidate|)). 0 when either side has no word or no unigram matches.

    >>> bleu("the cat sat on the mat", "the cat sat on the mat")
    1.0
    >>> bleu("nothing alike", "the cat sat on the mat")
    0.0
    """
    cand, ref = words(candidate), words(reference)
    if not cand or not ref:
        return 0.0
    logs = []
    for n in range(1, max_n + 1):
        c, r = _ngrams(cand, n), _ngrams(ref, n)
        matches, total = sum(min(k, r[g]) for g, k in c.items()), max(len(cand) - n + 1, 0)
        if n == 1 and matches == 0:
            return 0.0
        p = matches / total if n == 1 else (matches + 1) / (total + 1)
        logs.append(math.log(p))
    brevity = min(1.0, math.exp(1 - len(ref) / len(cand)))
    return float(math.exp(sum(logs) / max_n) * brevity)


def split_document(document: str, split: float = 0.5) -> tuple[str, str]:
    """(x_q, x_r): the first ⌈split × L⌉ of the document's L whitespace-separated words (at least one, and at least
    one left), and the rest, as written."""
    parts = document.split()
    if len(parts) < 2:
        raise DataError(f"the document '{document[:40]}' has fewer than two words: S²MIA cannot split it",
                        hint="give documents of at least two words")
    cut = min(max(1, math.ceil(split * len(parts))), len(parts) - 1)
    return " ".join(parts[:cut]), " ".join(parts[cut:])


def s2mia_question(query_part: str) -> str:
    """The question S²MIA asks: to continue the query part, the continuation alone."""
    return (f'Here is the beginning of a text: "{query_part}"\n'
            "Continue this text. Reply with the continuation only, with no introduction or explanation.")


def s2mia(system, document: str, *, split: float = 0.5) -> RagScore:
    """S²MIA's score of ``document`` on ``system`` (see the module): BLEU of the answer against the remainder."""
    query_part, remainder = split_document(document, split)
    answer = system.answer(s2mia_question(query_part))
    return RagScore(bleu(answer, remainder), QUERIES["s2mia"], answer)


def s2mia_plan(documents: list[str], *, split: float = 0.5) -> QuestionSet:
    """S²MIA's one question per document and its score (BLEU against the document's remainder)."""
    parts = [split_document(d, split) for d in documents]
    return QuestionSet([[s2mia_question(q)] for q, _ in parts], lambda i, answers: bleu(answers[0], parts[i][1]))


# ------------------------------------------------------------------------------------------------ MBA

@dataclass(frozen=True)
class MaskedDocument:
    """A document with its masked words: ``spans`` (start, end) in order of position, ``answers`` the words."""

    document: str
    spans: tuple[tuple[int, int], ...]
    answers: tuple[str, ...] = field(default=())

    @property
    def text(self) -> str:
        """The document with each masked word replaced by ``[MASK_i]`` (numbered from 1, in order)."""
        out, last = [], 0
        for i, (start, end) in enumerate(self.spans, 1):
            out += [self.document[last:start], f"[MASK_{i}]"]
            last = end
        return "".join(out + [self.document[last:]])


def candidates(document: str) -> list[tuple[int, int]]:
    """The (start, end) spans of the words MBA may mask (see the module), the first word excluded."""
    spans = [m.span() for m in _CANDIDATE.finditer(document)]
    return [(s, e) for s, e in spans if e - s >= 3 and document[s:e].lower() not in STOP_WORDS
            and document[:s].strip()]


def _masked(document: str, spans: list[tuple[int, int]], where: str) -> MaskedDocument:
    if not spans:
        raise DataError(f"{where}: no word MBA can mask (words of at least three characters, holding a letter)",
                        hint="drop documents without such words, or audit them with s2mia only")
    spans = sorted(spans)
    return MaskedDocument(document, tuple(spans), tuple(document[s:e] for s, e in spans))


def _apart(document: str):
    """A test of whether a span is at least one word away from every span already picked."""
    rank = {span: k for k, span in enumerate(m.span() for m in _WORD.finditer(document))}
    return lambda span, picked: all(abs(rank[span] - rank[p]) > 1 for p in picked)


def spread_masks(document: str, n_masks: int, *, where: str = "document") -> MaskedDocument:
    """The ``spread`` variant: the longest word of each of ``n_masks`` runs of the candidates (first on ties), a word
    beside the one picked before passed over for the next longest of its run."""
    found, apart = candidates(document), _apart(document)
    picked: list[tuple[int, int]] = []
    for run in np.array_split(np.arange(len(found)), min(n_masks, len(found))) if found else []:
        spans = sorted((found[i] for i in run), key=lambda s: (-(s[1] - s[0]), s))
        picked += [s for s in spans if apart(s, picked)][:1]
    return _masked(document, picked, where)


def hardest_masks(document: str, difficulty: dict[tuple[int, int], float], n_masks: int, *,
                  where: str = "document") -> MaskedDocument:
    """The ``proxy`` selection: the ``n_masks`` candidate words of lowest proxy log-probability (``difficulty``
    maps a span to it; spans without a value are passed over), no two masked words side by side."""
    apart = _apart(document)
    picked: list[tuple[int, int]] = []
    for span in sorted((s for s in candidates(document) if s in difficulty), key=lambda s: (difficulty[s], s)):
        if len(picked) == n_masks:
            break
        if apart(span, picked):
            picked.append(span)
    return _masked(document, picked, where)


def word_logprobs(proxy: ModelHandle, documents: list[str]) -> list[dict[tuple[int, int], float]]:
    """Per document: the proxy's log-probability of each candidate word given the text before it (the sum over the
    word's tokens), from one probe pass over the documents (:func:`~lmaudit.probes.ar.probe_ar`)."""
    if proxy.adapter.scoring != "left-to-right":
        raise LmauditError(f"the MBA proxy '{proxy.path}' does not read text left to right",
                           hint="name an autoregressive model as the proxy, or use mask_selection='spread'")
    tok = proxy.tokenizer
    if not getattr(tok, "is_fast", False):
        raise LmauditError(f"the MBA proxy '{proxy.path}' has no fast tokenizer (its words' offsets are needed)")
    stats = probe_ar(proxy, TextSet.from_texts(documents, prefix="document:", source="the MBA documents"))
    special = set(tok.all_special_ids)
    out = []
    for i, document in enumerate(documents):
        enc = tok(document, add_special_tokens=True, return_offsets_mapping=True)
        logp = stats.logp[stats.offsets[i]:stats.offsets[i + 1]]
        scored = [j for j, t in enumerate(enc["input_ids"]) if j >= 1 and t not in special]
        if len(logp) > len(scored):
            raise LmauditError(f"the MBA proxy's tokens of document {i} do not align with its probe",
                               hint="use mask_selection='spread'")
        token_lp = dict(zip(scored, logp.tolist()))  # a document cut to the proxy's context keeps its first tokens
        spans = {}
        for s, e in candidates(document):
            inside = [j for j, (a, b) in enumerate(enc["offset_mapping"]) if a < e and b > s and b > a]
            if inside and all(j in token_lp for j in inside):
                spans[(s, e)] = float(sum(token_lp[j] for j in inside))
        out.append(spans)
    return out


def mask_documents(documents: list[str], *, n_masks: int, selection: str = "proxy",
                   proxy: ModelHandle | None = None, names: list[str] | None = None) -> list[MaskedDocument]:
    """The masked form of every document (see the module); ``names`` name them in errors."""
    names = names or [f"document {i}" for i in range(len(documents))]
    if selection == "spread":
        return [spread_masks(d, n_masks, where=n) for d, n in zip(documents, names)]
    if selection != "proxy":
        raise LmauditError(f"unknown mask selection '{selection}'", hint=f"use one of {', '.join(SELECTIONS)}")
    if proxy is None:
        raise LmauditError("MBA chooses its masks with a proxy model: none was given",
                           hint="pass {proxy} (a local model), or {spread}",
                           options={"proxy": ("proxy=", "--proxy"),
                                    "spread": ("mask_selection='spread'", "--mask-selection spread")})
    difficulty = word_logprobs(proxy, documents)
    return [hardest_masks(d, w, n_masks, where=n) for d, w, n in zip(documents, difficulty, names)]


def mba_question(masked: MaskedDocument) -> str:
    """The question MBA asks: to fill every mask of the masked text, one line per mask."""
    n = len(masked.spans)
    return (f"The text below has {n} masked word{'s' if n > 1 else ''}, marked [MASK_1] to [MASK_{n}]. "
            "Using the context, give the word hidden by each mask, one per line, as:\n[MASK_1]: ...\n\n"
            f"Text: {masked.text}")


_FILL = re.compile(r"\[?\s*mask[\s_-]*(\d+)\s*\]?\s*[:=\-]\s*(.*)", re.IGNORECASE)


def _plain(word: str) -> str:
    return re.sub(r"^\W+|\W+$", "", word.lower())


def fills(answer: str) -> dict[int, str]:
    """{mask number: the first word given for it} from an answer with lines ``[MASK_i]: word`` (the first line that
    names a mask with a word wins: the question's own format line, ``[MASK_1]: ...``, echoed back, fills nothing).

    >>> fills("[MASK_1]: Paris.\\n[mask_2] = the river\\nsomething else")
    {1: 'paris', 2: 'the'}
    >>> fills("as:\\n[MASK_1]: ...\\n[MASK_1]: Paris")
    {1: 'paris'}
    """
    out: dict[int, str] = {}
    for line in answer.splitlines():
        m = _FILL.search(line)
        if m:
            first = m.group(2).split()
            word = _plain(first[0]) if first else ""
            if word:
                out.setdefault(int(m.group(1)), word)
    return out


def fill_accuracy(masked: MaskedDocument, answer: str) -> float:
    """The share of ``masked``'s masks the answer fills with their word."""
    got = fills(answer)
    return sum(got.get(i) == _plain(w) for i, w in enumerate(masked.answers, 1)) / len(masked.answers)


def mba(system, masked: MaskedDocument) -> RagScore:
    """MBA's score of a masked document on ``system``: the share of masks its answer fills correctly."""
    answer = system.answer(mba_question(masked))
    return RagScore(fill_accuracy(masked, answer), QUERIES["mba"], answer)


def mba_plan(masked: list[MaskedDocument]) -> QuestionSet:
    """MBA's one question per masked document and its score (the share of masks filled back)."""
    return QuestionSet([[mba_question(m)] for m in masked],
                       lambda i, answers: fill_accuracy(masked[i], answers[0]),
                       {"mba_masks": [len(m.spans) for m in masked]})
