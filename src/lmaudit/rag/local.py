"""A retrieval-augmented pipeline lmaudit builds itself, for experiments and tests: a real BM25 store (``bm25s``), the
top-k documents for each question, a prompt that holds them as context, and a local generator decoding greedily.

- **Store**: :class:`Bm25Store` indexes its documents once (lower-cased words of two or more letters or digits, no
  stop-word list). A question retrieves the ``top_k`` documents of highest BM25 score, ties in store order; a
  document that shares no word with the question (score 0) is not retrieved, so a question may get fewer.
- **Prompt**: the template (:data:`~lmaudit.rag.system.DEFAULT_TEMPLATE` unless given) with the retrieved documents
  as ``{context}``; with the generator's chat template, when its tokenizer has one, as the user's turn.
- **Generator**: any model :func:`lmaudit.models.loading.load_model` loads (its adapter's ``fill`` continues the
  prompt, at temperature 0: greedy), ``max_new_tokens`` new tokens cut at the first special token (the end of the
  turn); or a function of the prompt's text (a stand-in in tests). A prompt longer than the model's context keeps
  its last tokens (the question) and is counted in :meth:`LocalRag.describe`.
- **Control**: an empty store gives the same prompt with an empty context: the generator alone, which is what the
  no-retrieval control asks.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from lmaudit.errors import LmauditError
from lmaudit.models.chat import has_chat_template
from lmaudit.models.handle import ModelHandle
from lmaudit.rag.system import DEFAULT_TEMPLATE, check_template, render
from lmaudit.utils import stable_hash

try:  # an optional dependency: lmaudit[rag]
    import bm25s
    from bm25s.tokenization import Tokenizer as Bm25Tokenizer
except ImportError:  # pragma: no cover - said when a store is built
    bm25s = Bm25Tokenizer = None


class Bm25Store:
    """BM25 over ``documents`` (a list of texts; empty: a store that retrieves nothing)."""

    def __init__(self, documents: list[str]) -> None:
        if bm25s is None:
            import importlib.util

            installed = importlib.util.find_spec("bm25s") is not None  # there, but without bm25s.tokenization
            raise LmauditError("a local RAG store needs " + ("a newer bm25s (one with bm25s.tokenization)" if installed
                                                             else "the bm25s package"),
                               hint="pip install -U 'lmaudit[rag]'")
        self.documents = [str(d) for d in documents]
        empty = [i for i, d in enumerate(self.documents) if not d.strip()]
        if empty:
            raise LmauditError(f"the store's document {empty[0]} is empty", hint="drop empty documents")
        self.fingerprint = stable_hash("bm25-store", *self.documents)
        self._tokenizer = Bm25Tokenizer(stopwords=None, lower=True)
        self._index = None
        if self.documents:
            tokens = self._tokenizer.tokenize(self.documents, return_as="tuple", show_progress=False)
            self._index = bm25s.BM25()
            self._index.index(tokens, show_progress=False)

    def __len__(self) -> int:
        return len(self.documents)

    def scores(self, question: str) -> np.ndarray:
        """The BM25 score of every document for ``question`` (store order)."""
        if self._index is None:
            return np.zeros(0)
        words = self._tokenizer.tokenize([question], update_vocab=False, return_as="string", show_progress=False)[0]
        return np.asarray(self._index.get_scores(words), dtype=np.float64)

    def retrieve(self, question: str, k: int) -> list[int]:
        """The indices of the (at most) ``k`` documents of highest positive score, best first, ties in store order."""
        scores = self.scores(question)
        order = np.lexsort((np.arange(len(scores)), -scores))
        return [int(i) for i in order[:k] if scores[i] > 0]


class LocalRag:
    """A local RAG pipeline: ``store`` (a :class:`Bm25Store` or a list of documents), ``generator`` (a loaded model's
    handle, or a function of the prompt text that returns the answer), ``top_k``, ``template``, ``max_new_tokens``
    and ``chat_template`` (None: the generator's when its tokenizer has one)."""

    def __init__(self, store, generator: ModelHandle | Callable[[str], str], *, top_k: int = 3,
                 template: str = DEFAULT_TEMPLATE, max_new_tokens: int = 64, chat_template: bool | None = None) -> None:
        self.store = store if isinstance(store, Bm25Store) else Bm25Store(list(store))
        if not isinstance(generator, ModelHandle) and not callable(generator):
            raise LmauditError(f"the generator must be a loaded model or a function of the prompt, got "
                               f"{type(generator).__name__}")
        for name, value in (("top_k", top_k), ("max_new_tokens", max_new_tokens)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise LmauditError(f"{{{name}}} must be an integer ≥ 1, got {value!r}", options=(name,))
        self.generator, self.top_k, self.max_new_tokens = generator, top_k, max_new_tokens
        self.template = check_template(template)
        model = isinstance(generator, ModelHandle)
        if model and chat_template and not has_chat_template(generator.tokenizer):
            raise LmauditError("{chat_template}: the generator's tokenizer has no chat template",
                               options={"chat_template": ("chat_template=True", "--chat-template")})
        self.chat = bool(model and (has_chat_template(generator.tokenizer) if chat_template is None
                                    else chat_template))
        self.queries = 0
        self.truncated = 0  # prompts cut to the generator's context

    def empty_copy(self) -> LocalRag:
        """The same pipeline with an empty store: the no-retrieval control."""
        return LocalRag([], self.generator, top_k=self.top_k, template=self.template,
                        max_new_tokens=self.max_new_tokens, chat_template=self.chat)

    def retrieve(self, question: str) -> list[int]:
        """The store's documents the question retrieves (indices, best first)."""
        return self.store.retrieve(question, self.top_k)

    def prompt(self, question: str) -> str:
        """The prompt text the generator reads for ``question`` (before its chat template)."""
        return render(self.template, question, [self.store.documents[i] for i in self.retrieve(question)])

    def answer(self, question: str) -> str:
        text = self.prompt(question)
        self.queries += 1
        if not isinstance(self.generator, ModelHandle):
            out = self.generator(text)
            if not isinstance(out, str):
                raise LmauditError(f"the generator function returned a {type(out).__name__}, not a text")
            return out
        return self._generate(text)

    def _generate(self, text: str) -> str:
        handle = self.generator
        tok = handle.tokenizer
        if self.chat:
            rendered = tok.apply_chat_template([{"role": "user", "content": text}], tokenize=False,
                                               add_generation_prompt=True)
            ids = tok(rendered, add_special_tokens=False)["input_ids"]
        else:
            ids = tok(text, add_special_tokens=True)["input_ids"]
        room = handle.adapter.context_length - self.max_new_tokens
        if room < 1:
            raise LmauditError(f"{{max_new_tokens}} {self.max_new_tokens} leaves no room for a prompt in the "
                               f"generator's context of {handle.adapter.context_length} tokens",
                               options=("max_new_tokens",))
        if len(ids) > room:
            ids, self.truncated = ids[-room:], self.truncated + 1
        pad = handle.adapter.pad_id
        full = np.asarray(list(ids) + [pad] * self.max_new_tokens, dtype=np.int64)
        new = handle.adapter.fill(full, np.arange(len(ids), len(full)), samples=1, temperature=0.0)[0]
        special = set(tok.all_special_ids)
        stop = next((i for i, t in enumerate(new.tolist()) if t in special), len(new))
        return tok.decode(new[:stop].tolist(), skip_special_tokens=True).strip()

    def describe(self) -> dict:
        model = isinstance(self.generator, ModelHandle)
        generator = ({"path": self.generator.path, "fingerprint": self.generator.fingerprint,
                      "kind": self.generator.kind} if model
                     else {"function": getattr(self.generator, "__qualname__", type(self.generator).__name__)})
        return {"system": "local", "retriever": "bm25 (bm25s)", "top_k": self.top_k, "template": self.template,
                "generation": {"decoding": "greedy", "max_new_tokens": self.max_new_tokens,
                               "chat_template": self.chat},
                "store_size": len(self.store), "store_fingerprint": self.store.fingerprint, "generator": generator,
                "queries": self.queries, "prompts_truncated": self.truncated}
