# `make test` and `make demo` set everything up from a clean clone.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
RUNTIME_STAMP := $(VENV)/.runtime-stamp

.PHONY: install lint types imports test unit bench clean demo

# Two distributions from this repository, both editable: trio-ccm (src/) and its test world
# trio-ccm-testbed (testbed/), which the `testing` extra names. `-e .` beside `-e '.[test]'`:
# pip's resolver finds the local trio-ccm for trio-ccm-testbed's own requirement only when
# it is also given without extras.
$(STAMP): pyproject.toml testbed/pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e ./testbed -e . -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

# The demo needs trio-ccm, its runtime dependencies and the test world (the `testing`
# extra: trio-ccm-testbed), not the test extra (about 20 s less from a clean clone); with
# the test extra installed this is a no-op install.
$(RUNTIME_STAMP): pyproject.toml testbed/pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e ./testbed -e . -e '.[testing]'
	touch $(RUNTIME_STAMP)

lint: install
	$(BIN)/ruff check src testbed tests bench tools
	$(BIN)/ruff format --check src testbed tests bench tools

types: install
	$(BIN)/mypy

imports: install
	$(BIN)/lint-imports

# The suite on every core (PYTEST_WORKERS=0: in this process, serially): whole test modules
# per xdist worker, and the tests that share the OpenStack world on one worker
# (tests/helpers/sharing.py). The 25 slowest tests are listed at the end, to keep the run
# under its 20 minutes. mypy (a minute of one core from a clean clone) runs beside the suite
# at the lowest CPU priority, on the time the suite leaves a core idle (its tests wait on
# real OpenStack, moto and lease periods), rather than before it with the second core idle;
# its report follows the suite's, and either failing fails `make test`.
PYTEST_WORKERS ?= auto
TYPES_LOG := $(VENV)/mypy-beside-the-suite.log
test: lint imports
	@rm -f $(TYPES_LOG); nice -n 19 $(BIN)/mypy >$(TYPES_LOG) 2>&1 & types=$$!; \
	$(BIN)/python -m pytest -n $(PYTEST_WORKERS) --dist loadgroup --durations=25; suite=$$?; \
	wait $$types; typed=$$?; echo "mypy (beside the suite):"; cat $(TYPES_LOG); \
	test $$suite -eq 0 && test $$typed -eq 0

# Testbed + CCM in one process: 50 Nodes and 3 LoadBalancer Services, a summary, then exit.
demo: $(RUNTIME_STAMP)
	$(BIN)/trio-ccm demo --exit-when-done

bench: install
	$(BIN)/python bench/apiserver.py

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .import_linter_cache
