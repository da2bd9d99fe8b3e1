"""Re-run committed experiments into a scratch folder and compare them with what ``results/`` holds.

``lmaudit reproduce`` (``make reproduce``) takes the experiments of :data:`QUICK` (those that fit under an hour
on two cores from a fresh cache, the tiny models trained first), re-runs each from the configuration its committed
``results.json`` stores (so the comparison is with the settings that made it, whatever the TOML file now says) into
``SCRATCH/NAME/``, and compares, per experiment:

- **the corpus**: the re-run's corpus hash against the committed one (a different corpus is a different
  experiment, and its figures are not expected to agree);
- **the verdicts**: every row of CLAIMS.md that reads the experiment, judged on the committed results and on the
  committed results with the re-run in its place (:func:`lmaudit.claims.table.judge_all`);
- **the headline figures**: the cells of the experiment's first table, ``mean ± std`` over seeds, each re-run mean
  against the committed one, beside the committed seed-to-seed spread (its ``std``). A figure lies within the
  spread when the difference is at most :data:`SPREADS` × that std; a figure of one seed has no spread, and agrees
  when it is the same to one unit of the last digit the table prints (on another machine it may differ by more,
  which the line says). Columns of costs (seconds, minutes) depend on the machine's load and are not compared.

On the machine that made the committed results a re-run is bit-identical; on another, kernels differ by instruction
set, which moves figures by float rounding amplified through training: within the seed spread, with the same
verdicts. :func:`compare_folders` is the comparison alone (two roots of experiment folders).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from lmaudit.claims.table import CLAIMS, judge_all, load_results
from lmaudit.errors import LmauditError
from lmaudit.experiments.config import BaseConfig
from lmaudit.experiments.registry import get_experiment_type
from lmaudit.progress import info

# the committed experiments a re-run checks: under an hour on two cores from a fresh cache (tiny models trained;
# 57 min measured with the demo, on cores shared with other work)
QUICK = ("set-validity", "unlearning-robustness", "usage-proportion", "dlm-dft", "dlm-ablation", "dlm-mask-ratio",
         "extraction-steps")
SPREADS = 2.0  # a re-run's mean within 2 seed standard deviations of the committed one: within the seed spread
_CELL = re.compile(r"^\s*([+-]?\d+(?:\.\d+)?)\s*(?:±\s*(\d+(?:\.\d+)?))?\s*%?\s*$")
_SEEDS = re.compile(r"([+-]?\d+(?:\.\d+)?)\s*\[[^\]]*\]")  # "a [lo, hi]; b [lo, hi]; ...": one value per seed


@dataclass
class Figure:
    """One headline figure: where it is (row and column of the first table), committed and re-run values."""

    where: str
    committed: float
    spread: float | None  # the committed seed std (None: one seed)
    rerun: float
    precision: float = 0.0  # one unit of the last digit printed: a one-seed figure agrees to it

    @property
    def difference(self) -> float:
        return self.rerun - self.committed

    @property
    def within(self) -> bool:
        if self.spread is None:  # one seed: the same to the precision the table prints
            return abs(self.difference) <= self.precision + 1e-9
        return abs(self.difference) <= SPREADS * self.spread + 1e-9


@dataclass
class Comparison:
    """What a re-run of one experiment gave against the committed one."""

    name: str
    corpus: tuple[str | None, str | None]  # (committed, re-run)
    verdicts: list[tuple[str, str, str]] = field(default_factory=list)  # (claim, committed, re-run)
    figures: list[Figure] = field(default_factory=list)

    @property
    def same_corpus(self) -> bool:
        return self.corpus[0] == self.corpus[1]

    @property
    def same_verdicts(self) -> bool:
        return all(a == b for _, a, b in self.verdicts)

    @property
    def agrees(self) -> bool:
        """Same corpus, same verdicts, and every headline figure read within the spread (none read: no)."""
        return self.same_corpus and self.same_verdicts and bool(self.figures) and all(f.within for f in self.figures)

    def as_dict(self) -> dict:
        return {"name": self.name, "corpus": {"committed": self.corpus[0], "rerun": self.corpus[1]},
                "same_corpus": self.same_corpus, "same_verdicts": self.same_verdicts, "agrees": self.agrees,
                "verdicts": [{"claim": c, "committed": a, "rerun": b} for c, a, b in self.verdicts],
                "figures": [{"where": f.where, "committed": f.committed, "spread": f.spread, "rerun": f.rerun,
                             "difference": f.difference, "within": f.within} for f in self.figures]}

    def lines(self) -> list[str]:
        """What the terminal shows: one line per experiment, then each disagreement."""
        inside = sum(f.within for f in self.figures)
        spread = [f for f in self.figures if f.spread]
        worst = max(spread, key=lambda f: abs(f.difference) / f.spread, default=None)
        head = (f"{self.name}: corpus {'same' if self.same_corpus else 'DIFFERENT'} "
                f"({(self.corpus[1] or 'none')[:8]}); verdicts {sum(a == b for _, a, b in self.verdicts)} of "
                f"{len(self.verdicts)} the same; figures {inside} of {len(self.figures)} within the seed spread")
        if worst is not None:
            head += (f" (largest |Δ| / spread: {worst.where} {worst.difference:+.2f} against ± {worst.spread:.2f})")
        out = [head + (": agrees" if self.agrees else ": DIFFERS")]
        out += [f"  verdict of '{c}': {a} → {b}" for c, a, b in self.verdicts if a != b]
        out += [f"  {f.where}: {f.committed:g} → {f.rerun:g} (Δ {f.difference:+.2f}, seed spread "
                + (f"± {f.spread:g})" if f.spread is not None else "none: one seed)") for f in self.figures
                if not f.within]
        return out


LABELS = ("seed",)  # columns that name a row (with the first), not figures


def is_cost(column: str) -> bool:
    """Whether a column holds a cost (seconds, minutes): it depends on the machine's load, and is not compared."""
    words = column.lower().split()
    return bool(words) and (words[-1] in ("s", "min", "seconds") or "time" in words or "cost" in words)


