# `make test` and `make demo` set everything up from a clean clone.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
RUNTIME_STAMP := $(VENV)/.runtime-stamp

.PHONY: install lint types imports test unit bench clean demo

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

# The demo needs trio-ccm, its runtime dependencies and the test tooling's (the `testing`
# extra), not the test extra (about 20 s less from a clean clone); with the test extra
# installed this is a no-op install.
$(RUNTIME_STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[testing]'
	touch $(RUNTIME_STAMP)

lint: install
	$(BIN)/ruff check src tests bench tools
	$(BIN)/ruff format --check src tests bench tools

types: install
	$(BIN)/mypy

imports: install
	$(BIN)/lint-imports

test: lint types imports
	$(BIN)/python -m pytest

# Testbed + CCM in one process: 50 Nodes and 3 LoadBalancer Services, a summary, then exit.
demo: $(RUNTIME_STAMP)
	$(BIN)/trio-ccm demo --exit-when-done

bench: install
	$(BIN)/python bench/apiserver.py

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .import_linter_cache
