"""Teacher-forced success probability of exact extraction along denoising trajectories.

A trajectory partitions a record's mask set M into N steps Δ_1..Δ_N. Its success
probability is p = Π_k Π_{π∈Δ_k} Pr(ẑ_π = z_π | z outside M, z_{Δ_<k}) at
temperature T (DESIGN.md, "Extraction"). For a DLM, step k of every trajectory is
one masked forward: the R trajectories of a record (and of several records, when
they fit) share one batched call per step, and only the rows of Δ_k go through the
output layer. Log-probabilities are summed in float64.

Orders:

- ``random``: a uniformly random permutation of M cut at ⌊i·|M|/N⌋ (i = 0..N). The
  permutations depend on the record and seed but not on N, so the N = 2, 5, 10, ...
  partitions of one trajectory refine each other whenever one N divides another.
- ``low_confidence``: LLaDA's remasking rule under teacher forcing — each step
  unmasks the still-masked positions where the target token is most probable
  (confidence is the probability of the token that success requires). The
  trajectory is then deterministic, so one trajectory is computed.

An AR model is the case M = a contiguous span read left to right: one forward, and
p = exp(Σ log p(z_t | z_<t)) is exact. Tokens after the span are not visible to it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from lmaudit.errors import LmauditError
from lmaudit.models.handle import ModelHandle
from lmaudit.probes.tokenize import model_batches
from lmaudit.utils import stable_seed

ORDERS = ("random", "low_confidence")


@dataclass
class Target:
    """One record to extract: input ids (with ``<bos>``) and the masked positions in them."""

    key: str
    ids: np.ndarray  # (T,) int64
    masked: np.ndarray  # (|M|,) sorted positions in ``ids``


@dataclass
class TrajectoryResult:
    """Per-trajectory log success probabilities (float64) and the forward calls that served them."""

    logp: np.ndarray  # (R,)
    forwards: int

    @property
    def p_hat(self) -> float:
        return float(np.mean(np.exp(self.logp)))

    @property
    def log_p_hat(self) -> float:
        """log of the mean of exp(logp), computed stably."""
        return self.log_p_hat_of(len(self.logp))

    def log_p_hat_of(self, r: int) -> float:
        """:attr:`log_p_hat` of the first ``r`` trajectories (at least one): the estimate's path as R grows."""
        logp = self.logp[: max(1, r)]
        m = float(np.max(logp))
        if not np.isfinite(m):
            return m
        return m + float(np.log(np.mean(np.exp(logp - m))))

    @property
    def std_error(self) -> float:
        """Standard error of ``p_hat`` over the trajectories (0 for a single, deterministic trajectory)."""
        if len(self.logp) < 2:
            return 0.0
        return float(np.std(np.exp(self.logp), ddof=1) / np.sqrt(len(self.logp)))


def step_bounds(n_masked: int, steps: int) -> np.ndarray:
    """(N+1,) cut points ⌊i·|M|/N⌋ of an order into N steps; every step gets ≥ 1 token."""
    if not 1 <= steps <= n_masked:
        raise LmauditError(f"{steps} steps for {n_masked} masked tokens", hint="steps must be between 1 and |M|")
    return (np.arange(steps + 1) * n_masked) // steps


def random_orders(target: Target, trajectories: int, seed: int) -> np.ndarray:
    """(R, |M|) unmasking orders: random permutations of the mask, stable in (record, seed)."""
    rng = np.random.default_rng(stable_seed("trajectory", target.key, seed))
    return np.stack([rng.permutation(target.masked) for _ in range(trajectories)])


def _target_logp(adapter, ids, attn, rows, cols, targets, temperature: float, *,
                 row_chunk: int = 1024) -> torch.Tensor:
    """log Pr(``targets``) at ``temperature`` at the given (row, column) positions of input ``ids``. → (n,) float32."""
    src = adapter.row_for(cols)  # the logit row that predicts each column (AR: the previous position)
    picked, head = adapter.output_rows(ids, attn, lambda out: out[rows, src])  # (n, d) with the head, or (n, V)
    out = torch.empty(len(targets), dtype=torch.float32, device=ids.device)
    for s in range(0, len(targets), row_chunk):
        x = picked[s : s + row_chunk]
        logits = torch.nn.functional.linear(x, head.weight, head.bias) if head is not None else x  # (n, V)
        logp = torch.log_softmax(logits.float() / temperature, dim=-1)
        out[s : s + row_chunk] = logp.gather(1, targets[s : s + row_chunk, None]).squeeze(1)
    if not torch.isfinite(out).all():
        raise LmauditError("the model produced NaN or inf logits during extraction", hint="check the weights and dtype")
    return out


def _top_per_row(rows: np.ndarray, scores: np.ndarray, take: np.ndarray) -> np.ndarray:
    """Indices of the ``take[row]`` highest-scoring entries of each row (entries grouped by ``rows``)."""
    order = np.lexsort((-scores, rows))
    r = rows[order]
    first = np.searchsorted(r, r, side="left")
    rank = np.arange(len(r)) - first
    return order[rank < take[r]]


