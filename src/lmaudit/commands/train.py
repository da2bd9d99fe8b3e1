"""``lmaudit pretrain``, ``finetune``, ``unlearn`` and ``shadows``: make the models to audit."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import typer

from lmaudit import api
from lmaudit.api.setup import DP_DELTA, DP_MAX_GRAD_NORM
from lmaudit.commands import common as c
from lmaudit.commands.running import ModelOptions, shared_options
from lmaudit.progress import info, stdout_console

app = typer.Typer(add_completion=False)


def _lora_option():
    return typer.Option(None, "--lora", metavar="RANK",
                        help="Train a LoRA adapter of this rank instead of every weight; --out is then an adapter "
                             "folder (usable wherever a model folder is).")


def _alpha_option():
    return typer.Option(None, "--lora-alpha", help="LoRA alpha (default: 2 × rank).")


def _targets_option():
    return typer.Option(None, "--lora-targets", help="Comma-separated module names to adapt (default: peft's for the "
                                                     "architecture: q_proj,v_proj for Llama, query,value for BERT).")


def _merge_option():
    return typer.Option(False, "--merge", help="With --lora: write the merged full model instead of the adapter.")


def _lr_option():
    return typer.Option(None, help="Learning rate (default: what suits the model: 1e-3 for lmaudit's tiny presets; "
                                   "for a pretrained model 3e-5 for every weight, 5e-4 with --lora).")


def _block_option():
    return typer.Option(None, help="DFT block length in tokens (default: 64 for the tiny presets, 128 for a "
                                   "pretrained model).")


def _batch_option():
    return typer.Option(None, help="Batch size (default: 16 for the tiny presets, 8 for a pretrained model).")


_DP_PANEL = "Differential privacy (DP-SGD)"


def _dp_epsilon_option():
    return typer.Option(
        None, "--dp-epsilon", rich_help_panel=_DP_PANEL,
        help="Train with DP-SGD to this ε (at --dp-delta): Poisson batches of expected size --batch-size, each "
             "example's gradient clipped to --max-grad-norm, Gaussian noise found to spend at most ε. The ε spent "
             "is saved in lmaudit_training.json and shown in mia results.")


def _dp_delta_option():
    return typer.Option(None, "--dp-delta", rich_help_panel=_DP_PANEL,
                        help=f"DP: δ, in (0, 1), well below 1/n (default: {DP_DELTA:g}).")


def _noise_option():
    return typer.Option(
        None, "--noise-multiplier", rich_help_panel=_DP_PANEL,
        help="DP-SGD with this noise multiplier σ instead of one found from --dp-epsilon (the ε spent is recorded).")


def _clip_option():
    return typer.Option(None, "--max-grad-norm", rich_help_panel=_DP_PANEL,
                        help=f"DP: clip each example's gradient to this L2 norm C (default: {DP_MAX_GRAD_NORM:g}).")


def _accountant_option():
    return typer.Option(None, "--dp-accountant", rich_help_panel=_DP_PANEL,
                        help="DP: Opacus accountant, rdp or prv (default: rdp; prv is tighter).")


@dataclass
class LoraOptions:
    """``--lora RANK`` and the options that go with it (finetune, unlearn, shadows)."""

    lora: Optional[int] = None
    lora_alpha: Optional[float] = None
    lora_targets: Optional[str] = None
    merge: bool = False

    def spec(self):
        """A :class:`LoraSpec` (None: full fine-tuning); it refuses the other options without ``--lora``."""
        targets = None if self.lora_targets is None else tuple(c.split_names(self.lora_targets) or ())
        return api.LoraSpec.given(self.lora, self.lora_alpha, targets, self.merge)


@dataclass
class DPOptions:
    """The DP-SGD options (finetune, shadows)."""

    dp_epsilon: Optional[float] = None
    dp_delta: Optional[float] = None
    noise_multiplier: Optional[float] = None
    max_grad_norm: Optional[float] = None
    dp_accountant: Optional[str] = None

    def spec(self):
        """A :class:`DPSpec` (None: no DP); it refuses the others without ``--dp-epsilon`` or ``--noise-multiplier``."""
        return api.DPSpec.given(self.dp_epsilon, self.dp_delta, self.noise_multiplier, self.max_grad_norm,
                            self.dp_accountant)


LORA = ("lora_options", LoraOptions, [("lora", Optional[int], _lora_option()),
                                      ("lora_alpha", Optional[float], _alpha_option()),
                                      ("lora_targets", Optional[str], _targets_option()),
                                      ("merge", bool, _merge_option())])
DP = ("dp_options", DPOptions, [("dp_epsilon", Optional[float], _dp_epsilon_option()),
                                ("dp_delta", Optional[float], _dp_delta_option()),
                                ("noise_multiplier", Optional[float], _noise_option()),
                                ("max_grad_norm", Optional[float], _clip_option()),
                                ("dp_accountant", Optional[str], _accountant_option())])


@app.command(rich_help_panel=c.PANEL_MODELS)
def pretrain(
    config: Optional[Path] = c.config_option(),
    out: Path = typer.Option(..., help="Folder to save the model to."),
    kind: str = typer.Option("ar", help="Model kind: ar (causal) or dlm (masked diffusion)."),
    preset: str = typer.Option("tiny", help="Model size: tiny or small."),
    tokens: Optional[int] = typer.Option(None, help="Training tokens (default: the preset's)."),
    seed: int = c.seed_option(),
    init_from: Optional[Path] = typer.Option(None, help="DLM: adapt this AR model folder (Llama family, its own "
                                             "tokenizer; a mask token is added if it has none) instead of starting "
                                             "from scratch."),
    lr: Optional[float] = typer.Option(None, help="Learning rate (default: the preset's; adapting a pretrained "
                                                  "model wants a smaller one, e.g. 1e-4)."),
    block: Optional[int] = typer.Option(None, help="Training block length in tokens (default: the preset's)."),
    batch_size: Optional[int] = typer.Option(None, help="Blocks per step (default: the preset's)."),
) -> None:
    """Pretrain a tiny model on the embedded corpus' pretraining pool, or adapt an AR model into a diffusion LM."""
    api.pretrain(out, kind=kind, preset=preset, tokens=tokens, seed=seed, init_from=init_from, lr=lr, block=block,
                 batch_size=batch_size)
    info(f"saved to {out}")


