# The two commands a newcomer needs: `make demo` and `make test`.
# Each creates .venv and installs what it needs by itself.
PYTHON ?= python3
VENV   ?= .venv
BIN     = $(VENV)/bin
STAMP   = $(VENV)/.installed-$(shell cksum pyproject.toml | cut -d' ' -f1)
PYTEST_ARGS ?=

.PHONY: demo demo-fleet test test-fast lint typecheck unit bench clean

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "tether needs Python 3.11+"'
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --disable-pip-version-check -e '.[dev]'
	@rm -f $(VENV)/.installed-*
	@touch $@

demo: $(STAMP)
	$(BIN)/python demo/story.py

# Fleet mode on one machine: a throw-away PostgreSQL (Debian's postgresql) and three hosts.
demo-fleet: $(STAMP)
	$(BIN)/python demo/fleet.py

test: lint typecheck unit

# The inner loop: the pure tests (no daemon, no processes), in seconds.
test-fast: $(STAMP)
	$(BIN)/pytest -q tests/unit $(PYTEST_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check src tests bench demo
	$(BIN)/lint-imports --no-cache

typecheck: $(STAMP)
	$(BIN)/mypy

unit: $(STAMP)
	$(BIN)/pytest -n 2 --dist loadgroup $(PYTEST_ARGS)

bench: $(STAMP)
	$(BIN)/python -m bench $(BENCH_ARGS)

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