@torch.inference_mode()
def dlm_trajectories(handle: ModelHandle, targets: list[Target], *, steps: list[int], order: str = "random",
                     trajectories: int = 512, temperature: float = 1.0, seed: int = 0,
                     max_tokens: int | None = None) -> list[TrajectoryResult]:
    """Teacher-forced trajectory log-probabilities for a group of records under a DLM.

    Parameters
    ----------
    handle : the DLM's handle (its adapter runs the forwards).
    targets : records with their masked positions.
    steps : N per record (1 ≤ N ≤ |M|).
    order : ``random`` or ``low_confidence``.
    trajectories : R, the number of random orders per record (1 is used where the
        trajectory is deterministic: N = 1, or ``low_confidence``).
    max_tokens : rows × length per forward call; larger groups are split into calls (None: the model's
        token budget, :meth:`~lmaudit.models.adapters.DLMAdapter.batch_tokens`).

    Returns
    -------
    One :class:`TrajectoryResult` per record; ``forwards`` counts the forward passes its trajectories went
    through, one per step (a step split over several calls to fit ``max_tokens`` counts once).
    """
    if order not in ORDERS:
        raise LmauditError(f"unknown order '{order}'", hint=f"use one of {', '.join(ORDERS)}")
    if temperature <= 0:
        raise LmauditError("extraction probabilities need a temperature > 0")
    adapter = handle.adapter
    device = adapter.device
    n_rows, orders, bounds = [], [], []
    for t, n in zip(targets, steps):
        bounds.append(step_bounds(len(t.masked), n))
        deterministic = n == 1 or order == "low_confidence"
        orders.append(np.sort(t.masked)[None] if deterministic else random_orders(t, trajectories, seed))
        n_rows.append(len(orders[-1]))
    rec = np.repeat(np.arange(len(targets)), n_rows)  # record of each row
    width = max(o.shape[1] for o in orders)
    row_order = np.concatenate([np.pad(o, ((0, 0), (0, width - o.shape[1])), constant_values=-1) for o in orders])
    ids, attn, _ = adapter.pad([targets[i].ids for i in rec])
    T = ids.shape[1]
    masked = np.zeros((len(rec), T), dtype=bool)
    for r, i in enumerate(rec):
        masked[r, targets[i].masked] = True
    total = np.zeros(len(rec), dtype=np.float64)
    forwards = np.zeros(len(targets), dtype=np.int64)
    n_steps = np.array(steps)[rec]
    ids_t, attn_t = torch.from_numpy(ids).to(device), torch.from_numpy(attn).to(device)
    chunk = max(1, (max_tokens or adapter.batch_tokens()) // T)
    for k in range(int(max(steps))):
        active = np.flatnonzero(n_steps > k)
        forwards[np.unique(rec[active])] += 1
        lo = np.array([bounds[i][min(k, len(bounds[i]) - 1)] for i in range(len(targets))])[rec]
        hi = np.array([bounds[i][min(k + 1, len(bounds[i]) - 1)] for i in range(len(targets))])[rec]
        for part in np.array_split(active, int(np.ceil(len(active) / chunk))):
            if order == "random":  # positions of step k in each row's own order
                j = np.arange(width)[None, :]
                take = (j >= lo[part, None]) & (j < hi[part, None])  # (rows, width), row-major
                rows, cols = np.nonzero(take)[0], row_order[part][take]
            else:  # every still-masked position is a candidate; the most confident are unmasked
                rows, cols = np.nonzero(masked[part])
            sub = torch.from_numpy(part).to(device)
            noisy = adapter.insert_masks(ids_t[sub], torch.from_numpy(masked[part]).to(device))
            rows_t, cols_t = torch.from_numpy(rows).to(device), torch.from_numpy(cols).to(device)
            logp = _target_logp(adapter, noisy, attn_t[sub], rows_t, cols_t, ids_t[sub][rows_t, cols_t],
                                temperature).double().cpu().numpy()
            if order == "low_confidence":
                keep = _top_per_row(rows, logp, (hi - lo)[part])
                rows, cols, logp = rows[keep], cols[keep], logp[keep]
            np.add.at(total, part[rows], logp)
            masked[part[rows], cols] = False
    return [TrajectoryResult(total[rec == i], int(forwards[i])) for i in range(len(targets))]


@torch.inference_mode()
def ar_suffix_logp(handle: ModelHandle, targets: list[Target], *, temperature: float = 1.0,
                   batch_size: int | None = None) -> list[TrajectoryResult]:
    """Exact log success probability of a contiguous span read left to right by the causal LM of ``handle``.

    The input is cut right after the span, so later tokens are never seen. One
    forward per batch of records.
    """
    if temperature <= 0:
        raise LmauditError("extraction probabilities need a temperature > 0")
    adapter = handle.adapter
    device = adapter.device
    seqs = [t.ids[: t.masked[-1] + 1] for t in targets]
    out: list[TrajectoryResult | None] = [None] * len(targets)
    for index in model_batches(np.array([len(s) for s in seqs]), adapter, batch_size):
        ids, attn, _ = adapter.pad([seqs[i] for i in index])
        rows = np.repeat(np.arange(len(index)), [len(targets[i].masked) for i in index])
        cols = np.concatenate([targets[i].masked for i in index])
        ids_t = torch.from_numpy(ids).to(device)
        rows_t, cols_t = torch.from_numpy(rows).to(device), torch.from_numpy(cols).to(device)
        logp = _target_logp(adapter, ids_t, torch.from_numpy(attn).to(device), rows_t, cols_t,
                            ids_t[rows_t, cols_t], temperature).double().cpu().numpy()
        sums = np.bincount(rows, weights=logp, minlength=len(index))
        for row, i in enumerate(index):
            out[i] = TrajectoryResult(np.array([sums[row]]), 1)
    return out  # type: ignore[return-value]
