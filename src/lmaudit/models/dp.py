"""Differentially private fine-tuning: DP-SGD with Poisson sampling, per-example clipping and Gaussian noise.

One step of DP-SGD (Abadi et al. 2016) as its privacy analysis assumes:

1. **Poisson sampling**: every training example joins the step's batch independently
   with probability q = batch_size / n (so batches vary in size, and may be empty);
   a run of E epochs takes T = round(E / q) steps.
2. **Per-example gradients**, each clipped to L2 norm C (``max_grad_norm``):
   g̃_i = g_i · min(1, C / (‖g_i‖ + 1e-6)), the norm over every trainable parameter
   (Opacus' flat clipping, same constant).
3. **Noise**: g = (Σ_i g̃_i + N(0, σ²C²·I)) / (q·n), averaged by the *expected* batch
   size q·n, never by the drawn one (which would depend on who was sampled).
4. The optimizer (AdamW with lmaudit's learning-rate schedule) steps on g: post-processing.

σ (the noise multiplier) is given, or found from a target ε by Opacus'
``get_noise_multiplier`` (binary search over the accountant, so the ε spent is at most
the target). The ε spent is computed by Opacus' RDP (default) or PRV accountant for
(σ, q, T) at δ.

Per-example gradients. Each sampled example runs through the unchanged training
objective (:data:`lmaudit.models.train.Objective`) as a batch of one, at its own
length (no padding), and ``torch.autograd.grad`` gives its gradient, which is clipped
and added to a running sum at once (memory: two copies of the trainable parameters,
whatever the batch). This is exact for every architecture the model seam loads and
for LoRA (only the adapter's matrices are trainable, so only they are clipped and
noised), and an objective needs no per-example form. A DLM's noise draw (t and the
masked positions) comes from a generator seeded by (seed, step, example index), so
each example's masks are independent of the others and of who else was sampled, and
a run is reproducible. The cost: one forward and backward per sampled example
instead of one per batch (the README gives the measured ratio).

The privacy unit is one training example: an IFT pair, or a DFT block. Packing makes
a text share blocks with its neighbours and a long text span several blocks; the
record says at most how many examples one text touches (``max_examples_per_text``: a
text-level guarantee is group privacy over that many examples).

The Gaussian noise comes from a seeded generator (so that a run is reproducible);
a deployment that needs the guarantee against an adversary who knows the seed should
draw it from a cryptographic source (Opacus' ``secure_mode``).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, fields

import numpy as np
import torch

from lmaudit.errors import LmauditError, SettingError, spell
from lmaudit.models.defaults import DP_DELTA, DP_MAX_GRAD_NORM
from lmaudit.models.train import Example, Objective, TrainConfig, collate, lr_at, make_optimizer, prepare
from lmaudit.progress import progress
from lmaudit.settings import check_settings, one_of, positive, setting
from lmaudit.utils import stable_seed

ACCOUNTANTS = ("rdp", "prv")
DEFAULT_DELTA = DP_DELTA
DEFAULT_MAX_GRAD_NORM = DP_MAX_GRAD_NORM
_HINT = "--dp-epsilon E (or --noise-multiplier σ), --dp-delta D with 0 < D < 1, --max-grad-norm C > 0"


@dataclass(frozen=True)
class DPSpec:
    """What the user asks of DP training: a target ε, or the noise multiplier σ itself (exactly one); δ, the
    per-example clipping norm C and the accountant. Invalid values are refused here, before any work.

    Examples
    --------
    >>> lmaudit.DPSpec(epsilon=8).delta
    1e-05
    >>> lmaudit.DPSpec(epsilon=8, noise_multiplier=1.0)
    Traceback (most recent call last):
    ...
    lmaudit.errors.SettingError: give epsilon= or noise_multiplier=, not both (hint: epsilon= finds the noise
    multiplier that spends that budget)
    """

    epsilon: float | None = setting(None, check=positive(optional=True, hint=_HINT), flag="--dp-epsilon")
    delta: float = setting(DEFAULT_DELTA, check=positive(below=1, hint="δ is a probability of failure: take it well "
                                                                          "below 1/n (e.g. 1e-5)"), flag="--dp-delta")
    noise_multiplier: float | None = setting(None, check=positive(optional=True, hint=_HINT))
    max_grad_norm: float = setting(DEFAULT_MAX_GRAD_NORM, check=positive(hint=_HINT))
    accountant: str = setting("rdp", check=one_of(ACCOUNTANTS, listed=True), flag="--dp-accountant")

    def __post_init__(self) -> None:
        """Exactly one of ε and σ; then every setting's declared constraint."""
        names = {"epsilon": "--dp-epsilon", "noise_multiplier": "--noise-multiplier"}
        if self.epsilon is not None and self.noise_multiplier is not None:
            raise SettingError("epsilon", "give {epsilon} or {noise_multiplier}, not both", also=names,
                               flag="--dp-epsilon", hint="{epsilon} finds the noise multiplier that spends that budget")
        if self.epsilon is None and self.noise_multiplier is None:
            raise SettingError("epsilon", "DP training needs {epsilon} or {noise_multiplier}", also=names,
                               flag="--dp-epsilon", hint=_HINT.replace("{", "{{").replace("}", "}}"))
        check_settings(self)

    @classmethod
    def given(cls, epsilon: float | None = None, delta: float | None = None, noise_multiplier: float | None = None,
              max_grad_norm: float | None = None, accountant: str | None = None) -> DPSpec | None:
        """The spec of the settings given, the others at their defaults (None: no DP, when neither ``epsilon`` nor
        ``noise_multiplier`` is); a DP setting given without either is refused, naming it."""
        others = {"delta": delta, "max_grad_norm": max_grad_norm, "accountant": accountant}
        if epsilon is None and noise_multiplier is None:
            for f in fields(cls):
                if others.get(f.name) is not None:
                    raise SettingError(f.name, "{name} applies to DP training only", flag=f.metadata["flag"],
                                       hint="add {epsilon} E (or {noise_multiplier} σ)",
                                       also={"epsilon": ("epsilon=", "--dp-epsilon"),
                                             "noise_multiplier": ("noise_multiplier=", "--noise-multiplier")})
            return None
        return cls(epsilon=epsilon, delta=DEFAULT_DELTA if delta is None else delta, noise_multiplier=noise_multiplier,
                   max_grad_norm=DEFAULT_MAX_GRAD_NORM if max_grad_norm is None else max_grad_norm,
                   accountant=accountant or "rdp")


