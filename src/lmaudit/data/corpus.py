"""The embedded corpus: docstrings of scientific Python packages.

Docstrings are read with :mod:`ast` (packages are never imported), cleaned,
de-duplicated and kept when longer than ``min_chars``. Each document is assigned
to a pool — ``pretrain``, ``member`` or ``nonmember`` — by a stable hash of its
text, so the split does not depend on file order.

The default corpus (numpy, scipy, torch and transformers, 300+ characters) is the one
shipped with lmaudit (:mod:`lmaudit.data.snapshot`): the same documents whatever versions
are installed, so the committed results re-run to their figures. Any other choice of
packages, or ``installed=True``, reads the installed packages' sources; that corpus is
cached under a key of (package versions, extractor version), its manifest records the
content hash (checked when the cache is read), and a default corpus read so that differs
from the shipped one is said to differ.

:func:`pydoc_corpus` is an out-of-domain source for the same pipeline: prose
paragraphs of the Python language reference that every Python install ships
(:mod:`pydoc_data.topics`), split into ``member`` and ``nonmember`` pools only —
no model pretrained on the docstring corpus ever saw it.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import platform
import re
from concurrent.futures import ProcessPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from lmaudit.data.loaders import Record, TextSet
from lmaudit.data.snapshot import embedded_hash, embedded_manifest, embedded_records
from lmaudit.errors import DataError, LmauditError
from lmaudit.progress import info, progress
from lmaudit.utils import atomic_path, cache_dir, stable_hash

try:  # the Python language reference, the out-of-domain source (absent from stripped-down installs)
    from pydoc_data.topics import topics as PYDOC_TOPICS
except ImportError:
    PYDOC_TOPICS = None

DEFAULT_PACKAGES = ("numpy", "scipy", "torch", "transformers")
EXTRACTOR_VERSION = 2
POOL_PREFIX_CHARS = 256
POOL_FRACTIONS = {"pretrain": 0.8, "member": 0.1, "nonmember": 0.1}

_UNDERLINE = re.compile(r"^\s*([-=~^*#+`'\"])\1{2,}\s*$")
_DOCTEST = re.compile(r"^\s*(>>>|\.\.\.)( |$)")
_BLANKS = re.compile(r"\n{3,}")


@dataclass(frozen=True)
class Document:
    id: str
    package: str
    source: str
    text: str
    pool: str


def clean_docstring(doc: str) -> str:
    """Drop doctest lines and RST section underlines, trim trailing space, squeeze blank runs."""
    lines = [ln.rstrip() for ln in doc.splitlines() if not _DOCTEST.match(ln) and not _UNDERLINE.match(ln)]
    return _BLANKS.sub("\n\n", "\n".join(lines)).strip()


def _docstrings(tree: ast.AST):
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node, clean=True)
            if doc:
                yield getattr(node, "name", "<module>"), getattr(node, "lineno", 1), doc


def _package_root(name_or_path: str) -> tuple[str, Path]:
    p = Path(name_or_path)
    if p.is_dir():
        return p.name, p
    spec = importlib.util.find_spec(name_or_path)
    if spec is None or not spec.submodule_search_locations:
        raise LmauditError(f"package '{name_or_path}' is not installed", hint="install it or choose other --packages")
    return name_or_path, Path(next(iter(spec.submodule_search_locations)))


def pool_of(text: str, fractions: dict[str, float] = POOL_FRACTIONS) -> str:
    """Deterministic pool of a document from a stable hash of its opening.

    The hash covers the first ``POOL_PREFIX_CHARS`` characters (whitespace
    normalised), so documents that open identically — copied docstrings with a
    different tail — always share a pool, and no member passage reappears as a
    non-member. ``fractions`` maps each pool to its share (in order; they sum to 1).
    """
    head = " ".join(text.split())[:POOL_PREFIX_CHARS]
    u = int(stable_hash("pool", head, digest_size=8), 16) / 2**64
    acc = 0.0
    for pool, frac in fractions.items():
        acc += frac
        if u < acc:
            return pool
    return list(fractions)[-1]


def _file_docstrings(job: tuple[str, str, str]) -> list[tuple[str, str]]:
    """(source, cleaned text) of every docstring in one file; unparsable files give none."""
    name, root_parent, path = job
    f = Path(path)
    try:
        tree = ast.parse(f.read_bytes(), filename=path)
    except (SyntaxError, ValueError):
        return []
    rel = f.relative_to(root_parent)
    return [(f"{rel}:{lineno}:{qual}", clean_docstring(raw)) for qual, lineno, raw in _docstrings(tree)]


def extract_documents(packages=DEFAULT_PACKAGES, *, min_chars: int = 300, workers: int | None = None) -> list[Document]:
    """Extract, clean and de-duplicate docstrings of ``packages`` (names or folders).

    Files are parsed in parallel (``workers`` processes, default: all cores); results
    are consumed in sorted file order, so the corpus does not depend on scheduling.
    """
    roots = [_package_root(p) for p in packages]
    jobs = [(name, str(root.parent), str(f)) for name, root in roots for f in sorted(root.rglob("*.py"))]
    workers = workers or os.cpu_count() or 1
    seen: set[str] = set()
    docs: list[Document] = []
    with progress("corpus: reading docstrings", total=len(jobs)) as bar, ExitStack() as stack:
        if workers > 1 and len(jobs) > 200:
            pool = stack.enter_context(ProcessPoolExecutor(max_workers=workers))
            results = pool.map(_file_docstrings, jobs, chunksize=64)
        else:
            results = map(_file_docstrings, jobs)
        for (name, _, _), found in zip(jobs, results):
            bar.advance(1)
            for source, text in found:
                if len(text) < min_chars:
                    continue
                key = stable_hash(" ".join(text.split()).lower())
                if key in seen:
                    continue
                seen.add(key)
                docs.append(Document(id=key[:16], package=name, source=source, text=text, pool=pool_of(text)))
    return docs


def _versions(packages) -> dict[str, str]:
    out = {}
    for p in packages:
        name, root = _package_root(p)
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:  # a plain folder: version by content listing
            out[name] = stable_hash(sorted((str(f.relative_to(root)), f.stat().st_size) for f in root.rglob("*.py")))
    return out


class Corpus:
    """A built corpus: documents with pools, plus its manifest."""

    def __init__(self, documents: list[Document], manifest: dict) -> None:
        self.documents = documents
        self.manifest = manifest

    @property
    def fingerprint(self) -> str:
        return self.manifest["content_hash"]

    def pool(self, name: str) -> list[Document]:
        if name not in POOL_FRACTIONS:
            raise LmauditError(f"unknown pool '{name}'", hint=f"one of {', '.join(POOL_FRACTIONS)}")
        return [d for d in self.documents if d.pool == name]

    def shuffled(self, pool: str, seed: int = 0) -> list[Document]:
        """The pool's documents in a seeded order (a stable hash of seed and id)."""
        return sorted(self.pool(pool), key=lambda d: stable_hash(seed, d.id))

    def passages(self, pool: str, n: int, *, max_chars: int = 300, seed: int = 0) -> list[str]:
        """``n`` distinct passages of ``pool``: each a document's first ``max_chars``
        characters, cut back to a word boundary; documents taken in a seeded hash order
        and passages that repeat an earlier one skipped."""
        if n < 1:
            raise LmauditError(f"pool '{pool}': {n} passages requested", hint="ask for at least 1 passage")
        out: dict[str, None] = {}
        for d in self.shuffled(pool, seed):
            out.setdefault(cut_at_word(d.text, max_chars))
            if len(out) == n:
                return list(out)
        raise LmauditError(f"pool '{pool}' has {len(out)} distinct passages, {n} requested",
                           hint="ask for fewer samples")


