"""ReCaLL (Xie et al., 2024, "ReCaLL: Membership Inference via Relative Conditional Log-Likelihoods").

score(x) = LL(x | P) / LL(x), with LL the mean token log-likelihood of x (negative) and P a prefix of texts known
not to be members ("shots"). Conditioning on non-member text lowers a member's log-likelihood more than a
non-member's, so the ratio of two negative numbers is larger for members: higher = member.

The shots come from a file (``--param recall.prefix_file=FILE``, its first ``shots`` texts), from Python
(``params={"recall": {"prefix_texts": [...]}}``), or by default from the run's own non-members: ``shots`` of them,
drawn with the run's seed, are held out of every attack's scoring (the run says how many). ReCaLL is therefore
opt-in: it runs when named in the attacks or given a parameter. The prefix keeps the last shots that fit in the
context beside the longest text (the earlier ones are dropped, and the run says how many were kept); when not
even the last one fits, its end is cut to the room the longest text leaves (at least 16 tokens; the run says how
many). A prefix text that is also scored is said (a text read after itself looks like a member whatever it is).

Cost: the plain pass the other AR attacks share, and a second pass over each text after the prefix, whose keys and
values are computed once per shard and reused by every batch. Each of the text's tokens still attends to every
prefix token, which is arithmetic the conditional likelihood needs: on SmolLM2-135M (60 real passages, 12,511
tokens) the second pass cost 1.09–1.17 plain passes after a 314-token prefix and 1.57–1.98 after a 1,720-token one,
whose arithmetic floor is 1.60 (``python benchmarks/bench_recall.py``); on a model with wider layers the prefix
weighs less (0.07 of a 7B model's per-token arithmetic at 1,720 tokens, 0.44 of SmolLM2-135M's).
"""

from __future__ import annotations

import numpy as np

from lmaudit.attacks.registry import get_attack, register_attack
from lmaudit.data.loaders import TextSet, load_texts
from lmaudit.data.overlap import normal_form
from lmaudit.errors import DataError, warn
from lmaudit.probes.records import PrefixedStats
from lmaudit.probes.requests import PrefixRequest
from lmaudit.probes.segments import segment_mean
from lmaudit.settings import integer

DEFAULT_SHOTS = 5


def shot_texts(params: dict) -> tuple[str, ...]:
    """The prefix texts the parameters name: ``prefix_texts``, else the first ``shots`` texts of ``prefix_file``."""
    texts = [t for t in params.get("prefix_texts") or () if isinstance(t, str) and t.strip()]
    if not texts and params.get("prefix_file"):
        found = load_texts(params["prefix_file"])
        texts = [t for t in found.texts if t.strip()][: params.get("shots", DEFAULT_SHOTS)]
        if not texts:
            raise DataError(f"{params['prefix_file']}: no usable text for a ReCaLL prefix (every text is empty)")
    if not texts:
        raise DataError("recall needs prefix texts: give --param recall.prefix_file=FILE (texts known not to be "
                        "members) or run it on a set with non-members to hold out")
    return tuple(texts)


def _probe(params: dict, budget: int) -> PrefixRequest:
    return PrefixRequest(shots=shot_texts(params))


def warn_scored_shots(shots: tuple[str, ...], textset: TextSet) -> int:
    """Say how many of the prefix ``shots`` are also texts of ``textset`` (compared after normalisation,
    :func:`~lmaudit.data.overlap.normal_form`), and return that number: a text read after itself is easy to predict,
    so its score reads "member" whatever it is."""
    scored = set()
    for r in textset.records:
        scored.update((normal_form(r.target), normal_form(r.context + r.target)))
    shared = sum(normal_form(shot) in scored for shot in shots)
    if shared:
        warn(f"recall: {shared} of the {len(shots)} prefix texts are also scored texts (compared after "
                      "Unicode and whitespace normalisation): a text read after itself scores as a member whatever "
                      "it is; give prefix texts that are not scored")
    return shared


def hold_out_prefix(params: dict, nonmembers: TextSet, seed: int) -> tuple[TextSet, dict | None]:
    """(non-members left to score, what was held out) when ReCaLL has no prefix of its own: ``shots`` non-members
    drawn with ``seed`` become its prefix (``params["prefix_texts"]``, set here) and leave the scored set. The
    parameters are checked first (``shots`` a count ≥ 1)."""
    get_attack("recall", "ar").check(params)
    if params.get("prefix_texts") or params.get("prefix_file"):
        return nonmembers, None
    k = int(params.get("shots", DEFAULT_SHOTS))
    if len(nonmembers) < k + 2:
        raise DataError(f"recall holds out {k} non-members for its prefix; {nonmembers.source} has {len(nonmembers)}",
                        hint="give --param recall.prefix_file=FILE, or fewer --param recall.shots")
    pick = set(np.random.default_rng(seed).permutation(len(nonmembers))[:k].tolist())
    held = [r for i, r in enumerate(nonmembers.records) if i in pick]
    params["prefix_texts"] = [r.context + r.target for r in held]
    kept = TextSet([r for i, r in enumerate(nonmembers.records) if i not in pick], source=nonmembers.source)
    return kept, {"attack": "recall", "n": k, "ids": [r.id for r in held]}


@register_attack("recall", kind="ar", probe=_probe,
                 opt_in="it holds out non-members for its prefix unless given --param recall.prefix_file",
                 checks={"shots": integer(1)})
def recall(stats: PrefixedStats, *, prefix_file: str = "", prefix_texts: list | None = None,
           shots: int = DEFAULT_SHOTS) -> np.ndarray:
    """ReCaLL: LL(x | non-member prefix) / LL(x), mean token log-likelihoods.

    Shape (S,); higher = member."""
    plain = segment_mean(stats.plain.logp, stats.plain.offsets)
    return same_tokens_mean(stats) / np.minimum(plain, -1e-12)


def same_tokens_mean(stats: PrefixedStats) -> np.ndarray:
    """The prefixed pass's mean log-probability over the tokens the plain pass scores: each text's last L of them,
    L the plain pass's count (a tokenizer without a start token leaves the first token unscored in the plain pass
    only). Fewer prefixed than plain tokens would mean a truncated prefixed text: refused."""
    lp, lq = np.diff(stats.plain.offsets), np.diff(stats.prefixed.offsets)
    if np.any(lq < lp):
        i = int(np.argmax(lq < lp))
        raise DataError(f"recall: text {i + 1} has {lq[i]} scored tokens after the prefix, {lp[i]} without it: the "
                        "prefixed text lost tokens", hint="give shorter prefix texts")
    ends = stats.prefixed.offsets[1:]
    keep = np.zeros(len(stats.prefixed.logp), dtype=bool)
    keep[np.repeat(ends, lp) - np.concatenate([np.arange(n, 0, -1) for n in lp])] = True
    return segment_mean(stats.prefixed.logp[keep], stats.plain.offsets)
