# The two set-up commands (README): `make demo` and `make test`. Both create .venv on a fresh clone.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
DEV_STAMP := $(VENV)/.installed-dev
# `make test` also installs the verify extra (torch==2.13.0, CPU). Where pip's configuration offers no CPU
# wheel of torch (it would fetch the multi-GB CUDA build), pass TORCH_INDEX=https://download.pytorch.org/whl/cpu
TORCH_INDEX ?=
PIP_TORCH := $(if $(TORCH_INDEX),--extra-index-url $(TORCH_INDEX),)

.PHONY: demo test bench lint docs clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/python -m pip install -q -e . transformers==5.9.0
	touch $@

$(DEV_STAMP): $(BIN)/python pyproject.toml
	$(BIN)/python -m pip install -q -e '.[dev,verify]' $(PIP_TORCH)
	touch $@ $(STAMP)

# `make demo`: a one-minute tour (findings by family, one fix as a diff, what to run next);
# `make demo FULL=1`: every finding and every fix. npu-lint exits 1 on findings (expected: the examples are
# GPU-only), so the recipe accepts 1 and fails only on 2 (usage or internal error).
demo: $(STAMP)
ifeq ($(FULL),)
	@$(BIN)/python -m npu_lint.demo examples/
else
	@echo "== npu-lint check examples/"
	@$(BIN)/npu-lint check --no-cache examples/ || [ $$? -eq 1 ]
	@echo
	@echo "== npu-lint check --diff --unsafe-fixes examples/  (the fixes, as a diff; nothing is written)"
	@$(BIN)/npu-lint check --no-cache --diff --unsafe-fixes examples/ || [ $$? -eq 1 ]
endif

test: $(DEV_STAMP)
	$(BIN)/python -m pytest -q

bench: $(STAMP)
	$(BIN)/python bench/run.py

lint: $(DEV_STAMP)
	$(BIN)/ruff check npu_lint tests bench
	$(BIN)/ruff format --check npu_lint tests bench

docs: $(STAMP)
	$(BIN)/python -m npu_lint.docs

clean:
	rm -rf $(VENV) .npu_lint_cache .pytest_cache