def pool_textset(corpus: Corpus, pool: str, *, max_chars: int | None = None) -> TextSet:
    """A pool's documents as a text set (ids the documents', their package and source kept as fields), each cut to
    ``max_chars`` at a word boundary when given (:func:`cut_at_word`); documents in the corpus' order."""
    records = [Record(id=d.id, target=cut_at_word(d.text, max_chars) if max_chars else d.text,
                      fields={"package": d.package, "source": d.source}) for d in corpus.pool(pool)]
    return TextSet(records, source=f"corpus:{pool}")


def cut_at_word(text: str, max_chars: int) -> str:
    """The first ``max_chars`` characters of ``text``, cut back to a word boundary when one is near."""
    if len(text) <= max_chars:
        return text
    head = text[:max_chars]
    space = head.rfind(" ")
    return head[:space] if space > max_chars // 2 else head


def embedded_corpus() -> Corpus:
    """The shipped default corpus (:mod:`lmaudit.data.snapshot`), checked against its manifest."""
    manifest = {"source": "embedded", **{k: v for k, v in embedded_manifest().items() if k != "what"}}
    return Corpus([Document(**r) for r in embedded_records()], manifest)


def build_corpus(packages=DEFAULT_PACKAGES, *, min_chars: int = 300, root: Path | None = None,
                 force: bool = False, installed: bool = False) -> Corpus:
    """The corpus of ``packages``: the shipped one for the default packages and length (unless ``installed``), else
    built from the installed packages' sources (or loaded from the cache; ``force`` rebuilds it)."""
    default = tuple(packages) == DEFAULT_PACKAGES and min_chars == embedded_manifest()["min_chars"]
    if default and not installed:
        return embedded_corpus()
    corpus = _installed_corpus(packages, min_chars=min_chars, root=root, force=force)
    if default and corpus.fingerprint != embedded_hash():
        info(f"the installed packages' corpus (content hash {corpus.fingerprint[:8]}…, "
             f"{', '.join(f'{k} {v}' for k, v in corpus.manifest['packages'].items())}) differs from the embedded one "
             f"the committed results were built from ({embedded_hash()[:8]}…): its figures will differ")
    return corpus


