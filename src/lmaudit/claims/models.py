"""What the models of CLAIMS.md's two regimes are, in its header and its regime texts, every figure read from the
stored results (each experiment's ``preset``, ``vocab_size``, ``base``, ``lora``, its ``packages`` and its corpus
digest) or, where a result names something without storing its size, from lmaudit's own definition of it: a preset's
layers and widths (:data:`lmaudit.models.presets.PRESETS`), a named model's description
(:data:`lmaudit.models.defaults.NAMED`). Nothing here loads a model or needs the real one installed."""

from __future__ import annotations

from collections import Counter

from lmaudit.data.snapshot import embedded_hash, embedded_manifest
from lmaudit.models.defaults import NAMED
from lmaudit.models.presets import PRESETS, Preset


def weights(e: dict) -> str:
    """What a fine-tuning trained, from its stored ``lora``: 'LoRA rank 16', or 'every weight' where 0 or absent."""
    return f"LoRA rank {e['lora']}" if e.get("lora") else "every weight"


def stream(e: dict) -> str:
    """A pretraining-detection experiment's stream, from what it stored: the members' share of it (``member_share``),
    else its size (``pretrain_tokens``)."""
    if e.get("member_share"):
        return f"a stream in which the members' copies are {100 * e['member_share']:g}% of the tokens"
    return f"{e['pretrain_tokens']:,} tokens with the members in the stream"


def model(e: dict, default: str = "the pretrained model") -> str:
    """The model an experiment starts from: its stored ``base``, else its preset and kind, else ``default``."""
    if e.get("base"):
        return f"`{e['base']}`"
    if e.get("preset"):
        return f"the `{e['preset']}` {str(e.get('kind', '')).upper()} model".replace("  ", " ")
    return default


def preset_parameters(p: Preset, vocab: int) -> int:
    """The parameters of a preset's model as :func:`lmaudit.models.presets.build_ar_model` builds it, a Llama of
    ``p.layers`` layers: tied input and output embeddings (``vocab`` × hidden), per layer the four attention
    projections (as many key/value heads as query heads), the three projections of the gated MLP and two RMSNorm
    weights, none with a bias, and a final norm."""
    h = p.hidden
    return vocab * h + p.layers * (4 * h * h + 3 * h * p.intermediate + 2 * h) + h


def millions(n: int) -> str:
    """1,049,216 as '1.05M' (three significant figures)."""
    return f"{n / 1e6:.3g}M"


def _experiments(recs: dict[str, dict], *, real: bool) -> dict[str, dict]:
    """The stored settings of every experiment on a pretrained ``base`` (``real``), or of every other one."""
    return {n: r["experiment"] for n, r in recs.items()
            if isinstance(r.get("experiment"), dict) and bool(r["experiment"].get("base")) == real}


def _preset_text(name: str, vocabs: list[int], *, first: bool = True) -> str:
    """A preset's size from its definition and the stored vocabulary sizes (named on the ``first`` preset only)."""
    p = PRESETS.get(name)
    if p is None:
        return "a preset this lmaudit does not define (its size is unknown here)"
    if not vocabs:
        return f"{p.layers} layers of width {p.hidden} (no vocabulary size is stored, so no parameter count)"
    counts = " or ".join(f"{millions(preset_parameters(p, v))} parameters"
                         + (f" with the corpus' {v:,}-token vocabulary" if first else "") for v in vocabs)
    return f"{p.layers} layers of width {p.hidden}, {counts}"


def _built_here(recs: dict[str, dict], names) -> str:
    """How the records of ``names`` were computed, from their stored ``packages``: ' with torch 2.13.0+cpu (a CPU
    build)'; empty where none stores it."""
    builds = sorted({str(recs[n]["packages"]["torch"]) for n in names
                     if isinstance(recs[n].get("packages"), dict) and recs[n]["packages"].get("torch")})
    if not builds:
        return ""
    cpu = " (a CPU build)" if all(b.endswith("+cpu") for b in builds) else ""
    return f" with torch {', '.join(builds)}{cpu}"


def embedded_corpus_text() -> str:
    """The shipped corpus in words, from its manifest: documents, and the package versions it was read from."""
    m = embedded_manifest()
    return (f"{m['n_documents']:,} docstrings of " + ", ".join(f"{k} {v}" for k, v in m["packages"].items())
            + ", shipped with lmaudit")


def tiny_models(recs: dict[str, dict]) -> str:
    """The tiny regime, in parentheses: the preset most of its experiments use with its size, any other preset an
    experiment or one of its cells uses; then the torch build the records say they were computed with."""
    exps = _experiments(recs, real=False)
    uses = Counter(e["preset"] for e in exps.values() if e.get("preset"))
    if not uses:
        return "(no stored experiment names a built-in preset)"
    main = uses.most_common(1)[0][0]
    vocabs = sorted({e["vocab_size"] for e in exps.values() if e.get("vocab_size")})
    others: dict[str, list[str]] = {}
    for n, e in exps.items():
        if e.get("preset") and e["preset"] != main:
            others.setdefault(e["preset"], []).append(n)
        for label, cell in (e.get("cells") or {}).items():
            if isinstance(cell, dict) and cell.get("preset") not in (None, main):
                others.setdefault(cell["preset"], []).append(f"the '{label}' regime of {n}")
    text = f"the `{main}` preset: {_preset_text(main, vocabs)}"
    for name, where in others.items():
        text += f"; {', '.join(where)} uses `{name}`: {_preset_text(name, vocabs, first=False)}"
    return f"({text}), pretrained and fine-tuned here{_built_here(recs, exps)}"


def real_models(recs: dict[str, dict]) -> str:
    """The real regime: each stored ``base`` with lmaudit's description of it (a named model), pretrained by its
    authors, and whether its experiments share the tiny ones' corpus (their stored digests) and torch build."""
    exps = _experiments(recs, real=True)
    if not exps:
        return "no stored experiment fine-tunes a pretrained model yet"
    names = []
    for base in dict.fromkeys(e["base"] for e in exps.values()):
        what = NAMED[base][2] if base in NAMED else "not a model lmaudit names, so its size is not known here"
        names.append(f"`{base}`, {what}")
    corpora = {recs[n].get("corpus") for n in exps} - {None}
    corpus = ("the same embedded corpus as the tiny models (its digest in every record)"
              if corpora == {embedded_hash()}
              else "the corpus of each record (" + ", ".join(f"`{c[:8]}…`" for c in sorted(corpora)) + ")" if corpora
              else "a corpus whose digest is not stored")
    return (f"{'; '.join(names)}; pretrained by its authors (that pretraining is not measured here), then "
            f"trained further here on {corpus}{_built_here(recs, exps)}")
