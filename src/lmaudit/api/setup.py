"""What the command line sets up before a job: pretrained models imported from GGUF files, the DP-SGD defaults, and
extraction's step counts. Light: the constants come from :mod:`lmaudit.models.defaults`, and each function imports
its module (and torch) when first called.

Not in ``lmaudit.api``'s ``__all__``: import them as ``from lmaudit.api.setup import ...``.
"""

from __future__ import annotations

from lmaudit.models.defaults import DP_DELTA as DP_DELTA
from lmaudit.models.defaults import DP_MAX_GRAD_NORM as DP_MAX_GRAD_NORM
from lmaudit.models.defaults import NAMED
from lmaudit.utils import deferred

NAMED_MODELS = NAMED  # {name: (package, file, what)}: the pretrained models found in installed packages

gguf_file = deferred("lmaudit.models.gguf", "gguf_file")  # the GGUF file a source names (None for a model folder)
import_gguf = deferred("lmaudit.models.gguf", "import_gguf")  # dequantize a GGUF file into a model folder
source_record = deferred("lmaudit.models.sources", "source_record")  # what a folder imported from a GGUF records
parse_steps = deferred("lmaudit.extraction.masks", "parse_steps")  # extraction step counts from "1,2,4,max"
