# The README's two commands: `make run` and `make test`. Both create or reuse .venv.
PYTHON ?= python3.11
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: run test bench lint docs clean venv

venv: $(STAMP)

$(STAMP): pyproject.toml
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "make: $(PYTHON) not found (set PYTHON=...)" >&2; exit 2; }
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	@touch $(STAMP)

run: $(STAMP)
	$(BIN)/hccl-bench sweep

# One pytest worker per core (pytest-xdist), at most 4 (a container may report its host's cores, and each
# worker holds its own Numba kernels and up to a 1 GiB point): the suite in about half the time on CI's two
# cores. Plain `pytest` runs it in one process.
test: $(STAMP)
	$(BIN)/python -m pytest -n auto --maxprocesses 4

bench: $(STAMP)
	$(BIN)/python -m bench

lint: $(STAMP)
	$(BIN)/ruff check hcclsim algorithms topologies tests bench docs

# Regenerate the generated blocks of docs/*.md from the code (tests/test_docs.py fails when they drift).
docs: $(STAMP)
	$(BIN)/python docs/generate.py

clean:
	rm -rf $(VENV) build *.egg-info