def _installed_corpus(packages, *, min_chars: int, root: Path | None, force: bool) -> Corpus:
    versions = _versions(packages)
    key = stable_hash("corpus", EXTRACTOR_VERSION, versions, min_chars)
    folder = (root or cache_dir()) / "corpus" / key
    docs_path, manifest_path = folder / "documents.jsonl", folder / "manifest.json"
    if manifest_path.exists() and docs_path.exists() and not force:
        manifest = json.loads(manifest_path.read_text())
        raw = docs_path.read_bytes()
        if stable_hash(raw) == manifest.get("file_hash"):
            docs = [Document(**json.loads(line)) for line in raw.decode("utf-8").splitlines()]
            return Corpus(docs, manifest)
    info("building the corpus from the installed packages' docstrings (first run only)")
    docs = extract_documents(packages, min_chars=min_chars)
    if not docs:
        raise DataError(f"no docstrings of {min_chars}+ characters found in {', '.join(map(str, packages))}")
    payload = "".join(json.dumps(d.__dict__, ensure_ascii=False) + "\n" for d in docs).encode("utf-8")
    manifest = {
        "key": key,
        "packages": versions,
        "extractor_version": EXTRACTOR_VERSION,
        "min_chars": min_chars,
        "n_documents": len(docs),
        "n_chars": sum(len(d.text) for d in docs),
        "pools": {p: sum(d.pool == p for d in docs) for p in POOL_FRACTIONS},
        "content_hash": stable_hash([(d.id, d.pool) for d in docs]),
        "file_hash": stable_hash(payload),
    }
    folder.mkdir(parents=True, exist_ok=True)
    with atomic_path(docs_path) as tmp:
        tmp.write_bytes(payload)
    with atomic_path(manifest_path) as tmp:
        tmp.write_text(json.dumps(manifest, indent=2))
    return Corpus(docs, manifest)


# --- an out-of-domain source: the Python language reference shipped with every install ---

SOURCES = ("corpus", "pydoc")  # the data sources of an experiment's members and non-members
PYDOC_FRACTIONS = {"member": 0.5, "nonmember": 0.5}  # nothing of it is pretrained on
PYDOC_MIN_CHARS = 120
_PARAGRAPH_BREAK = re.compile(r"\n[ \t]*\n")


def is_prose(paragraph: str) -> bool:
    """Whether a paragraph of the language reference reads as prose, not as code, grammar or a table.

    Kept: it ends like a sentence (``.``, ``:``, ``?``, ``.)``), holds no grammar rule
    (``::=``), and at least 85% of its characters are letters or spaces (code, method
    signatures and ASCII tables fall below). Indented paragraphs are kept when they
    pass: the reference indents the prose that describes a method or a term.
    """
    flat = " ".join(paragraph.split())
    if not flat or "::=" in flat or not flat.endswith((".", ":", "?", ".)")):
        return False
    return sum(ch.isalpha() or ch == " " for ch in flat) / len(flat) >= 0.85


def pydoc_corpus(*, min_chars: int = PYDOC_MIN_CHARS) -> Corpus:
    """The out-of-domain corpus: prose paragraphs of the Python language reference (:mod:`pydoc_data.topics`).

    Each of the ~80 topic texts is cleaned like a docstring (:func:`clean_docstring`)
    and split at blank lines; a paragraph is kept when it is prose (:func:`is_prose`)
    and at least ``min_chars`` long once its whitespace is joined to single spaces (its
    text as stored). Repeats are dropped (case-insensitive). Pools ``member`` and
    ``nonmember`` (half each, by :func:`pool_of` on the opening): the docstring
    corpus' models never saw this text, so it needs no ``pretrain`` pool. Python 3.11
    gives ~790 paragraphs (~390 per pool). Built in well under a second, so not cached;
    the manifest names the Python version, whose reference it is.
    """
    if PYDOC_TOPICS is None:  # a stripped-down Python without the pydoc data
        raise LmauditError("this Python install has no pydoc_data.topics (the language reference)",
                           hint="use the default source (the docstring corpus)")
    topics = PYDOC_TOPICS
    seen: set[str] = set()
    docs: list[Document] = []
    for topic in sorted(topics):
        for i, para in enumerate(_PARAGRAPH_BREAK.split(clean_docstring(topics[topic]))):
            text = " ".join(para.split())
            if len(text) < min_chars or not is_prose(para):
                continue
            key = stable_hash(text.lower())
            if key in seen:
                continue
            seen.add(key)
            docs.append(Document(id=key[:16], package="pydoc_data", source=f"pydoc_data.topics:{topic}:{i}", text=text,
                                 pool=pool_of(text, PYDOC_FRACTIONS)))
    if not docs:
        raise DataError(f"no prose paragraph of {min_chars}+ characters in pydoc_data.topics")
    manifest = {
        "source": "pydoc",
        "python": platform.python_version(),
        "min_chars": min_chars,
        "n_documents": len(docs),
        "n_chars": sum(len(d.text) for d in docs),
        "pools": {p: sum(d.pool == p for d in docs) for p in PYDOC_FRACTIONS},
        "content_hash": stable_hash([(d.id, d.pool) for d in docs]),
    }
    return Corpus(docs, manifest)
