# The two commands a newcomer needs: `make demo` and `make test`.
# Each creates .venv and installs what it needs by itself.
PYTHON ?= python3
VENV   ?= .venv
BIN     = $(VENV)/bin
STAMP   = $(VENV)/.installed-$(shell cksum pyproject.toml | cut -d' ' -f1)
PYTEST_ARGS ?=

.PHONY: demo demo-fleet test test-fast lint typecheck unit bench soak chaos agents test-agents screenshots clean

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

# The fleet's randomised host kills and stalls, the long version (make test runs 8 rounds):
# 200 rounds with a 3 s lease take about 11 minutes. CHAOS_SEED=N replays a failure.
CHAOS_ROUNDS ?= 200
chaos: $(STAMP)
	TETHER_FLEET_CHAOS_ROUNDS=$(CHAOS_ROUNDS) $(if $(CHAOS_SEED),TETHER_FLEET_CHAOS_SEED=$(CHAOS_SEED)) \
	    $(BIN)/pytest -q \
	    tests/e2e/test_fleet.py::test_randomised_host_kills_keep_every_lineage_on_one_host

# The real agent CLIs (Claude Code, Codex, Gemini CLI, Aider), pinned in .ci/agents.sh, into
# $(AGENTS_DIR); `make test` runs their tests (tests/realcli) when they are there.
# `make test-agents LATEST=1` installs each CLI's newest release into a scratch directory
# and runs the same tests against it, so a release that breaks tether is seen the day it ships.
AGENTS_DIR ?= $(or $(TETHER_AGENTS_DIR),/opt/tether-agents)
agents:
	bash .ci/agents.sh $(AGENTS_DIR)

# The scratch directory (about 1.6 GB) is removed afterwards unless KEEP=1.
test-agents: $(STAMP)
ifeq ($(LATEST),1)
	@set -e; scratch=$$(mktemp -d /tmp/tether-agents-latest.XXXXXX); \
	if [ "$(KEEP)" = 1 ]; then echo "keeping $$scratch"; else trap 'rm -rf "$$scratch"' EXIT; fi; \
	bash .ci/agents.sh --latest $$scratch; \
	echo "testing the newest releases: $$(cat $$scratch/.versions)"; \
	TETHER_AGENTS_DIR=$$scratch TETHER_REQUIRE_AGENTS=1 $(BIN)/pytest -n 2 --dist loadgroup \
	    tests/realcli $(PYTEST_ARGS)
else
	bash .ci/agents.sh $(AGENTS_DIR)
	TETHER_AGENTS_DIR=$(AGENTS_DIR) TETHER_REQUIRE_AGENTS=1 $(BIN)/pytest -n 2 --dist loadgroup tests/realcli $(PYTEST_ARGS)
endif

# docs/screenshots/*.png: the dashboard's views as its browser tests leave them (chromium).
screenshots: $(STAMP)
	TETHER_SCREENSHOTS=docs/screenshots $(BIN)/pytest -q tests/e2e/test_web.py

bench: $(STAMP)
	$(BIN)/python -m bench $(BENCH_ARGS)

# Ten minutes of mixed load on one daemon (bench/soak.py): its RSS, store and health p99
# at the start, the peak and the end, and whether they stay bounded and flat.
SOAK_SECONDS ?= 600
soak: $(STAMP)
	$(BIN)/python -m bench --only soak --soak-seconds $(SOAK_SECONDS) $(BENCH_ARGS)

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