@dataclass(frozen=True)
class DPPlan:
    """A DP run's schedule and noise: sampling rate q, steps T and noise multiplier σ, for ``n_examples``."""

    spec: DPSpec
    n_examples: int
    sample_rate: float
    steps: int
    noise_multiplier: float

    @property
    def expected_batch_size(self) -> float:
        return self.sample_rate * self.n_examples

    def spent(self) -> float:
        """The ε this run spends at δ (the accountant on (σ, q, T))."""
        return spent_epsilon(self.noise_multiplier, self.sample_rate, self.steps, self.spec.delta,
                             accountant=self.spec.accountant)

    def record(self, **extra) -> dict:
        """The ``dp`` entry of ``lmaudit_training.json``."""
        return {"epsilon": self.spent(), "delta": self.spec.delta, "target_epsilon": self.spec.epsilon,
                "noise_multiplier": self.noise_multiplier, "sample_rate": self.sample_rate, "steps": self.steps,
                "max_grad_norm": self.spec.max_grad_norm, "accountant": self.spec.accountant, "sampling": "poisson",
                "expected_batch_size": self.expected_batch_size, "n_examples": self.n_examples, **extra}


def spent_epsilon(noise_multiplier: float, sample_rate: float, steps: int, delta: float, *,
                  accountant: str = "rdp") -> float:
    """ε spent by ``steps`` DP-SGD steps of noise multiplier σ at Poisson rate q, at δ (Opacus' accountant).

    Opacus' default RDP orders are used (those ``get_noise_multiplier`` searches with). Its warning that the best
    order is the largest one (few steps, or q near 1) is silenced: the ε is then a valid but loose upper bound
    (``accountant="prv"`` is tighter).
    """
    from opacus.accountants import create_accountant  # Opacus takes a second to import: only where DP is used

    acc = create_accountant(mechanism=accountant)
    acc.history = [(float(noise_multiplier), float(sample_rate), int(steps))]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return float(acc.get_epsilon(delta=delta))