@app.command(rich_help_panel=c.PANEL_MODELS)
@shared_options(extra=(LORA, DP))
def finetune(
    config: Optional[Path] = c.config_option(),
    model: Optional[Path] = c.model_option("Model folder to start from."),
    base: Optional[Path] = c.alias_option("--base"),
    data: Path = typer.Option(..., help="JSONL/CSV/folder: 'text' (dft) or 'prompt'+'response' (ift)."),
    out: Path = typer.Option(..., help="Folder to save the fine-tuned model to."),
    mode: str = typer.Option("dft", help="dft: packed fixed-length blocks; ift: loss on responses only."),
    epochs: float = typer.Option(4.0),
    lr: Optional[float] = _lr_option(),
    block: Optional[int] = _block_option(),
    batch_size: Optional[int] = _batch_option(),
    seed: int = c.seed_option(),
    mask_ratio: Optional[float] = typer.Option(None, help="DLM only: train with this fixed mask ratio."),
    text_field: str = c.text_field_option(),
    split: Optional[str] = c.split_option(),
    chat_template: Optional[bool] = c.chat_template_option(),
    lora_options: LoraOptions = None,
    dp_options: DPOptions = None,
    model_options: ModelOptions = None,
) -> None:
    """Fine-tune a model on your data (domain or instruction fine-tuning; all weights, or a LoRA adapter; optionally
    with differential privacy)."""
    start = c.pick_model(model, base, "--base")
    spec = lora_options.spec()
    dp = dp_options.spec()
    api.finetune(start, data, out, mode=mode, epochs=epochs, lr=lr, block=block, batch_size=batch_size, seed=seed,
                 mask_ratio=mask_ratio, lora=spec, dp=dp, chat_template=chat_template, text_field=text_field,
                 split=split, kind=model_options.kind, **model_options.training_kwargs())
    info(f"saved to {out}")


