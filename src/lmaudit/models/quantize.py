"""Quantise a model as llama.cpp serves it (GGUF Q8_0 or Q4_0) and read it back as an ordinary model folder.

An unlearning audit must ask whether forgotten texts come back once the unlearned model is
quantised for serving: :func:`quantize_model` writes that served model as a folder every
command loads like any other.

What is quantised (llama.cpp's choice): every parameter of two or more dimensions (the linear
layers' matrices, the embeddings, an untied output head) takes the scheme, row by row along its
last dimension (a linear layer's input features, an embedding's hidden size: ggml's ``ne[0]``);
parameters of one dimension (norm weights, biases) stay float32. Every matrix takes the scheme,
as ``llama-quantize --pure`` does; llama-quantize's default keeps the output head (which a tied
embedding is) at Q6_K or Q8_0, so for the head this is the harsher of the two.

Both schemes split a row into blocks of 32 values, each stored with one float16 scale ``d``:
Q8_0 keeps round(x / d) in 8 bits with d = max|x| / 127; Q4_0 keeps 4-bit codes in [−8, 7] with
d = m / −8, m the block's value of largest magnitude. The arithmetic is the ``gguf`` package's
reference implementation of ggml's, the blocks llama-quantize writes.

A matrix whose rows are not a multiple of 32 values cannot take the scheme: it is refused,
naming the tensor, its shape and the scheme, before anything is written. There is no fallback,
because llama.cpp has none for Q8_0 or Q4_0 either (llama-quantize stops with "Unsupported
tensor size encountered"), and a model with that matrix kept in float would be no model a
llama.cpp server runs.

Tied parameters (an output head tied to the token embeddings) are one tensor, quantised once:
the head stays the embedding.

The round trip: every parameter is written to the GGUF file ``model.<scheme>.gguf`` in ``out``
(quantised tensors with their GGML type, the others F32, under their transformers names; the
tensor infos hold each one's dimensions, the metadata the scheme and the source), the file is read
back with ``GGUFReader``, each tensor dequantised, checked against its parameter's name and shape,
and loaded into the model, which is saved beside the file (safetensors, config, tokenizer). The
GGUF file records the quantised weights; it is not a file llama.cpp loads (no tokenizer, no
llama.cpp tensor names): the model folder is what lmaudit audits.

The relative error of a tensor is ‖Ŵ − W‖_F / ‖W‖_F (0 for an all-zero W), Ŵ the dequantised
weights read back from the file. ``lmaudit_training.json`` records the stage ``quantize``, the
scheme, the source folder and fingerprint, the tensors quantised (with their shapes), those kept
in float32, the tied ones, each quantised tensor's relative error and their mean and maximum.
A model trained with differential privacy keeps its ``dp`` record: quantisation is
post-processing, which spends no privacy.
"""

from __future__ import annotations

import copy
import json
import time
from pathlib import Path

import gguf
import numpy as np
import torch
from gguf import GGMLQuantizationType, GGUFReader, GGUFWriter

from lmaudit.errors import LmauditError
from lmaudit.folders import check_replaceable, output_folder, with_cache
from lmaudit.models.gguf import quiet_transformers
from lmaudit.models.handle import ModelHandle
from lmaudit.models.loading import load_model, merge_adapters
from lmaudit.models.lora import save_weights
from lmaudit.models.served import is_endpoint
from lmaudit.models.sources import TRAINING_FILE, model_folders
from lmaudit.progress import info
from lmaudit.settings import one_of

SCHEMES = {"q8_0": GGMLQuantizationType.Q8_0, "q4_0": GGMLQuantizationType.Q4_0}
ARCH = "lmaudit"  # the GGUF file's general.architecture: transformers names, no llama.cpp model
_SPELLED = {"model": ("model", "--model"), "out": ("out", "--out")}


def gguf_name(scheme: str) -> str:
    """The name of the GGUF file a quantised folder holds."""
    return f"model.{scheme}.gguf"


def check_scheme(scheme) -> str:
    """``scheme`` (any case) as a key of :data:`SCHEMES`; anything else is refused, naming ``scheme``."""
    value = scheme.lower() if isinstance(scheme, str) else scheme
    one_of(tuple(SCHEMES))(value, "scheme", "--scheme")
    return value


