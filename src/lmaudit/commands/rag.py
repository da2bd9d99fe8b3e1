"""``lmaudit rag-mia``: is a document in a retrieval-augmented system's store? Membership read from its answers."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from lmaudit import api
from lmaudit.commands import common as c
from lmaudit.commands.running import check_out
from lmaudit.errors import LmauditError
from lmaudit.progress import stdout_console

app = typer.Typer(add_completion=False)


def _cell(value, digits: str = ".3f") -> str:
    if value is None or (isinstance(value, float) and value != value):  # None, or NaN in a frame
        return "n/a"
    return format(value, digits) if isinstance(value, float) else str(value)


@app.command("rag-mia", rich_help_panel=c.PANEL_AUDIT)
def rag_mia_cmd(
    config: Optional[Path] = c.config_option(),
    target: Optional[str] = typer.Option(None, help="URL of the RAG service's OpenAI-compatible chat endpoint "
                                                    "(http://127.0.0.1:8080/v1): its retrieval stays hidden."),
    generator: Optional[str] = typer.Option(None, help="Instead of --target: the generator of a local pipeline (a "
                                                       "model folder, .gguf file or model name), with --store."),
    store: Optional[Path] = typer.Option(None, help="The local pipeline's documents (members among them, "
                                                    "non-members not), retrieved by BM25."),
    members: Optional[Path] = typer.Option(None, help="Documents known to be in the store."),
    nonmembers: Optional[Path] = typer.Option(None, help="Documents known not to be in the store."),
    attacks: Optional[str] = typer.Option(None, help="Comma-separated attacks: s2mia, mba, interrogation "
                                                     "(default: s2mia,mba)."),
    top_k: int = typer.Option(3, "--top-k", help="Documents the local pipeline retrieves per question."),
    max_new_tokens: int = typer.Option(64, "--max-new-tokens", help="Tokens generated per answer (greedy)."),
    proxy: Optional[str] = typer.Option(None, help="Local model whose least probable words MBA masks."),
    mask_selection: str = typer.Option("proxy", "--mask-selection",
                                       help="How MBA chooses its masks: proxy (with --proxy) or spread (no model)."),
    n_masks: int = typer.Option(5, "--n-masks", help="Words MBA masks per document."),
    helper: Optional[str] = typer.Option(None, help="Local model that writes the interrogation attack's questions "
                                                    "and their answers (default: the proxy)."),
    question_source: str = typer.Option("helper", "--question-source",
                                        help="Where the interrogation's questions come from: helper (a model "
                                             "writes them, as published) or statements (from the document)."),
    n_questions: int = typer.Option(10, "--n-questions", help="Questions the interrogation asks per document."),
    batch_size: int = typer.Option(8, "--batch-size", help="Prompts a local model answers at once."),
    no_control: bool = typer.Option(False, "--no-control",
                                    help="Do not also question the local generator without retrieval."),
    no_blind: bool = typer.Option(False, "--no-blind",
                                  help="Leave out the blind baselines (classifiers of the documents alone)."),
    served_model: Optional[str] = typer.Option(None, "--served-model", help="The model's name where the endpoint "
                                                                            "serves several."),
    text_field: str = c.text_field_option(),
    bootstrap: int = typer.Option(1000, "--bootstrap", help="Bootstrap resamples of the intervals."),
    seed: int = c.seed_option("Seed of the bootstrap resamples."),
    out: Path = typer.Option(Path("runs/rag-mia"), help="Output folder."),
) -> None:
    """Membership inference against a RAG system through its answers alone: per attack, AUC and TPR at low FPR with
    intervals, the queries per document, and (for a local pipeline) the same attacks on the generator without
    retrieval."""
    if (target is None) == (generator is None):
        raise LmauditError("give --target URL (a served system) or --generator MODEL with --store (a local one)",
                           hint="one of the two")
    if generator is not None and store is None:
        raise LmauditError("--generator needs --store (the documents the local pipeline retrieves from)")
    check_out(out, job="rag_mia", inputs={"--members": members, "--nonmembers": nonmembers, "--store": store})
    cfg = api.RagConfig(attacks=c.split_names(attacks) or ["s2mia", "mba"], top_k=top_k,
                        max_new_tokens=max_new_tokens, n_masks=n_masks, mask_selection=mask_selection,
                        n_questions=n_questions, question_source=question_source, batch_size=batch_size,
                        control=not no_control, blind=not no_blind, n_bootstrap=bootstrap, seed=seed)
    found = api.rag_mia(target or generator, members, nonmembers, store=store, config=cfg, proxy=proxy,
                        helper=helper, text_field=text_field, served_model=served_model)
    frame = found.attack_frame()
    header = ["attack", "AUC", "95% CI", "TPR@1%FPR", "TPR@10%FPR", "queries/doc", "AUC without retrieval",
              "Δ vs blind"]
    rows = [[r.attack, _cell(r.auc), f"[{_cell(r.auc_low)}, {_cell(r.auc_high)}]", _cell(r["tpr@1%fpr"]),
             _cell(r["tpr@10%fpr"]), _cell(r.queries_per_document), _cell(r.control_auc),
             _cell(r.vs_blind) + (" beyond" if r.beyond_blind else "")]
            for _, r in frame.iterrows()]
    c.print_table(c.rich_table(found.headline(), header, rows))
    written = found.write(out, report=True)
    stdout_console.print(f"results: {written}")
    stdout_console.print(f"report: {Path(written).parent / 'report.html'}")
