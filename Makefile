# The two commands a newcomer needs: `make demo` and `make test`.
# Each creates .venv and installs what it needs by itself.
PYTHON ?= python3
VENV   ?= .venv
BIN     = $(VENV)/bin
STAMP   = $(VENV)/.installed-$(shell cksum pyproject.toml | cut -d' ' -f1)
PYTEST_ARGS ?=

.PHONY: demo demo-fleet test test-fast lint typecheck unit bench chaos clean

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

# The fleet's randomised host kills, the long version (make test runs 9 rounds): 200
# rounds with a 3 s lease take about 11 minutes. CHAOS_SEED=N replays a failure.
CHAOS_ROUNDS ?= 200
chaos: $(STAMP)
	TETHER_FLEET_CHAOS_ROUNDS=$(CHAOS_ROUNDS) $(if $(CHAOS_SEED),TETHER_FLEET_CHAOS_SEED=$(CHAOS_SEED)) \
	    $(BIN)/pytest -q --timeout 3600 \
	    tests/e2e/test_fleet.py::test_randomised_host_kills_keep_every_lineage_on_one_host

bench: $(STAMP)
	$(BIN)/python -m bench $(BENCH_ARGS)

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
