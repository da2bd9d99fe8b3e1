import textwrap

import pytest

from lmaudit.data import corpus as corpus_mod
from lmaudit.data.corpus import build_corpus, clean_docstring, pool_of

LONG = "This function computes the value of the thing from its inputs and returns it. " * 2


def make_package(root, extra=""):
    pkg = root / "fakepkg"
    pkg.mkdir(parents=True, exist_ok=True)
    (pkg / "__init__.py").write_text(f'"""{LONG} Module level."""\n')
    (pkg / "mod.py").write_text(textwrap.dedent(f'''
        def f(x):
            """{LONG}

            Examples
            --------
            >>> f(1)
            2
            """

        def g(x):
            """{LONG}

            Examples
            --------
            >>> g(1)
            2
            """

        class C:
            """Short."""
            def method(self):
                """{LONG} A method docstring. {extra}"""
        '''))
    (pkg / "broken.py").write_text("def (:\n")
    return pkg


def test_clean_docstring_drops_doctests_and_underlines():
    text = clean_docstring("Summary line.\n\nExamples\n--------\n>>> f(1)\n... more\nprose stays\n\n\n\nend")
    assert text == "Summary line.\n\nExamples\nprose stays\n\nend"


def test_extracts_cleans_and_deduplicates(tmp_path):
    pkg = make_package(tmp_path / "src")
    c = build_corpus((str(pkg),), min_chars=100, root=tmp_path)
    texts = [d.text for d in c.documents]
    assert len(texts) == 3  # module, f (== g after cleaning: deduplicated), method; broken file and short doc skipped
    assert not any(">>>" in t or "--------" in t for t in texts)
    assert {d.pool for d in c.documents} <= {"pretrain", "member", "nonmember"}
    assert all(d.pool == pool_of(d.text) for d in c.documents)
    assert c.manifest["n_documents"] == 3


def test_cache_is_reused_and_fingerprint_follows_content(tmp_path, monkeypatch):
    pkg = make_package(tmp_path / "src")
    first = build_corpus((str(pkg),), min_chars=100, root=tmp_path)
    monkeypatch.setattr(corpus_mod, "extract_documents", lambda *a, **k: pytest.fail("re-extracted a cached corpus"))
    assert build_corpus((str(pkg),), min_chars=100, root=tmp_path).fingerprint == first.fingerprint
    monkeypatch.undo()
    make_package(tmp_path / "src", extra="Now with different and longer content.")
    assert build_corpus((str(pkg),), min_chars=100, root=tmp_path).fingerprint != first.fingerprint


def test_pool_split_is_stable_and_roughly_proportional():
    pools = [pool_of(f"document number {i}") for i in range(5000)]
    assert pools == [pool_of(f"document number {i}") for i in range(5000)]
    assert 0.77 < pools.count("pretrain") / 5000 < 0.83
    assert 0.08 < pools.count("member") / 5000 < 0.12


def test_corpus_export_writes_each_pool_as_a_data_file_the_commands_read(tmp_path):
    from helpers import assert_ok, assert_user_error
    from helpers import lmaudit as cli
    from lmaudit.data.loaders import load_texts

    assert_ok(cli("corpus", "export", "--out", tmp_path / "c", "--chars", 200))
    corpus = build_corpus()
    for name, pool in (("members", "member"), ("nonmembers", "nonmember"), ("pretrain", "pretrain")):
        texts = load_texts(tmp_path / "c" / f"{name}.jsonl")
        docs = corpus.pool(pool)
        assert len(texts) == len(docs) and texts.records[0].id == docs[0].id
        assert max(len(r.text) for r in texts.records) <= 200 and texts.records[0].fields["package"] == docs[0].package
    assert_user_error(cli("corpus", "export", "--out", tmp_path / "d", "--chars", 0),
                      "--chars must be an integer ≥ 1, got 0")
