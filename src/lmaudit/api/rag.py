"""RAG jobs: whether documents are in a retrieval-augmented system's store, read from its answers alone
(:mod:`lmaudit.runs.rag_mia`)."""

from __future__ import annotations

from lmaudit.data.given import given_texts, texts_of
from lmaudit.data.loaders import TextSet, load_member_sets
from lmaudit.data.overlap import check_sets
from lmaudit.errors import DataError, SettingError
from lmaudit.models.endpoint import is_endpoint
from lmaudit.models.handle import ModelHandle
from lmaudit.models.loading import load_model
from lmaudit.rag.local import Bm25Store, LocalRag, TextGenerator
from lmaudit.rag.served import ServedRag
from lmaudit.rag.system import RagSystem
from lmaudit.runs.rag_mia import RagConfig, RagResult, run_rag_mia

# what lmaudit.api (and lmaudit) exports of this module: its jobs and the settings they take
__all__ = ["rag_mia", "RagConfig"]


def _in_store(store: TextSet, members: TextSet, nonmembers: TextSet) -> None:
    """A local pipeline's labels must be true: every member in its store, no non-member."""
    held = {r.target for r in store.records}
    missing = next((r for r in members.records if r.target not in held), None)
    if missing is not None:
        raise DataError(f"member '{missing.id}' of {members.source} is not in the store ({store.source})",
                        hint="the members of a local pipeline are documents of its store")
    present = next((r for r in nonmembers.records if r.target in held), None)
    if present is not None:
        raise DataError(f"non-member '{present.id}' of {nonmembers.source} is in the store ({store.source})",
                        hint="the non-members of a local pipeline are documents its store does not hold")


def _control(control, cfg: RagConfig, *, verify: bool, served_model: str | None):
    """The control as given: a system, or the URL of one, asked with the run's own generation settings (a longer
    answer scores differently, so the two must be asked alike)."""
    if control is None or isinstance(control, RagSystem):
        return control
    if is_endpoint(control):
        return ServedRag(str(control), model=served_model, max_tokens=cfg.max_new_tokens, seed=cfg.seed,
                         verify=verify)
    raise SettingError("control", "{name} must be a RAG system or the URL of one, got " + type(control).__name__)


def rag_mia(target, members=None, nonmembers=None, *, store=None, config: RagConfig | None = None, proxy=None,
            helper=None, control=None, data=None, label_field: str | None = None, text_field: str = "text",
            split: str | None = None, served_model: str | None = None, verify: bool = True,
            **load_options) -> RagResult:
    """Membership inference against a retrieval-augmented system through its answers: per attack of
    ``config.attacks``, AUC and TPR at low FPR with intervals, and the queries asked per document.

    ``target`` is one of: the URL of an OpenAI-compatible chat endpoint (``http://host:port/v1``; ``served_model``
    names its model where it serves several; ``verify`` checks TLS certificates), whose retrieval is hidden; a
    generator (a model folder, GGUF file, model name or loaded model, with ``load_options`` for
    :func:`~lmaudit.models.loading.load_model`) to which ``store`` (a data file, text set or list of texts: the
    documents of a local BM25 pipeline, members among them and non-members not) is added; or any object with
    ``answer(question)`` and ``describe()`` (:class:`~lmaudit.rag.system.RagSystem`). ``members`` and ``nonmembers``
    as in :func:`lmaudit.mia` (or one labelled ``data`` file). ``proxy``: the local model that chooses MBA's masks
    (``config.mask_selection="proxy"``). ``helper``: the local model that writes the interrogation attack's
    questions and their true answers (``config.question_source="helper"``; None: the proxy). ``control``: the
    generator without retrieval (a system or its URL); a local pipeline makes its own (the same generator, an empty
    store) unless ``config.control`` is False. The data (a local pipeline's members in its store, its non-members
    not) and the settings are checked before any model loads.

    Examples
    --------
    >>> result = lmaudit.rag_mia(MODEL, "members.jsonl", "nonmembers.jsonl", store="members.jsonl", proxy=MODEL,
    ...                          config=lmaudit.RagConfig(max_new_tokens=8, n_bootstrap=50))
    >>> sorted(result["attacks"]), result["system"]["top_k"], result["system"]["store_size"]
    (['mba', 's2mia'], 3, 12)
    >>> result["attacks"]["mba"]["queries_per_document"], result["control"]["store_size"]
    (1, 0)
    """
    cfg = config or RagConfig()
    mem, non = load_member_sets(given_texts(members, "members"), given_texts(nonmembers, "nonmembers"), data=data,
                                label_field=label_field, text_field=text_field, split=split)
    overlap = check_sets({"members": mem, "nonmembers": non}, [("members", "nonmembers")])
    needs_proxy = "mba" in cfg.attacks and cfg.mask_selection == "proxy"
    if needs_proxy and proxy is None:
        raise SettingError("proxy", "MBA chooses its masks with a proxy model: give {name}",
                           hint="a local model (any lmaudit loads), or mask_selection='spread' for no model")
    needs_helper = "interrogation" in cfg.attacks and cfg.question_source == "helper"
    if needs_helper and helper is None and proxy is None:
        raise SettingError("helper", "the interrogation attack's questions are written by a helper model: give "
                                     "{name} (or a proxy)",
                           hint="a local model able to write questions, or question_source='statements' for none")
    control = _control(control, cfg, verify=verify, served_model=served_model)
    if isinstance(target, RagSystem) and not isinstance(target, ModelHandle):
        system = target
        if control is None and cfg.control and isinstance(system, LocalRag):
            control = system.empty_copy()
    elif is_endpoint(target):
        if store is not None:
            raise SettingError("store", "{name} is for a local pipeline: a served system's store is its own",
                               hint="leave it out with a URL")
        system = ServedRag(str(target), model=served_model, max_tokens=cfg.max_new_tokens, seed=cfg.seed,
                           verify=verify)
    else:
        if store is None:
            raise SettingError("store", "a local pipeline needs {name} (the documents it retrieves from)",
                               hint="or give the URL of a served system")
        documents = texts_of(store, text_field, split, name="store")
        _in_store(documents, mem, non)
        built = Bm25Store([r.target for r in documents.records])  # bm25s is needed: said before the model loads
        generator = target if isinstance(target, ModelHandle) else load_model(target, **load_options)
        system = LocalRag(built, generator, top_k=cfg.top_k, template=cfg.template,
                          max_new_tokens=cfg.max_new_tokens, chat_template=cfg.chat_template,
                          batch_size=cfg.batch_size)
        if control is None and cfg.control:
            control = system.empty_copy()
    loaded = {str(target): system.generator.handle} if isinstance(system, LocalRag) and system.model else {}

    def local(name):  # each model named once is loaded once (one named as the generator is the generator)
        if isinstance(name, ModelHandle):
            return name
        if str(name) not in loaded:
            loaded[str(name)] = load_model(name)
        return loaded[str(name)]

    mask_model = local(proxy) if needs_proxy else None
    writer = None
    if needs_helper:
        model = local(helper if helper is not None else proxy)
        writer = TextGenerator(model, max_new_tokens=32 * cfg.n_questions + 16, batch_size=cfg.batch_size)
    return run_rag_mia(system, mem, non, config=cfg, control=control, proxy=mask_model, helper=writer,
                       overlap=overlap)