def _cells(record: dict) -> dict[str, tuple[float, float | None, float]]:
    """{row / column: (value, seed std or None, the printed precision)} of the numeric cells of a record's first
    table; a row is named by its first cell and any of :data:`LABELS`; cost columns are left out."""
    tables = record.get("tables") or []
    if not tables:
        return {}
    table = tables[0]
    header = table.get("header", [])
    out = {}
    for row in table.get("rows", []):
        label = " ".join([str(row[0])] + [f"{h} {c}" for h, c in zip(header, row) if h in LABELS])
        for column, cell in zip(header[1:], row[1:]):
            if column in LABELS or is_cost(column):
                continue
            m, seeds = _CELL.match(str(cell)), _SEEDS.findall(str(cell))
            if m:
                out[f"{label} / {column}"] = (float(m.group(1)), float(m.group(2)) if m.group(2) else None,
                                             _unit(m.group(1)))
            elif seeds:  # per-seed values with their intervals: their mean and spread
                values = [float(v) for v in seeds]
                out[f"{label} / {column}"] = (float(np.mean(values)), float(np.std(values, ddof=1))
                                             if len(values) > 1 else None, _unit(seeds[0]))
    return out


def _unit(printed: str) -> float:
    """One unit of the last digit of a printed number."""
    return 10.0 ** -(len(printed.split(".")[1]) if "." in printed else 0)


def _verdict(v) -> str:
    """A verdict as CLAIMS.md words it: a mixed row with its per-seed counts ('mixed: 1 reproduced, 2 ...')."""
    counts = getattr(v, "counts", None)
    return f"{v}: {counts}" if str(v) == "mixed" and counts else str(v)


def compare_records(name: str, committed: dict, rerun: dict, all_committed: dict[str, dict]) -> Comparison:
    """One experiment's re-run (``rerun``) against its committed record, CLAIMS.md's rows judged both ways."""
    comparison = Comparison(name, (committed.get("corpus"), rerun.get("corpus")))
    before, after = judge_all(all_committed), judge_all({**all_committed, name: rerun})
    for claim, (_, f0, r0), (_, f1, r1) in zip(CLAIMS, before, after):
        for group, a, b in ((claim.experiments, f0, f1), (claim.real_experiments, r0, r1)):
            if name in group and a is not None and b is not None:  # a mixed row with its per-seed counts
                comparison.verdicts.append((claim.claim, _verdict(a.verdict), _verdict(b.verdict)))
    new = _cells(rerun)
    for where, (value, spread, precision) in _cells(committed).items():
        if where in new:
            comparison.figures.append(Figure(where, value, spread, new[where][0], precision))
    return comparison


def compare_folders(committed_root: Path, rerun_root: Path, names=None) -> list[Comparison]:
    """Each experiment of ``names`` (default: every one ``rerun_root`` holds) against ``committed_root``."""
    committed, rerun = load_results(Path(committed_root)), load_results(Path(rerun_root))
    names = list(names) if names is not None else sorted(rerun)
    missing = [n for n in names if n not in committed or n not in rerun]
    if missing:
        raise LmauditError(f"no results.json of {', '.join(missing)} in both {committed_root} and {rerun_root}")
    return [compare_records(n, committed[n], rerun[n], committed) for n in names]


def stored_config(record: dict, where: Path) -> BaseConfig:
    """The configuration a committed ``results.json`` was made with, rebuilt as its type's config."""
    stored = record.get("experiment")
    if not isinstance(stored, dict) or "type" not in stored:
        raise LmauditError(f"{where}: no stored experiment configuration", hint="it was not written by lmaudit run")
    spec = get_experiment_type(stored["type"])
    try:
        return spec.config(**stored)
    except TypeError as exc:
        raise LmauditError(f"{where}: its stored configuration no longer fits its type ({exc})",
                           hint=f"re-run it from its file: lmaudit run experiments/{stored.get('name')}.toml"
                           ) from None


def reproduce(names=QUICK, *, results: Path = Path("results"), scratch: Path = Path("runs/reproduce"),
              run) -> list[Comparison]:
    """Re-run ``names`` from their committed configurations into ``scratch`` with ``run(cfg, out_root)``, then
    compare each with ``results`` (:func:`compare_folders`)."""
    committed = load_results(Path(results))
    absent = [n for n in names if n not in committed]
    if absent:
        raise LmauditError(f"no committed results of {', '.join(absent)} in {results}",
                           hint="name experiments whose folders hold a results.json")
    for i, name in enumerate(names, 1):
        info(f"reproduce {i}/{len(names)}: {name}")
        run(stored_config(committed[name], Path(results) / name / "results.json"), Path(scratch))
    return compare_folders(results, scratch, names)


def write_comparison(comparisons: list[Comparison], path: Path) -> None:
    """The comparisons as JSON (``SCRATCH/reproduce.json``)."""
    path.write_text(json.dumps({"agrees": all(c.agrees for c in comparisons), "spreads": SPREADS,
                                "experiments": [c.as_dict() for c in comparisons]}, indent=2) + "\n")
