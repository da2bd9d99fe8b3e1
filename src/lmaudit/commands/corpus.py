"""``lmaudit corpus build``, ``corpus pii`` and ``corpus canaries``: the embedded corpus, synthetic PII, canaries."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from lmaudit.api.data import (
    CANARY_KINDS,
    CORPUS_SOURCES,
    build_corpus,
    pii_corpus,
    pool_textset,
    pydoc_corpus,
    write_canary_folder,
    write_jsonl,
)
from lmaudit.api.tools import output_folder
from lmaudit.commands import common as c
from lmaudit.commands.running import check_out
from lmaudit.progress import stdout_console
from lmaudit.settings import integer, one_of

app = typer.Typer(add_completion=False, no_args_is_help=True, rich_help_panel=c.PANEL_DATA,
                  help="The embedded corpus (four packages' docstrings, shipped), synthetic PII, canaries.")


@app.command("build")
def corpus_build(
    config: Optional[Path] = c.config_option(),
    packages: str = typer.Option("numpy,scipy,torch,transformers", help="Comma-separated packages (names or folders)."),
    installed: bool = typer.Option(False, "--installed", help="Read the default packages' installed sources instead "
                                                              "of the corpus shipped with lmaudit (the one the "
                                                              "committed results were built from)."),
    force: bool = typer.Option(False, help="Rebuild a corpus read from installed packages even if cached."),
    source: str = typer.Option("corpus", help="corpus: the docstrings of --packages (what the tiny models pretrain "
                                              "on); pydoc: out-of-domain prose paragraphs of the Python language "
                                              "reference (pydoc_data.topics), member/non-member pools only."),
) -> None:
    """The docstring corpus (shipped with lmaudit for the default packages; read from installed sources otherwise),
    or the out-of-domain one; print its manifest."""
    one_of(CORPUS_SOURCES, listed=True)(source, "source", "--source")
    corpus = (pydoc_corpus() if source == "pydoc"
              else build_corpus(tuple(p for p in packages.split(",") if p), force=force, installed=installed))
    stdout_console.print_json(data=corpus.manifest)


@app.command("export")
def corpus_export(
    config: Optional[Path] = c.config_option(),
    out: Path = typer.Option(..., help="Folder for members.jsonl, nonmembers.jsonl and pretrain.jsonl."),
    chars: Optional[int] = typer.Option(None, "--chars", help="Cut each document to this many characters (at a word "
                                                              "boundary): passages, as the experiments use them."),
    installed: bool = typer.Option(False, "--installed", help="Export the corpus read from the installed packages "
                                                              "instead of the shipped one."),
) -> None:
    """Write the embedded corpus' pools as JSONL (id, text, package, source): the member and non-member pools the
    experiments draw from, and the pretraining pool the tiny models were trained on."""
    integer(1, optional=True)(chars, "chars", "--chars")
    check_out(out, kind="corpus")
    corpus = build_corpus(installed=installed)
    files = {"members.jsonl": "member", "nonmembers.jsonl": "nonmember", "pretrain.jsonl": "pretrain"}
    with output_folder(out, what="corpus") as tmp:
        for name, pool in files.items():
            write_jsonl(pool_textset(corpus, pool, max_chars=chars), tmp / name)
    counts = ", ".join(f"{out / name} ({len(corpus.pool(pool)):,})" for name, pool in files.items())
    stdout_console.print(f"corpus {corpus.fingerprint[:8]}…: {counts}", soft_wrap=True)


@app.command("pii")
def corpus_pii(
    config: Optional[Path] = c.config_option(),
    out: Path = typer.Option(Path("data/pii"), help="Folder for train.jsonl and unseen.jsonl."),
    n_train: int = typer.Option(200),
    n_unseen: int = typer.Option(200),
    seed: int = c.seed_option("Seed of the synthetic names, addresses and phones."),
) -> None:
    """Write synthetic e-mails with names, e-mail addresses and phone numbers (seeded Faker)."""
    check_out(out, kind="corpus")
    train, unseen = pii_corpus(build_corpus(), n_train, n_unseen, seed=seed)
    with output_folder(out, what="corpus") as tmp:  # the two files are written together, as one folder
        write_jsonl(train, tmp / "train.jsonl")
        write_jsonl(unseen, tmp / "unseen.jsonl")
    stdout_console.print(f"{out / 'train.jsonl'}  {out / 'unseen.jsonl'}")


@app.command("canaries")
def corpus_canaries(
    config: Optional[Path] = c.config_option(),
    n: int = typer.Option(1000, "--n", help="Number of canaries, all in canaries.jsonl: each is trained on with "
                                            "probability 1/2 (train_canaries.jsonl, about N/2), the rest never are. "
                                            "decoys.jsonl adds ceil(N/2) decoys: texts of the same kind that are no "
                                            "canary and are never trained on."),
    kind: str = typer.Option("random", help=f"{' | '.join(CANARY_KINDS)}: random token-like strings, sentences of "
                                            "made-up words, or e-mails with synthetic names, addresses and phones."),
    out: Path = typer.Option(..., help="Folder for canaries.jsonl, train_canaries.jsonl, included.json, decoys.jsonl."),
    seed: int = c.seed_option("Seed of the texts and of the inclusion coins."),
) -> None:
    """Canaries for a one-run privacy audit ('lmaudit epsilon RUN_DIR --canaries OUT'), half of them to train on.

    --n 40 writes 40 canaries (about 20 to train on, the other 20 never trained on) and 20 decoys."""
    check_out(out, kind="canaries")
    info = write_canary_folder(out, n, kind, seed=seed)
    k = info["n_included"]
    stdout_console.print(
        f"{n} {kind} canaries: {out / 'canaries.jsonl'} (score all of them); {k} to train on: "
        f"{out / 'train_canaries.jsonl'}; the other {n - k} are never trained on (the private inclusion list, "
        f"{out / 'included.json'}, says which); {info['n_decoys']} decoys, no canary and never trained on: "
        f"{out / 'decoys.jsonl'}", soft_wrap=True)
