"""That a served model stayed one model through a run: probes spread through it, a re-ask of its own prompts at the
end, and a record of what was checked.

A served model can change under an audit: new weights loaded under the same name, a model swapped and swapped
back, or replicas with other weights behind a router that picks one by a hash of the prompt. Its answers would
then mix models. :class:`IdentityGuard` checks three ways, each against :data:`IDENTITY_TOLERANCE`:

- at the start, the probe text's log-probabilities (:func:`~lmaudit.models.served.check_alignment` took them);
- every :data:`SPREAD_EVERY` scored prompts and at the end, the probe text asked again (never from the cache): a
  model that changed for a while is seen while it is changed;
- at the end, up to :data:`REASK` of the run's own prompts, spread evenly over the order they were scored in, asked
  again cut to their first half (a new prompt, so a router that hashes prompts may send it elsewhere): a causal
  model gives the tokens of the half the log-probabilities it gave them in the whole text. A model that changed and
  changed back, or a router over replicas that differ, answers otherwise.

A model that gives text only (access ``generation``) is identified by its greedy continuation of the probe text,
which is asked again as the log-probabilities would be; its prompts cannot be re-asked by halves (a sampled text
has no per-token value to compare), which the record says.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import numpy as np

from lmaudit.errors import LmauditError
from lmaudit.models.served import PROBE_TEXT, Endpoint, PromptLogprobs, prompt_logprobs

IDENTITY_TOLERANCE = 0.01  # nats: one model's answers to one prompt differ by float rounding (its kernels may batch
# a prompt and its half differently); other weights differ by tenths
SPREAD_EVERY = 32  # scored prompts between two probes
REASK = 16  # of the run's own prompts, asked again by halves at its end
MIN_HALVED = 6  # tokens a prompt needs to be asked by halves (fewer: asked again whole)


def largest_gap(now: list[float], then: list[float]) -> float:
    """The largest difference between two lists of log-probabilities of the same tokens (inf when their lengths
    differ: other tokens)."""
    if len(now) != len(then):
        return float("inf")
    return float(np.max(np.abs(np.subtract(now, then)))) if now else 0.0


@dataclass
class IdentityGuard:
    """The identity checks of one served model through a run (:func:`begin`, :func:`scored` per prompt,
    :func:`finish`); ``identify()`` answers the probe as the start did (log-probabilities, or a greedy text)."""

    endpoint: Endpoint
    tokenizer: object
    bos_text: str
    top_k: int
    access: str  # "top_k": prompt log-probabilities; "generation": text only
    start: object = None  # the probe's answer at the start: its log-probabilities, or its greedy text
    generation: object = None  # the greedy continuation of the probe (a function of the endpoint), for text only
    probes: int = field(default=0, init=False)
    _seen: list = field(default_factory=list, init=False, repr=False)  # (text, answer) in the order scored
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    def begin(self) -> None:
        """A new run: nothing scored yet."""
        with self._lock:
            self._seen, self.probes = [], 0

    def identify(self):
        """The probe text's answer now, never from the cache."""
        if self.access == "generation":
            return self.generation(self.endpoint, self.bos_text)
        return prompt_logprobs(self.endpoint, PROBE_TEXT, bos_text=self.bos_text, top_k=self.top_k,
                               cached=False).logprobs

    def probe(self) -> float:
        """Ask the probe text again; refuse the run when the answer differs from the start's. The gap (nats)."""
        now = self.identify()
        with self._lock:
            self.probes += 1
        if self.access == "generation":
            gap = 0.0 if now == self.start else float("inf")
        else:
            gap = largest_gap(now, self.start)
        if gap > IDENTITY_TOLERANCE:
            raise self._changed("its answer to the probe text differs from the one at the start")
        return gap

    def scored(self, text: str, answer: PromptLogprobs) -> None:
        """Note a prompt the run scored (its answer, cached or new); every :data:`SPREAD_EVERY` of them, probe."""
        with self._lock:
            self._seen.append((text, answer))
            due = len(self._seen) % SPREAD_EVERY == 0
        if due:
            self.probe()

    def _changed(self, what: str) -> LmauditError:
        return LmauditError(f"{self.endpoint.url}: the served model changed during the run ({what}, by more than "
                            f"{IDENTITY_TOLERANCE} nats)", hint="its answers would mix models: run again once the "
                            "server serves one model (a router over replicas must send every prompt to one)")

    def _halved(self, text: str, answer: PromptLogprobs) -> float:
        """Ask ``text`` again cut to its first half; the largest gap on the tokens both answers score alike."""
        enc = self.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        offsets = answer.offsets([a for a, _ in enc["offset_mapping"]])
        n = len(answer.tokens)
        cut = n // 2 if n >= MIN_HALVED else n
        part = text[: offsets[cut]] if cut < n else text
        ids = self.tokenizer(part, add_special_tokens=False)["input_ids"]
        again = prompt_logprobs(self.endpoint, part, bos_text=self.bos_text, top_k=self.top_k, cached=False,
                                pieces=[self.tokenizer.decode([i]) for i in ids])
        # the half's last token may split otherwise at the cut: compare the tokens before it, where both agree
        k = len(again.logprobs) - (1 if cut < n else 0)
        same = [j for j in range(min(k, len(answer.logprobs))) if again.tokens[j + 1] == answer.tokens[j + 1]]
        return largest_gap([again.logprobs[j] for j in same], [answer.logprobs[j] for j in same])

    def finish(self) -> dict:
        """The end-of-run checks (the probe once more, then the re-asks); refuse on a gap; what was checked."""
        self.probe()
        with self._lock:
            seen = list(self._seen)
        reasked, gap = 0, 0.0
        if self.access != "generation" and seen:
            picks = sorted({round(i * (len(seen) - 1) / max(REASK - 1, 1)) for i in range(min(REASK, len(seen)))})
            for i in picks:
                found = self._halved(*seen[i])
                reasked += 1
                if found > IDENTITY_TOLERANCE:
                    raise self._changed(f"asked again, scored prompt {i + 1} of {len(seen)} gets other "
                                        "log-probabilities")
                gap = max(gap, found)
        record = {"prompts_scored": len(seen), "probes": self.probes, "probe_every": SPREAD_EVERY,
                  "reasked_by_halves": reasked, "largest_gap_nats": gap, "tolerance_nats": IDENTITY_TOLERANCE}
        if self.access == "generation":
            record["note"] = "text-only access: the probe's greedy text compared; prompts not re-asked by halves"
        return record
