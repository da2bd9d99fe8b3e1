"""SaMIA (Kaneko et al., 2024, "Sampling-based Pseudo-Likelihood for Membership Inference Attacks").

A text x is cut into a prefix and its remainder r; the audited model writes ``n`` continuations c_1..c_n of r's
length after the prefix (:mod:`lmaudit.probes.samples`), and

    score(x) = SPL(x) = (1/n) Σ_j ROUGE-1(c_j, r),

the sampling-based pseudo-likelihood: a model that trained on x reproduces more of its words. It reads sampled text
only (access ``generation``), so it runs on a model that gives no log-probability.

ROUGE-1 follows the paper: unigram *recall* against the remainder, Σ_w min(#_c(w), #_r(w)) / |r|, with words split
on whitespace, case and punctuation kept (the authors' code splits on spaces); 0 when either side has no word.
``measure="f1"`` takes the F-measure 2PR/(P+R) instead (P = the same overlap / |c|). ``zlib_weight`` is the paper's
SaMIA*zlib: each sample's ROUGE-1 times the zlib-compressed byte length of the sample's words joined by spaces, as the
authors' code computes it (repetitive samples compress well and weigh less), then the mean.

Where this differs from the authors' setting: they cut the text after a share of its words and sample up to 1024
tokens with top-k 50; here the cut falls after a share of its tokens (the first ⌊prefix × L⌋ of L, at least one
token left), each continuation is exactly as many tokens as the remainder, and the draw is from the full
distribution at ``temperature``. Cost: ``n`` generations of the remainder per text (opt-in for that reason).
"""

from __future__ import annotations

import zlib
from collections import Counter
from typing import Literal

import numpy as np

from lmaudit.attacks.registry import register_attack
from lmaudit.errors import SettingError
from lmaudit.probes.records import SampleStats
from lmaudit.probes.requests import SampleRequest
from lmaudit.settings import integer, non_negative


def rouge_1(candidate: str, reference: str, measure: str = "recall") -> float:
    """ROUGE-1 of ``candidate`` against ``reference``: the clipped unigram overlap over the reference's words
    (``recall``) or the F-measure of that recall and the precision over the candidate's words (``f1``); words are
    split on whitespace; 0 when either has none."""
    cand, ref = candidate.split(), reference.split()
    if not cand or not ref:
        return 0.0
    overlap = sum((Counter(cand) & Counter(ref)).values())
    recall = overlap / len(ref)
    if measure == "recall":
        return recall
    precision = overlap / len(cand)
    return 0.0 if overlap == 0 else 2 * precision * recall / (precision + recall)


def zlib_bytes(text: str) -> int:
    """The zlib-compressed length in bytes of ``text``'s words joined by single spaces (UTF-8)."""
    return len(zlib.compress(" ".join(text.split()).encode("utf-8")))


def _open_fraction(value, name: str, flag: str | None) -> None:
    """A number strictly between 0 and 1 (a prefix that leaves both a prefix and a remainder)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < 1:
        shown = repr(value).replace("{", "{{").replace("}", "}}")
        raise SettingError(name, f"{{name}} must be in (0, 1), got {shown}", flag=flag)


def _probe(params: dict, budget: int) -> SampleRequest:
    """The request of checked parameters: only those that change what is sampled (``measure`` and ``zlib_weight``
    rescore the same samples)."""
    return SampleRequest(n=int(params.get("n", 10)), prefix=float(params.get("prefix", 0.5)),
                         temperature=float(params.get("temperature", 1.0)))


@register_attack("samia", kind="ar", probe=_probe, access="generation",
                 opt_in="it samples n continuations of every text from the model (n generations per text)",
                 checks={"n": integer(1), "prefix": _open_fraction, "temperature": non_negative()})
def samia(stats: SampleStats, *, n: int = 10, prefix: float = 0.5, temperature: float = 1.0,
          measure: Literal["recall", "f1"] = "recall", zlib_weight: bool = False) -> np.ndarray:
    """SaMIA: mean ROUGE-1 of the model's sampled continuations against the text's true remainder.

    Shape (S,); higher = member."""
    out = np.empty(stats.n_samples, dtype=np.float64)
    for i, (truth, drawn) in enumerate(zip(stats.truth.tolist(), stats.samples.tolist())):
        values = [rouge_1(c, truth, measure) * (zlib_bytes(c) if zlib_weight else 1) for c in drawn]
        out[i] = float(np.mean(values))
    return out
