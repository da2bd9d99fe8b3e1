"""Per-text gradient norms of a batch of texts from one forward and one backward pass: the batched GradNorm path.

The batch runs as the AR probe runs it (right-padded; the base model's hidden states; the output layer applied to
the scored rows only). No parameter is differentiated: the backward pass gives the gradients of the layers' outputs,
and each text's gradient of a weight is formed from that text's own rows, a piece of at most
:data:`~lmaudit.probes.gradient_sums.PIECE` values at a time, and reduced at once (:class:`Sums`); no text's whole
gradient, and no sum over the batch, is ever held.
A text's loss depends on its own rows only (a decoder mixes positions within a text, never texts), so these are
exactly the gradients of each text's loss:

- ``nn.Linear`` (LoRA's matrices too): text b's weight gradient is ``A_bᵀ G_b`` (its inputs and output gradients,
  padding rows left out), its bias gradient the sum of ``G_b``'s rows;
- a normalisation layer (a leaf module named ``…RMSNorm`` or ``…LayerNorm``): its forward is run again on text b's
  rows and differentiated with ``G_b`` (a few thousand weights: the second run costs nothing);
- the input embedding: text b's output gradients added into the rows of its token ids (none for the padding index,
  as ``nn.Embedding`` does);
- the output layer, applied here per text: ``P = (softmax(logits) − onehot) / n`` in float32 (float64 for a float64
  model), the hidden rows' gradient ``P W``, the weight's gradient ``Pᵀ H`` a block of vocabulary rows at a time.
  When that weight is the input embedding's (tied), the rows of the text's own tokens are set aside and reduced
  once the embedding's part is added to them: the norms are those of the shared tensor's one gradient. A text
  whose (n, V) probabilities exceed :data:`HEAD_LIMIT` values has its logits computed again per block instead.

What no rule covers raises :class:`Unsupported` (the caller then takes the texts one at a time): a selected
parameter of another kind of module, shared other than by a tied output layer, used outside its own module's call
(a torch-function mode watches every forward), a covered module called twice in a forward, an input that is not
(batch, tokens, features), or one changed in place before its gradient was taken.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import torch
from torch.overrides import TorchFunctionMode

from lmaudit.models.adapters import fused_head
from lmaudit.probes import gradient_sums
from lmaudit.probes.gradient_sums import Sums, combine
from lmaudit.probes.stats import CACHE_ELEMENTS

HEAD_LIMIT = 1 << 26  # (rows, vocabulary) values of one text's output probabilities kept at once (256 MiB)


class Unsupported(Exception):
    """The batched path does not cover this model and parameter subset (the message says why)."""


def _is_norm(m) -> bool:
    return type(m).__name__.endswith(("RMSNorm", "LayerNorm")) and not any(True for _ in m.children())


def _plain(m, cls) -> bool:
    return isinstance(m, cls) and type(m).forward is cls.forward


def _embedding_rule(m, row: int) -> int:
    if not _plain(m, torch.nn.Embedding) or m.max_norm is not None or m.scale_grad_by_freq or m.sparse:
        raise Unsupported(f"the input embedding ({type(m).__name__}) is not a plain nn.Embedding")
    return row


class Plan:
    """Which rule gives each selected parameter's per-text gradient, for ``model`` and the parameters ``chosen``
    (in the order their norms are averaged). Raises :class:`Unsupported` for what no rule covers."""

    def __init__(self, model, chosen: list[torch.nn.Parameter]):
        fused = fused_head(model)
        if fused is None:
            raise Unsupported(f"the logits of {type(model).__name__} are not a plain output layer")
        self.base, self.head = fused
        self.row = {id(p): i for i, p in enumerate(chosen)}
        owners = defaultdict(list)
        for m in model.modules():
            for name, p in m.named_parameters(recurse=False):
                if id(p) in self.row and (m, name) not in owners[id(p)]:
                    owners[id(p)].append((m, name))
        inside = {id(m) for m in self.base.modules()}
        embedding = model.get_input_embeddings()
        self.modules: dict[torch.nn.Module, list[tuple[str, int]]] = {}  # covered module → (parameter, row)
        self.embedding_row = None
        self.head_rows = {}  # "weight"/"bias" → row
        for p in chosen:
            where = owners[id(p)]
            if self.head in (m for m, _ in where):
                others = [m for m, _ in where if m is not self.head]
                if others and (p is not self.head.weight or others != [embedding]):
                    raise Unsupported("a parameter of the output layer is shared with another module")
                self.head_rows["weight" if p is self.head.weight else "bias"] = self.row[id(p)]
                if others:  # tied: the embedding's part joins the output layer's
                    self.embedding_row = _embedding_rule(embedding, self.row[id(p)])
                continue
            if len(where) != 1 or id(where[0][0]) not in inside:
                raise Unsupported(f"a selected parameter of shape {tuple(p.shape)} is owned by "
                                  f"{len(where)} module(s), or by none of the base model")
            m, name = where[0]
            if m is embedding:
                self.embedding_row = _embedding_rule(m, self.row[id(p)])
            elif not (_plain(m, torch.nn.Linear) or _is_norm(m)):
                raise Unsupported(f"no per-text rule for the parameters of {type(m).__name__}")
            self.modules.setdefault(m, []).append((name, self.row[id(p)]))
        self.embedding = embedding
        self.entry = self._entry()

    def _entry(self):
        """The module whose input (a block) or output (the embedding) the backward pass starts from: the first block
        holding a selected parameter, unless a selected one lies outside the blocks."""
        lists = [m for m in self.base.modules() if isinstance(m, torch.nn.ModuleList) and len(m)]
        blocks = max(lists, key=len) if lists else []
        first = None
        for i, block in enumerate(blocks):
            inner = {id(x) for x in block.modules()}
            if any(id(m) in inner for m in self.modules):
                first = i
                break
        held = {id(m) for b in blocks for m in b.modules()}
        if self.embedding_row is not None or first is None or any(id(m) not in held for m in self.modules):
            return None  # the embedding's output
        return blocks[first]


class _Checked(TorchFunctionMode):
    """A forward in which a selected parameter reaches an operation only inside its own covered module's call."""

    def __init__(self, owner: dict[int, torch.nn.Module], stack: list):
        super().__init__()
        self.owner, self.stack = owner, stack

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if isinstance(out, torch.Tensor):
            for a in _tensors(list(args) + list(kwargs.values())):
                m = self.owner.get(id(a))
                if m is not None and not (self.stack and self.stack[-1] is m):
                    raise Unsupported(f"a parameter of {type(m).__name__} is used outside its own call")
        return out