def rdp_floor(delta: float) -> float:
    """The smallest ε the RDP accountant (Opacus' default orders, the largest 63) can give at ``delta``: its
    conversion to (ε, δ) costs that much even without any privacy loss (infinite noise)."""
    from opacus.accountants import RDPAccountant
    from opacus.accountants.analysis import rdp as rdp_analysis

    orders = RDPAccountant.DEFAULT_ALPHAS
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        eps, _ = rdp_analysis.get_privacy_spent(orders=orders, rdp=np.zeros(len(orders)), delta=delta)
    return float(eps)


def _options(spec: DPSpec) -> dict:
    """How a DP planning error names the settings (Python: DPSpec's fields; the command line: its flags)."""
    return {"asked": spell("epsilon", spec.epsilon, flag="--dp-epsilon"),
            "epsilon": spell("epsilon", flag="--dp-epsilon"),
            "delta": spell("delta", flag="--dp-delta"), "prv": spell("accountant", "prv", flag="--dp-accountant")}


def plan_dp(spec: DPSpec, *, n_examples: int, batch_size: int, epochs: float) -> DPPlan:
    """q = batch_size / n (at most 1), T = round(epochs / q) (at least 1), σ given or found from the target ε."""
    if n_examples < 1:
        raise LmauditError("no training examples", hint="the training data is empty after tokenisation")
    if batch_size < 1 or not epochs > 0:
        raise LmauditError(f"DP training needs {{batch_size}} ≥ 1 and {{epochs}} > 0, got {batch_size} and {epochs}",
                           options=("batch_size", "epochs"))
    q = min(1.0, batch_size / n_examples)
    steps = max(1, round(epochs / q))
    sigma = spec.noise_multiplier
    if sigma is None and spec.accountant == "rdp" and spec.epsilon <= rdp_floor(spec.delta):
        raise LmauditError(f"{{asked}}: the RDP accountant cannot certify an ε below "
                           f"{rdp_floor(spec.delta):.3g} at δ={spec.delta}, whatever the noise",
                           hint="use {prv}, or raise {epsilon} or {delta}", options=_options(spec))
    if sigma is None:
        from opacus.accountants.utils import get_noise_multiplier

        try:
            with warnings.catch_warnings():  # the PRV accountant warns about its own numerical precision
                warnings.simplefilter("ignore")
                sigma = get_noise_multiplier(target_epsilon=spec.epsilon, target_delta=spec.delta, sample_rate=q,
                                             steps=steps, accountant=spec.accountant)
        except ValueError as exc:
            raise LmauditError(f"{{asked}} at δ={spec.delta} cannot be reached in {steps} steps at sampling rate "
                               f"{q:.4g} ({exc})", hint="raise {epsilon} or {delta}, or train fewer epochs",
                               options=_options(spec)) from None
    return DPPlan(spec, n_examples, q, steps, float(sigma))


def poisson_batch(rng: np.random.Generator, n: int, q: float) -> np.ndarray:
    """The indices of one Poisson-sampled batch: each of ``n`` examples independently with probability ``q``."""
    return np.flatnonzero(rng.random(n) < q)


def example_generator(seed: int, step: int, index: int) -> torch.Generator:
    """The noise-draw generator of example ``index`` at ``step``: independent of the other examples sampled."""
    return torch.Generator().manual_seed(stable_seed("dp-example", seed, step, index))


