"""``lmaudit models import`` and ``models list``: GGUF files and named pretrained models as model folders; ``lmaudit
quantize``: a model as llama.cpp serves it (GGUF Q8_0 or Q4_0), read back into a model folder."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Optional

import typer

from lmaudit import api
from lmaudit.api.setup import NAMED_MODELS, gguf_file, import_gguf, source_record
from lmaudit.api.tools import training_record
from lmaudit.commands import common as c
from lmaudit.commands.running import check_out
from lmaudit.errors import ModelLoadError
from lmaudit.progress import stdout_console

app = typer.Typer(add_completion=False, no_args_is_help=True, rich_help_panel=c.PANEL_MODELS,
                  help="Pretrained models: GGUF files and named models (e.g. smollm2-135m) as model folders.")


@app.command("import")
def models_import(
    config: Optional[Path] = c.config_option(),
    source: str = typer.Argument(..., help="A .gguf file, a folder holding one, or a named model (smollm2-135m)."),
    out: Path = typer.Option(..., help="Folder to write the model to (safetensors, tokenizer, lmaudit_source.json)."),
) -> None:
    """Dequantize a GGUF file into an ordinary model folder once, so later runs load it without converting.

    Any command also accepts the .gguf file or the name directly: it is then imported into the
    model cache on first use. --out must be new, empty, or an earlier import of the same file: another
    model there (a fine-tuned one, another file's import) is never replaced."""
    file = gguf_file(source)
    check_out(out, kind="model", inputs={"the GGUF file": file})
    t0 = time.perf_counter()
    folder = import_gguf(source, out)
    record = source_record(folder) or {}
    types = ", ".join(f"{n} {t}" for t, n in record.get("tensor_types", {}).items())
    stdout_console.print(f"{folder}: {record.get('parameters', 0) / 1e6:.1f}M parameters from {file} "
                         f"(sha256 {record.get('sha256', '')[:16]}…; tensors: {types}) in "
                         f"{time.perf_counter() - t0:.0f} s", soft_wrap=True)


@app.command("list")
def models_list() -> None:
    """The named models lmaudit finds in installed packages, and where each file is."""
    for name, (package, filename, what) in NAMED_MODELS.items():
        try:
            where = str(gguf_file(name))
        except ModelLoadError as exc:  # not installed: say how to install it
            where = f"not installed ({exc})"
        stdout_console.print(f"{name}: {what}; package {package}, file {filename}: {where}", soft_wrap=True)


@app.command("quantize", rich_help_panel=c.PANEL_MODELS)
def quantize(
    config: Optional[Path] = c.config_option(),
    model: Optional[Path] = typer.Option(None, "--model", help="The model to quantise: a model folder (an adapter "
                                                               "folder is merged into its base), a .gguf file or a "
                                                               "named model (smollm2-135m). [required]"),
    scheme: str = typer.Option("q4_0", help="q8_0 or q4_0: llama.cpp's 8-bit or 4-bit blocks of 32 values."),
    out: Path = typer.Option(..., help="Folder to write the quantised model to (the GGUF file, and the model read "
                                       "back from it: safetensors, tokenizer, lmaudit_training.json)."),
    adapter_base: Optional[Path] = typer.Option(None, help="An adapter folder's base model folder (default: the "
                                                           "local folder its adapter_config.json names)."),
    trust_remote_code: bool = typer.Option(False, help="Allow modeling code shipped with the checkpoint."),
    allow_pickle: bool = typer.Option(False, help="Allow pickle (.bin) weights."),
) -> None:
    """Quantise a model as llama.cpp serves it (every matrix to Q8_0 or Q4_0, norms and biases kept float32) and save
    the model read back from the GGUF file, to audit what quantisation brings back (e.g. of unlearned texts)."""
    model = c.pick_model(model, None, "")
    options = {k: v for k, v in {"adapter_base": adapter_base, "trust_remote_code": trust_remote_code,
                                 "allow_pickle": allow_pickle}.items() if v}
    folder = api.quantize(model, out, scheme=scheme, **options)
    record = training_record(folder)
    errors = record["relative_error"]
    worst = max(errors, key=errors.get) if errors else "-"
    kinds = sorted({re.sub(r"\.\d+\.", ".N.", name) for name in record["quantized"]})  # one line per layer kind
    stdout_console.print(
        f"quantised {len(record['quantized'])} tensors ({record['parameters_quantized'] / 1e6:.1f}M parameters) to "
        f"{record['scheme'].upper()}: {', '.join(kinds)}; kept {len(record['float32'])} in float32"
        + (f"; tied: {', '.join(f'{a} = {b}' for a, b in record['tied'].items())}" if record["tied"] else ""),
        soft_wrap=True)
    stdout_console.print(f"relative weight error ‖Ŵ − W‖/‖W‖: mean {record['relative_error_mean']:.4f}, max "
                         f"{record['relative_error_max']:.4f} ({worst})", soft_wrap=True)
    stdout_console.print(f"saved to {folder} (GGUF file {record['gguf']}, {record['gguf_bytes'] / 1e6:.1f} MB) in "
                         f"{record['seconds']:.1f} s", soft_wrap=True)
