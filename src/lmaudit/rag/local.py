"""A retrieval-augmented pipeline lmaudit builds itself, for experiments and tests: a real BM25 store (``bm25s``), the
top-k documents for each question, a prompt that holds them as context, and a local generator decoding greedily.

- **Store**: :class:`Bm25Store` indexes its documents once (lower-cased words of two or more letters or digits, no
  stop-word list). A question retrieves the ``top_k`` documents of highest BM25 score, ties in store order; a
  document that shares no word with the question (score 0) is not retrieved, so a question may get fewer.
- **Prompt**: the template (:data:`~lmaudit.rag.system.DEFAULT_TEMPLATE` unless given) with the retrieved documents
  as ``{context}``; with the generator's chat template, when its tokenizer has one, as the user's turn.
- **Generator** (:class:`TextGenerator`): any model :func:`lmaudit.models.loading.load_model` loads, decoding
  greedily at most ``max_new_tokens`` new tokens, cut at the first special token (the end of the turn). A causal LM
  answers ``batch_size`` prompts at once (left-padded, each stopping at its own end of turn: the library's
  ``generate``); another model continues each prompt with its adapter's ``fill``. A prompt longer than the model's
  context keeps its last tokens (the question) and is counted in :meth:`LocalRag.describe`. Answers are kept in
  memory by prompt, so pipelines sharing a generator (a store and its empty control) never generate one prompt
  twice. A function of the prompt's text stands in for a model in tests.
- **Control**: an empty store gives the same prompt with an empty context: the generator alone, which is what the
  no-retrieval control asks.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
from transformers import GenerationConfig

from lmaudit.errors import LmauditError
from lmaudit.models.chat import has_chat_template
from lmaudit.models.handle import ModelHandle
from lmaudit.rag.system import DEFAULT_TEMPLATE, check_template, render
from lmaudit.settings import integer
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


class TextGenerator:
    """Greedy answers of a loaded model (``handle``) to prompts, as the module says: ``max_new_tokens`` each,
    ``chat_template`` (None: the tokenizer's when it has one), ``batch_size`` prompts a forward."""

    def __init__(self, handle: ModelHandle, *, max_new_tokens: int = 64, chat_template: bool | None = None,
                 batch_size: int = 8) -> None:
        for name, value in (("max_new_tokens", max_new_tokens), ("batch_size", batch_size)):
            integer(1)(value, name, None)  # the settings' own check, for a generator built here
        if chat_template and not has_chat_template(handle.tokenizer):
            raise LmauditError("{chat_template}: the generator's tokenizer has no chat template",
                               options={"chat_template": ("chat_template=True", "--chat-template")})
        room = handle.adapter.context_length - max_new_tokens
        if room < 1:
            raise LmauditError(f"{{max_new_tokens}} {max_new_tokens} leaves no room for a prompt in the "
                               f"generator's context of {handle.adapter.context_length} tokens",
                               options=("max_new_tokens",))
        self.handle, self.max_new_tokens, self.batch_size, self.room = handle, max_new_tokens, batch_size, room
        self.chat = has_chat_template(handle.tokenizer) if chat_template is None else bool(chat_template)
        self.memo: dict[str, str] = {}  # prompt text → answer
        self.truncated = 0  # prompts cut to the context

    def _ids(self, text: str) -> list[int]:
        tok = self.handle.tokenizer
        if self.chat:
            rendered = tok.apply_chat_template([{"role": "user", "content": text}], tokenize=False,
                                               add_generation_prompt=True)
            ids = tok(rendered, add_special_tokens=False)["input_ids"]
        else:
            ids = tok(text, add_special_tokens=True)["input_ids"]
        if len(ids) > self.room:
            ids, self.truncated = ids[-self.room:], self.truncated + 1
        return list(ids)

    def _decode(self, new) -> str:
        tok = self.handle.tokenizer
        special = set(tok.all_special_ids)
        new = [int(t) for t in new]
        stop = next((i for i, t in enumerate(new) if t in special), len(new))
        return tok.decode(new[:stop], skip_special_tokens=True).strip()

    def _batch(self, texts: list[str]) -> list[str]:
        adapter = self.handle.adapter
        rows = [self._ids(t) for t in texts]
        pad = adapter.pad_id
        if adapter.scoring != "left-to-right" or not hasattr(adapter.model, "generate"):  # a DLM fills its answer
            out = []
            for ids in rows:
                full = np.asarray(ids + [pad] * self.max_new_tokens, dtype=np.int64)
                out.append(self._decode(adapter.fill(full, np.arange(len(ids), len(full)), samples=1,
                                                     temperature=0.0)[0]))
            return out
        width = max(len(r) for r in rows)
        ids = torch.tensor([[pad] * (width - len(r)) + r for r in rows], dtype=torch.long)
        mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows], dtype=torch.long)
        device = next(adapter.model.parameters()).device
        config = GenerationConfig(max_new_tokens=self.max_new_tokens, do_sample=False, pad_token_id=pad,
                                  eos_token_id=sorted(self.handle.tokenizer.all_special_ids))
        with torch.no_grad():
            made = adapter.model.generate(input_ids=ids.to(device), attention_mask=mask.to(device),
                                          generation_config=config)
        return [self._decode(row) for row in made[:, width:].cpu().tolist()]

    def __call__(self, texts: list[str]) -> list[str]:
        """The answer to every prompt of ``texts`` (from memory where it was asked before)."""
        todo = list(dict.fromkeys(t for t in texts if t not in self.memo))
        for start in range(0, len(todo), self.batch_size):
            chunk = todo[start:start + self.batch_size]
            self.memo.update(zip(chunk, self._batch(chunk)))
        return [self.memo[t] for t in texts]

    def answering(self, max_new_tokens: int) -> TextGenerator:
        """The same model and settings answering with at most ``max_new_tokens`` (its own memory of answers): a
        short answer asked for (yes or no) needs no budget written for longer ones."""
        return TextGenerator(self.handle, max_new_tokens=min(max_new_tokens, self.max_new_tokens),
                             chat_template=self.chat, batch_size=self.batch_size)

    def describe(self) -> dict:
        return {"path": self.handle.path, "fingerprint": self.handle.fingerprint, "kind": self.handle.kind}