def plan(model, scheme: str, where: str = "the model") -> tuple[list[str], list[str], dict[str, str]]:
    """(names to quantise, names kept float32, {tied name: the name it shares}) of ``model``'s parameters.

    A parameter of two or more dimensions whose last one is not a multiple of the scheme's block is refused,
    naming it, its shape and the scheme (``where`` names the model).
    """
    block = gguf.GGML_QUANT_SIZES[SCHEMES[scheme]][0]
    first: dict[int, str] = {}
    quantized, kept, tied = [], [], {}
    for name, p in model.named_parameters(remove_duplicate=False):
        if id(p) in first:
            tied[name] = first[id(p)]
            continue
        first[id(p)] = name
        if p.dim() < 2:
            kept.append(name)
        elif p.shape[-1] % block:
            raise LmauditError(
                f"{where}: {name} of shape {list(p.shape)} cannot take {scheme.upper()}: its rows of "
                f"{p.shape[-1]} values do not split into blocks of {block}",
                hint=f"quantise a model whose matrices have rows of a multiple of {block} values (llama.cpp "
                     f"refuses this tensor too), or choose another model")
        else:
            quantized.append(name)
    return quantized, kept, tied


def write_gguf(path: Path, params: dict[str, torch.Tensor], quantized: list[str], scheme: str, facts: dict) -> None:
    """Write ``params`` to the GGUF file ``path``: those named in ``quantized`` in the scheme's type, the rest F32;
    ``facts`` ({key: str}) go into the metadata under ``lmaudit.``."""
    writer = GGUFWriter(path, ARCH)
    writer.add_string("lmaudit.scheme", scheme)
    for key, value in facts.items():
        writer.add_string(f"lmaudit.{key}", str(value))
    for name, p in params.items():
        array = p.detach().to("cpu", torch.float32).numpy()
        if name in quantized:
            writer.add_tensor(name, gguf.quants.quantize(array, SCHEMES[scheme]), raw_dtype=SCHEMES[scheme])
        else:
            writer.add_tensor(name, np.ascontiguousarray(array))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def read_gguf(path: Path, params: dict[str, torch.Tensor], scheme: str) -> dict[str, np.ndarray]:
    """{name: float32 values} of every tensor of the GGUF file ``path``, dequantised; each must be one of ``params``,
    of its shape, and of the scheme's type or F32, and every parameter must be there."""
    reader = GGUFReader(path)
    scheme_field = reader.get_field("lmaudit.scheme")
    written = bytes(scheme_field.parts[scheme_field.data[0]]).decode() if scheme_field else None
    if written != scheme:
        raise LmauditError(f"{path}: written as {written}, read as {scheme}")
    values = {}
    for t in reader.tensors:
        if t.name not in params or t.tensor_type not in (SCHEMES[scheme], GGMLQuantizationType.F32):
            raise LmauditError(f"{path}: unexpected tensor {t.name} ({t.tensor_type.name})")
        array = gguf.quants.dequantize(t.data, t.tensor_type)
        if tuple(array.shape) != tuple(params[t.name].shape):
            raise LmauditError(f"{path}: {t.name} has shape {list(array.shape)}, the model's "
                               f"{list(params[t.name].shape)}")
        values[t.name] = np.array(array, dtype=np.float32)  # a copy: the reader maps the file
    missing = sorted(set(params) - set(values))
    if missing:
        raise LmauditError(f"{path}: {len(missing)} tensor(s) missing (e.g. {missing[0]})")
    return values


def relative_error(new: np.ndarray, old: np.ndarray) -> float:
    """‖new − old‖_F / ‖old‖_F, in float64 (0 when ``old`` is all zeros)."""
    norm = float(np.sqrt(np.sum(np.square(old, dtype=np.float64))))
    diff = float(np.sqrt(np.sum(np.square(new.astype(np.float64) - old))))
    return diff / norm if norm > 0 else 0.0


