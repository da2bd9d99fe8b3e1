"""The Examples of the Python interface's docstrings run, on tiny fixtures (see lmaudit.api's module docstring)."""

import doctest
import json
import sys
from pathlib import Path

import scipy

import lmaudit
import lmaudit.api
from helpers import make_texts, write_jsonl


def _files(folder: Path) -> None:
    write_jsonl(folder / "members.jsonl", make_texts(12, seed=51))
    write_jsonl(folder / "nonmembers.jsonl", make_texts(12, seed=52))
    write_jsonl(folder / "suspect.jsonl", make_texts(8, seed=53))
    write_jsonl(folder / "prompts.jsonl", make_texts(2, seed=54))
    names = ["Ann Lee", "Bo Chan", "Cy Roe"]
    (folder / "redacted.jsonl").write_text("".join(
        json.dumps({"text": f"From: {n} <[REDACTED]>\nthe model data token value", "email":
                    n.lower().replace(" ", "") + "@mailbox.org"}) + "\n" for n in names))


def test_every_job_and_config_has_an_example_and_every_example_runs(tmp_path, monkeypatch, tiny_model_dir):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("LMAUDIT_CACHE", str(tmp_path / "cache"))
    _files(tmp_path)
    jobs = [name for name in lmaudit.api.__all__  # the functions of the interface's job modules
            if getattr(getattr(lmaudit.api, name), "__module__", "").startswith("lmaudit.api.")]
    lmaudit.api.load_jobs()
    assert set(lmaudit.api.JOBS) <= set(jobs)  # every declared job has its function (and its example, below)
    assert [j for j in jobs if ">>> " not in (getattr(lmaudit.api, j).__doc__ or "")] == []
    globs = {"lmaudit": lmaudit, "MODEL": str(tiny_model_dir),
             "PACKAGES": [str(Path(scipy.__file__).parent / "optimize")]}
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    modules = {getattr(lmaudit.api, name).__module__ for name in jobs}  # the interface's modules of jobs
    tests = [t for m in sorted(modules) for t in doctest.DocTestFinder().find(sys.modules[m], globs=globs)
             if t.examples]
    assert {t.name.rsplit(".", 1)[-1] for t in tests} >= set(jobs)
    configs = [name for name in lmaudit.__all__ if isinstance(getattr(lmaudit, name, None), type)]  # settings types
    assert len(configs) >= 6 and [c for c in configs if ">>> " not in (getattr(lmaudit, c).__doc__ or "")] == []
    finder = doctest.DocTestFinder(recurse=False)
    tests += [t for c in configs for t in finder.find(getattr(lmaudit, c), c, globs=globs) if t.examples]
    for test in sorted(tests, key=lambda t: t.name):
        runner.run(test)
    assert runner.summarize(verbose=False).failed == 0