class LocalRag:
    """A local RAG pipeline: ``store`` (a :class:`Bm25Store` or a list of documents), ``generator`` (a loaded model's
    handle, a :class:`TextGenerator` to share, or a function of the prompt text that returns the answer),
    ``top_k``, ``template``, and for a model ``max_new_tokens``, ``chat_template`` (None: the generator's when its
    tokenizer has one) and ``batch_size``."""

    def __init__(self, store, generator: ModelHandle | TextGenerator | Callable[[str], str], *, top_k: int = 3,
                 template: str = DEFAULT_TEMPLATE, max_new_tokens: int = 64, chat_template: bool | None = None,
                 batch_size: int = 8) -> None:
        self.store = store if isinstance(store, Bm25Store) else Bm25Store(list(store))
        if isinstance(generator, ModelHandle):
            generator = TextGenerator(generator, max_new_tokens=max_new_tokens, chat_template=chat_template,
                                      batch_size=batch_size)
        elif not isinstance(generator, TextGenerator) and not callable(generator):
            raise LmauditError(f"the generator must be a loaded model or a function of the prompt, got "
                               f"{type(generator).__name__}")
        integer(1)(top_k, "top_k", None)
        self.generator, self.top_k = generator, top_k
        self.template = check_template(template)
        self.queries = 0

    @property
    def model(self) -> TextGenerator | None:
        """The generator when it is a model (None for a function of the prompt)."""
        return self.generator if isinstance(self.generator, TextGenerator) else None

    def empty_copy(self) -> LocalRag:
        """The same pipeline, its generator shared, with an empty store: the no-retrieval control."""
        return LocalRag([], self.generator, top_k=self.top_k, template=self.template)

    def retrieve(self, question: str) -> list[int]:
        """The store's documents the question retrieves (indices, best first)."""
        return self.store.retrieve(question, self.top_k)

    def prompt(self, question: str) -> str:
        """The prompt text the generator reads for ``question`` (before its chat template)."""
        return render(self.template, question, [self.store.documents[i] for i in self.retrieve(question)])

    def answer(self, question: str) -> str:
        return self.answer_many([question])[0]

    def answer_many(self, questions: list[str]) -> list[str]:
        """The answers to ``questions``, in order (a model answers them in batches)."""
        prompts = [self.prompt(q) for q in questions]
        self.queries += len(prompts)
        if self.model is not None:
            return self.model(prompts)
        out = [self.generator(p) for p in prompts]
        bad = next((o for o in out if not isinstance(o, str)), None)
        if bad is not None:
            raise LmauditError(f"the generator function returned a {type(bad).__name__}, not a text")
        return out

    def describe(self) -> dict:
        model = self.model
        generator = (model.describe() if model is not None
                     else {"function": getattr(self.generator, "__qualname__", type(self.generator).__name__)})
        generation = {"decoding": "greedy", "max_new_tokens": model.max_new_tokens, "chat_template": model.chat,
                      "batch_size": model.batch_size} if model is not None else {"decoding": "the function's"}
        return {"system": "local", "retriever": "bm25 (bm25s)", "top_k": self.top_k, "template": self.template,
                "generation": generation, "store_size": len(self.store), "store_fingerprint": self.store.fingerprint,
                "generator": generator, "queries": self.queries,
                "prompts_truncated": model.truncated if model is not None else 0}