def private_gradient(model: torch.nn.Module, objective: Objective, batch: list[Example], generators: list, *,
                     max_grad_norm: float, noise_multiplier: float, expected_batch_size: float,
                     noise_generator: torch.Generator | None,
                     pad_id: int = 0) -> tuple[list[torch.Tensor], list[float]]:
    """The DP-SGD gradient of the trainable parameters, and the per-example losses.

    ``(Σ_i clip_C(∇ loss_i) + N(0, σ²C²)) / expected_batch_size``, each loss_i the
    objective on example i alone (with ``generators[i]``). Returns one float32
    tensor per trainable parameter (in ``model.parameters()`` order) and the losses.
    ``noise_multiplier=0`` adds no noise (``noise_generator`` may then be None).
    """
    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        raise LmauditError("the model has no trainable parameters")
    device = params[0].device
    total = [torch.zeros(p.shape, dtype=torch.float32, device=p.device) for p in params]
    losses = []
    for example, gen in zip(batch, generators):
        ids, attn, mask = (t.to(device) for t in collate([example], pad_id))  # (1, L): no padding
        loss = objective(model, ids, attn, mask, gen)
        grads = torch.autograd.grad(loss, params, allow_unused=True)
        grads = [torch.zeros_like(p) if g is None else g for p, g in zip(params, grads)]
        norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g.float()) for g in grads]))
        factor = (max_grad_norm / (norm + 1e-6)).clamp(max=1.0)  # a tensor: no device sync per example
        for acc, g in zip(total, grads):
            acc.add_(g.float() * factor)
        losses.append(loss.detach())
    losses = torch.stack(losses).float().cpu().tolist() if losses else []  # one device sync per step, not per example
    if not all(np.isfinite(losses)):
        raise LmauditError(f"training diverged (losses {losses})", hint="lower the learning rate")
    if noise_multiplier > 0:
        std = noise_multiplier * max_grad_norm
        for acc in total:
            acc.add_(torch.randn(acc.shape, generator=noise_generator, device=acc.device) * std)
    return [acc / expected_batch_size for acc in total], losses


def train_dp(model: torch.nn.Module, examples: list[Example], config: TrainConfig, plan: DPPlan, *,
             objective: Objective, pad_id: int = 0, description: str = "DP training") -> list[float]:
    """Train ``model`` in place with DP-SGD (see the module docstring): ``plan.steps`` Poisson-sampled steps.

    ``config`` gives the learning rate, its schedule, weight decay and the seed
    (``config.batch_size`` and ``epochs`` are already in ``plan``; ``grad_clip`` is
    replaced by the per-example clipping). Returns the mean loss of every non-empty step.
    Deterministic for a given seed on one device.
    """
    if len(examples) != plan.n_examples:
        raise LmauditError(f"internal error: the DP plan is for {plan.n_examples} examples, not {len(examples)}")
    prepare(model, config)
    rng = np.random.default_rng(stable_seed("dp-poisson", config.seed))
    device = next(model.parameters()).device
    noise_gen = torch.Generator(device=device).manual_seed(stable_seed("dp-noise", config.seed))
    opt = make_optimizer(model, config)
    params = [p for p in model.parameters() if p.requires_grad]
    model.train()
    losses: list[float] = []
    with progress(description, total=plan.steps) as bar:
        for step in range(plan.steps):
            idx = poisson_batch(rng, len(examples), plan.sample_rate)
            grads, step_losses = private_gradient(
                model, objective, [examples[i] for i in idx],
                [example_generator(config.seed, step, int(i)) for i in idx],
                max_grad_norm=plan.spec.max_grad_norm, noise_multiplier=plan.noise_multiplier,
                expected_batch_size=plan.expected_batch_size, noise_generator=noise_gen, pad_id=pad_id)
            for group in opt.param_groups:
                group["lr"] = lr_at(config, plan.steps, step)
            for p, g in zip(params, grads):
                p.grad = g.to(p.dtype)
            opt.step()
            opt.zero_grad(set_to_none=True)
            if step_losses:
                losses.append(float(np.mean(step_losses)))
            bar.advance(1)
            if step % 10 == 0 and losses:
                bar.update(extra=f"loss {np.mean(losses[-10:]):.3f}")
    model.eval()
    return losses


def trainable(examples: list[Example]) -> list[Example]:
    """The examples with a position to train after the first (an IFT pair whose response the context length cut
    off has none: alone in a batch of one its loss is undefined, and it could teach nothing anyway)."""
    return [e for e in examples if e[1][1:].any()]


def max_examples_per_text(tokenizer, textset, block: int) -> int:
    """How many DFT blocks the text that touches most touches (texts packed back to back, each followed by EOS,
    as :func:`~lmaudit.models.train.dft_examples` packs them)."""
    eos = int(tokenizer.eos_token_id is not None)
    most, start = 0, 0
    for ids in tokenizer(textset.texts, add_special_tokens=True)["input_ids"]:
        n = len(ids) + eos
        if n > 0:
            most = max(most, (start + n - 1) // block - start // block + 1)
        start += n
    return most
