"""Retrieval-augmented systems as something an audit can question: a system that answers a question in text
(:class:`~lmaudit.rag.system.RagSystem`), a local pipeline lmaudit builds (:mod:`lmaudit.rag.local`: a BM25 store
and a local generator), a served one behind an OpenAI-compatible chat endpoint (:mod:`lmaudit.rag.served`), and the
membership attacks that read only the system's answers (:mod:`lmaudit.rag.attacks`).

Importing this package imports no model code; the modules that need it import it themselves.
"""
