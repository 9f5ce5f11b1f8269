# Two commands a user needs: `make demo` and `make test`. Both build the virtual
# environment first; nothing has to be installed by hand beyond Python 3.10+ and make.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# The CPU build of torch. On the project's machines `torch==2.13.0` resolves to a CPU wheel
# on local disk; elsewhere pass TORCH_PIP_ARGS="--index-url https://download.pytorch.org/whl/cpu".
TORCH_SPEC ?= torch==2.13.0
TORCH_PIP_ARGS ?=
STAMP := $(VENV)/.installed

.PHONY: venv demo test test-fast lint attack bench clean

venv: $(STAMP)

# setup.py and every C source and header of the kernels: a changed kernel is rebuilt by the editable install.
# PYTHON's version is checked first: with Python 3.9 pip only said "Cannot install torch==2.13.0
# because these package versions have conflicting dependencies", after making a 3.9 .venv.
$(STAMP): ckptzip/pyproject.toml ckptzip/setup.py $(wildcard ckptzip/src/ckptzip/kernels/*.c) $(wildcard ckptzip/src/ckptzip/kernels/*.h) \
		rlcheck/pyproject.toml Makefile
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 10))' 2>/dev/null || { \
	  echo "make: PYTHON=$(PYTHON) is not Python 3.10 or newer ($$($(PYTHON) --version 2>&1));" \
	    "run: make $(or $(MAKECMDGOALS),venv) PYTHON=python3.11 (any 3.10+)" >&2; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet $(TORCH_PIP_ARGS) "$(TORCH_SPEC)"
	$(BIN)/python -m pip install --quiet -e "ckptzip[dev]" -e "rlcheck[dev]"
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/python demo.py

lint: $(STAMP)
	$(BIN)/ruff check ckptzip rlcheck demo.py
	$(BIN)/ruff format --check ckptzip rlcheck demo.py
	cd ckptzip && ../$(BIN)/mypy src
	cd rlcheck && ../$(BIN)/mypy src

# Whole suite, slow tests included (that is what CI runs), ckptzip's attack suite among them.
# Measured phases (cold caches, CPU seconds, which an idle machine needs as wall seconds):
# ruff under 1 s, mypy on ckptzip 48 s and on rlcheck 6 s. --durations lists the slowest tests
# so a test that grows past its bound shows in CI's log.
test: lint
	cd ckptzip && ../$(BIN)/python -m pytest -m "slow or not slow" --durations=25
	cd rlcheck && ../$(BIN)/python -m pytest -m "slow or not slow" --durations=25

# Quick loop while developing: no lint, no slow tests.
test-fast: $(STAMP)
	cd ckptzip && ../$(BIN)/python -m pytest -m "not slow" -q
	cd rlcheck && ../$(BIN)/python -m pytest -m "not slow" -q

# ckptzip's attack suite (format fuzzing, SIGKILLs inside saves, damaged chains, S3 faults
# against moto, odd tensors; ckptzip/tests/_attack.py) at ATTACK_SCALE times the size CI runs
# inside `make test`: more Hypothesis examples and more kills.
ATTACK_SCALE ?= 10
attack: $(STAMP)
	cd ckptzip && CKPTZIP_ATTACK_SCALE=$(ATTACK_SCALE) ../$(BIN)/python -m pytest -m attack -q

bench: $(STAMP)
	@set -e; for f in ckptzip/benchmarks/*.py rlcheck/benchmarks/*.py; do \
	  case $$f in */_*) continue;; esac; \
	  echo "== $$f"; $(BIN)/python $$f; done

clean:
	rm -rf $(VENV) .pytest_cache */.pytest_cache */.mypy_cache .ruff_cache