def _source(model, load_options: dict) -> ModelHandle:
    """The model to quantise, any adapter merged into its weights: a loaded model's copy (the caller's is never
    changed), or a source loaded in float32 on the CPU with ``load_options``; a served model is refused (its
    weights are not here)."""
    path = model.path if isinstance(model, ModelHandle) else model
    if is_endpoint(str(path)):
        raise LmauditError(f"{{model}} '{path}' is a served model: its weights cannot be quantised here",
                           hint="name a local model folder, GGUF file or named model", options=_SPELLED)
    if not isinstance(model, ModelHandle):
        handle = load_model(model, **{**load_options, "device": "cpu", "dtype": "float32"})
        merge_adapters(handle.model)  # an adapter's LoRA layers, folded into the weights they change
        return handle
    weights = merge_adapters(copy.deepcopy(model.model)).to("cpu", torch.float32)
    return ModelHandle(weights, model.tokenizer, model.path, model.fingerprint, model.kind, model.adapter,
                       dp=model.dp, source=model.source)


def quantize_model(model, out: str | Path, *, scheme: str = "q4_0", **load_options) -> Path:
    """Quantise ``model`` (a model folder, an adapter folder, which is merged into its base, a GGUF file, a named
    model, or a loaded model) to ``scheme`` (``q8_0`` or ``q4_0``), write the GGUF file and the model read back
    from it to the model folder ``out``; return ``out``.

    ``load_options`` go to :func:`~lmaudit.models.loading.load_model` (the weights are read in float32 on the
    CPU). The scheme and ``out`` are checked before the model loads (``out`` must be new, empty or a model
    folder, and neither an input nor the cache); a matrix that cannot take the scheme is refused before anything
    is written (see the module's docstring).
    """
    scheme = check_scheme(scheme)
    path = model.path if isinstance(model, ModelHandle) else model
    inputs = {} if is_endpoint(str(path)) else {"{model}": model_folders(path, load_options.get("adapter_base"))}
    check_replaceable(out, "{out}", kind="model", inputs=with_cache(inputs), options=_SPELLED)
    with output_folder(out, what="model", inputs=with_cache(inputs)) as tmp:
        write_quantized(model, tmp, scheme=scheme, **load_options)
    return Path(out)


def write_quantized(model, tmp: Path, *, scheme: str = "q4_0", **load_options) -> None:
    """The work of :func:`quantize_model`, written into the folder ``tmp`` as it is (no check of the folder: a
    folder being built, e.g. in the model cache)."""
    scheme = check_scheme(scheme)
    t0 = time.perf_counter()
    quiet_transformers()
    handle = _source(model, load_options)
    net = handle.model
    quantized, kept, tied = plan(net, scheme, f"'{handle.path}'")
    params = dict(net.named_parameters())
    info(f"quantising {len(quantized)} tensors of {handle.path} to {scheme.upper()}")
    record = {"stage": "quantize", "kind": handle.kind, "scheme": scheme, "gguf": gguf_name(scheme),
              "source": str(handle.path), "source_fingerprint": handle.fingerprint,
              **({"source_gguf": handle.source.get("gguf")} if handle.source else {}),
              **({"dp": handle.dp} if handle.dp else {})}
    file = tmp / gguf_name(scheme)
    write_gguf(file, params, quantized, scheme, {"source": handle.path, "source_fingerprint": handle.fingerprint})
    values = read_gguf(file, params, scheme)
    errors = {}
    with torch.no_grad():
        for name, p in params.items():
            if name in quantized:
                errors[name] = relative_error(values[name], p.detach().cpu().numpy())
            p.copy_(torch.from_numpy(values[name]))  # a tied parameter is one tensor: its other name follows
    save_weights(net, tmp)
    handle.tokenizer.save_pretrained(tmp)
    record.update(quantized={n: list(params[n].shape) for n in quantized}, float32=kept, tied=tied,
                  parameters_quantized=sum(params[n].numel() for n in quantized),
                  parameters_float32=sum(params[n].numel() for n in kept), relative_error=errors,
                  relative_error_mean=float(np.mean(list(errors.values()))) if errors else 0.0,
                  relative_error_max=max(errors.values(), default=0.0),
                  gguf_bytes=file.stat().st_size, seconds=round(time.perf_counter() - t0, 1))
    (tmp / TRAINING_FILE).write_text(json.dumps(record, indent=2))


quantize = quantize_model  # lmaudit.quantize
