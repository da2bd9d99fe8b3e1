"""``lmaudit corpus build`` and ``lmaudit corpus pii``: the embedded corpus and synthetic PII."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from lmaudit.commands import common as c
from lmaudit.data.corpus import build_corpus
from lmaudit.data.pii import pii_corpus, write_jsonl
from lmaudit.progress import stdout_console

app = typer.Typer(add_completion=False, no_args_is_help=True, help="The embedded corpus (docstrings of installed packages).")


@app.command("build")
def corpus_build(
    config: Optional[Path] = c.config_option(),
    packages: str = typer.Option("numpy,scipy,torch,transformers", help="Comma-separated packages (names or folders)."),
    force: bool = typer.Option(False, help="Rebuild even if cached."),
) -> None:
    """Extract, clean and cache the docstring corpus; print its manifest."""
    corpus = build_corpus(tuple(p for p in packages.split(",") if p), force=force)
    stdout_console.print_json(data=corpus.manifest)


@app.command("pii")
def corpus_pii(
    config: Optional[Path] = c.config_option(),
    out: Path = typer.Option(Path("data/pii"), help="Folder for train.jsonl and unseen.jsonl."),
    n_train: int = typer.Option(200),
    n_unseen: int = typer.Option(200),
    seed: int = typer.Option(0),
) -> None:
    """Write synthetic e-mails with names, e-mail addresses and phone numbers (seeded Faker)."""
    train, unseen = pii_corpus(build_corpus(), n_train, n_unseen, seed=seed)
    stdout_console.print(f"{write_jsonl(train, out / 'train.jsonl')}  {write_jsonl(unseen, out / 'unseen.jsonl')}")