@app.command(rich_help_panel=c.PANEL_MODELS)
@shared_options(extra=(LORA,))
def unlearn(
    config: Optional[Path] = c.config_option(),
    model: Optional[Path] = c.model_option("The fine-tuned model folder (AR or DLM)."),
    forget: Path = typer.Option(..., help="Texts to forget."),
    retain: Path = typer.Option(..., help="Texts to keep (the rest of the training data)."),
    method: str = typer.Option(..., help="retrain, gradient_ascent, npo or finetune."),
    out: Path = typer.Option(..., help="Folder to save the unlearned model to."),
    base: Optional[Path] = typer.Option(None, help="retrain: the model the original fine-tuning started from."),
    epochs: float = typer.Option(2.0),
    lr: float = typer.Option(1e-4),
    batch_size: int = typer.Option(16),
    block: int = typer.Option(64, help="DFT block length in tokens."),
    mode: str = typer.Option("dft", help="dft or ift (as the original fine-tuning)."),
    retain_weight: float = typer.Option(1.0, help="gradient_ascent/npo: weight of the retain-set loss (0: none)."),
    npo_beta: float = typer.Option(0.1, help="npo: inverse temperature β."),
    seed: int = c.seed_option(),
    text_field: str = c.text_field_option(),
    split: Optional[str] = c.split_option(),
    lora_options: LoraOptions = None,
    model_options: ModelOptions = None,
) -> None:
    """Produce an unlearned model to audit (retrain = fine-tune the base on the retain set: the gold standard)."""
    model = c.pick_model(model, None, "")
    spec = lora_options.spec()
    api.unlearn(model, forget, retain, out, method=method, base=base, epochs=epochs, lr=lr, batch_size=batch_size,
                block=block, mode=mode, retain_weight=retain_weight, npo_beta=npo_beta, seed=seed, lora=spec,
                text_field=text_field, split=split, kind=model_options.kind, **model_options.training_kwargs())
    info(f"saved to {out}")


@app.command(rich_help_panel=c.PANEL_MODELS)
@shared_options(extra=(LORA, DP))
def shadows(
    config: Optional[Path] = c.config_option(),
    model: Optional[Path] = c.model_option("The model the target was fine-tuned from (its base)."),
    base: Optional[Path] = c.alias_option("--base"),
    pool: Path = typer.Option(..., help="Population pool: each shadow trains on a random half."),
    out: Path = typer.Option(..., help="Folder for the shadow models and shadows.json."),
    k: int = typer.Option(8, help="Number of shadow models."),
    epochs: float = typer.Option(4.0),
    lr: Optional[float] = _lr_option(),
    block: Optional[int] = _block_option(),
    batch_size: Optional[int] = _batch_option(),
    mode: str = typer.Option("dft"),
    seed: int = c.seed_option(),
    text_field: str = c.text_field_option(),
    split: Optional[str] = c.split_option(),
    lora_options: LoraOptions = None,
    dp_options: DPOptions = None,
    model_options: ModelOptions = None,
) -> None:
    """Train K shadow models for LiRA, RMIA and DUCI (use the target's own fine-tuning settings, --lora and DP
    included)."""
    start = c.pick_model(model, base, "--base")
    spec = lora_options.spec()
    dp = dp_options.spec()
    trained = api.shadows(start, pool, out, k=k, epochs=epochs, lr=lr, block=block, batch_size=batch_size,
                          mode=mode, seed=seed, lora=spec, dp=dp, text_field=text_field, split=split,
                          kind=model_options.kind, **model_options.training_kwargs())
    stdout_console.print(f"shadows: {trained.path / 'shadows.json'}")
