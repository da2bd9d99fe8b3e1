"""``lmaudit models import`` and ``models list``: GGUF files and named pretrained models as model folders."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Optional

import typer

from lmaudit.api.setup import NAMED_MODELS, gguf_file, import_gguf, source_record
from lmaudit.commands import common as c
from lmaudit.commands.running import check_out
from lmaudit.errors import ModelLoadError
from lmaudit.progress import stdout_console

app = typer.Typer(add_completion=False, no_args_is_help=True,
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