def _tensors(items):
    for a in items:
        if isinstance(a, torch.Tensor):
            yield a
        elif isinstance(a, (list, tuple)):
            yield from _tensors(a)


def batch_norms(plan: Plan, adapter, ids_t: torch.Tensor, attn_t: torch.Tensor, scored: torch.Tensor, *,
                head_limit: int | None = None) -> np.ndarray:
    """(B, 4) the GRADIENT_NORMS of each padded text's mean loss over its ``scored`` positions ((B, T) bools; row t
    predicts token t + 1): one forward, the output layer per text, one backward."""
    B, T = ids_t.shape
    head_limit = head_limit or HEAD_LIMIT
    lengths = attn_t.sum(1).tolist()
    sums = Sums(len(plan.row), B, ids_t.device)
    stack, calls, saved, handles, root = [], defaultdict(int), {}, [], []
    state = {"recomputing": False}

    def pre(m, args):
        if state["recomputing"]:
            return
        calls[m] += 1
        if calls[m] > 1:  # its contributions would have to be summed before the norms
            raise Unsupported(f"{type(m).__name__} is called twice in a forward")
        stack.append(m)
        if m is not plan.embedding:
            if len(args) != 1 or not isinstance(args[0], torch.Tensor) or args[0].shape[:2] != (B, T):
                raise Unsupported(f"{type(m).__name__} takes other than one (batch, tokens, features) input")
            saved[m] = (args[0], args[0]._version)

    def post(m, args, out):
        if state["recomputing"]:
            return None
        stack.pop()
        if m is plan.embedding and plan.entry is None:
            return None  # the entry hook below makes its output the root
        if not (isinstance(out, torch.Tensor) and out.requires_grad):
            raise Unsupported(f"the output of {type(m).__name__} does not lead back to the entry of the backward")
        out.register_hook(lambda g, m=m: _module_grads(m, g))
        return None

    def _module_grads(m, g):
        x, version = saved.pop(m)
        if x._version != version:
            raise Unsupported(f"the input of {type(m).__name__} was modified in place after its call")
        with torch.no_grad():
            (_linear if _plain(m, torch.nn.Linear) else _norm)(m, x, g)

    def _linear(m, x, g):
        for b, n in enumerate(lengths):
            a, gb = x[b, :n], g[b, :n]
            for name, row in plan.modules[m]:
                if name == "bias":
                    sums.add(row, b, gb.sum(0), owned=True)
                    continue
                step = max(1, gradient_sums.PIECE // a.shape[1])  # output features per piece
                for c in range(0, gb.shape[1], step):
                    part = gb[:, c : c + step]
                    piece = sums.buffer("piece", (a.shape[1], part.shape[1]), g.dtype, g.device)
                    sums.add(row, b, torch.mm(a.T, part, out=piece), owned=True)

    def _norm(m, x, g):
        names = [name for name, _ in plan.modules[m]]
        state["recomputing"] = True
        try:
            for b, n in enumerate(lengths):
                with torch.enable_grad():
                    leaves = {k: getattr(m, k).detach().requires_grad_() for k in names}
                    out = torch.func.functional_call(m, leaves, (x[b : b + 1, :n].detach(),), strict=False)
                    grads = torch.autograd.grad(out, list(leaves.values()), g[b : b + 1, :n])
                for (_, row), gr in zip(plan.modules[m], grads):
                    sums.add(row, b, gr, owned=True)
        finally:
            state["recomputing"] = False

    def entry_out(m, args, out):
        root.append(out.detach().requires_grad_())
        return root[-1]

    def entry_in(m, args, kwargs):  # the block's hidden states: its first argument, or the keyword hidden_states
        first = bool(args) and isinstance(args[0], torch.Tensor)
        if not (first or isinstance(kwargs.get("hidden_states"), torch.Tensor)):
            raise Unsupported(f"{type(m).__name__} takes its hidden states neither first nor as 'hidden_states'")
        root.append((args[0] if first else kwargs["hidden_states"]).detach().requires_grad_())
        return ((root[-1], *args[1:]), kwargs) if first else (args, {**kwargs, "hidden_states": root[-1]})

    covered = list(plan.modules)
    owner = {id(getattr(m, name)): m for m in plan.modules for name, _ in plan.modules[m]}
    owner.update({id(getattr(plan.head, k)): plan.head for k in plan.head_rows})  # applied here, never in the forward
    if plan.embedding_row is not None:
        owner[id(plan.embedding.weight)] = plan.embedding
        covered += [] if plan.embedding in plan.modules else [plan.embedding]
    try:
        for m in covered:
            handles += [m.register_forward_pre_hook(pre), m.register_forward_hook(post)]
        handles.append(plan.embedding.register_forward_hook(entry_out) if plan.entry is None
                       else plan.entry.register_forward_pre_hook(entry_in, with_kwargs=True))
        with torch.enable_grad(), _Checked(owner, stack):
            hidden = adapter.hidden(plan.base, ids_t, attn_t)
        sel = scored[:, 1:]
        rows = hidden[:, :-1][sel]  # (n, d), text-major
        targets = ids_t[:, 1:][sel]
        bounds = np.concatenate([[0], np.cumsum(sel.sum(1).tolist())])
        tokens = [_own_tokens(ids_t[b, :n], plan.embedding) for b, n in enumerate(lengths)]
        set_aside = []
        with torch.no_grad():
            d_rows = torch.empty_like(rows)
            for b in range(B):
                s, e = int(bounds[b]), int(bounds[b + 1])
                d_rows[s:e], kept = _head(plan, sums, b, rows[s:e].detach(), targets[s:e], tokens[b], head_limit)
                set_aside.append(kept)
        if plan.modules or plan.embedding_row is not None:
            if len(root) != 1:
                raise Unsupported("the entry of the backward pass was not called once")
            (d_root,) = torch.autograd.grad(rows, root, d_rows)
            if saved:
                raise Unsupported("a covered module's output gradient was never computed")
            if plan.embedding_row is not None:
                with torch.no_grad():
                    for b, n in enumerate(lengths):
                        uniq, inverse, keep = tokens[b]
                        kept = set_aside[b]
                        kept = d_root.new_zeros(len(uniq), d_root.shape[-1]) if kept is None else kept
                        kept.index_add_(0, inverse, d_root[b, :n][keep].to(kept.dtype))
                        sums.add(plan.embedding_row, b, kept, owned=True)
    finally:
        for h in handles:
            h.remove()
    return combine(sums.totals())


def wide(x: torch.Tensor) -> torch.Tensor:
    """``x`` in float32, or as it is when wider (logits are normalised in at least float32)."""
    return x.to(torch.promote_types(x.dtype, torch.float32))


def _own_tokens(ids: torch.Tensor, embedding):
    """(sorted distinct ids, each position's index among them, positions kept): the rows of the embedding's
    gradient a text touches; the padding index gets no gradient."""
    keep = torch.ones_like(ids, dtype=torch.bool)
    if getattr(embedding, "padding_idx", None) is not None:
        keep = ids != embedding.padding_idx
    uniq, inverse = torch.unique(ids[keep], sorted=True, return_inverse=True)
    return uniq, inverse, keep


def _head(plan: Plan, sums: Sums, b: int, r: torch.Tensor, y: torch.Tensor, tokens, limit: int):
    """The output layer for one text's scored hidden rows ``r`` (n, d) and targets ``y``: (the rows' gradient (n, d),
    the gradient rows of the text's own tokens set aside when the weight is tied, else None); the weight's and
    bias's gradients are reduced into ``sums``."""
    W, bias = plan.head.weight.detach(), None if plan.head.bias is None else plan.head.bias.detach()
    V, n = W.shape[0], r.shape[0]
    w_row, b_row = plan.head_rows.get("weight"), plan.head_rows.get("bias")
    tied = w_row is not None and w_row == plan.embedding_row
    uniq = tokens[0]
    kept = r.new_zeros(len(uniq), r.shape[1]) if tied else None
    bounds = torch.searchsorted(uniq, torch.arange(0, V + 1, device=uniq.device)).tolist() if tied else None

    def probs(z, cols):  # (n, c) float32 logits of vocabulary rows `cols` → (softmax − onehot) / n in place
        z.sub_(lse[:, None]).exp_()
        hit = (y >= cols.start) & (y < cols.stop)
        z[hit.nonzero()[:, 0], y[hit] - cols.start] -= 1
        return z.div_(n).to(r.dtype)

    if n * V <= limit:  # every probability of the text at once, normalised a few rows at a time (in cache)
        z = torch.mm(r, W.T, out=sums.buffer("logits", (n, V), r.dtype, r.device))
        z = wide(z if bias is None else z.add_(bias))
        step = max(1, CACHE_ELEMENTS // V)
        for s in range(0, n, step):
            blk = z[s : s + step]
            blk.sub_(blk.amax(1, keepdim=True)).exp_()
            blk.div_(blk.sum(1, keepdim=True).mul_(n))
        z[torch.arange(n, device=z.device), y] -= 1 / n
        p = z.to(r.dtype)
        d_rows = p @ W
        chunks = [(c, p[:, c.start : c.stop]) for c in _vocab_chunks(V, r.shape[1])]
    else:  # the log-normaliser first, then each vocabulary block's probabilities computed again
        step = max(1, limit // V)
        lse = torch.cat([torch.logsumexp(wide(torch.nn.functional.linear(r[s : s + step], W, bias)), 1)
                         for s in range(0, n, step)])
        d_rows = torch.zeros_like(r)
        chunks = ((c, None) for c in _vocab_chunks(V, r.shape[1]))
    for cols, pc in chunks:
        if pc is None:
            pc = probs(wide(torch.nn.functional.linear(r, W[cols.start : cols.stop], None if bias is None
                                                       else bias[cols.start : cols.stop])), cols)
            d_rows += pc @ W[cols.start : cols.stop]
        if b_row is not None:
            sums.add(b_row, b, pc.sum(0), owned=True)
        if w_row is None:
            continue
        gw = torch.mm(pc.T, r, out=sums.buffer("piece", (pc.shape[1], r.shape[1]), r.dtype, r.device))  # rows `cols`
        if tied:
            lo, hi = bounds[cols.start], bounds[cols.stop]
            if hi > lo:
                local = uniq[lo:hi] - cols.start
                kept[lo:hi] = gw[local]
                gw[local] = 0
        sums.add(w_row, b, gw, owned=True)
    return d_rows, kept


def _vocab_chunks(vocab: int, width: int) -> list[range]:
    step = max(1, gradient_sums.PIECE // 4 // max(1, width))  # vocabulary rows per block of its gradient (1 MiB)
    return [range(s, min(s + step, vocab)) for s in range(0, vocab, step)]
