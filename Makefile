# zae-limiter: one-command setup, demo and tests.
#   make demo   installs what the demo needs, runs it against an embedded DynamoDB Local
#               (PORT=8123 picks its port; default: a free one)
#   make test   installs everything (Python deps, Java 17, the DynamoDB Local jar), then lint,
#               type checks and the whole test suite
# `install` is idempotent and takes well under a second when nothing changed (stamp files).

SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= $(shell command -v python3.11 2>/dev/null || command -v python3 2>/dev/null)
VENV ?= .venv
BIN := $(VENV)/bin
PY := $(BIN)/python
STAMPS := $(VENV)/.zae-stamps
NPM_STAMP := node_modules/.zae-stamp
PYTEST_ARGS ?= -q
PORT ?=
# pytest-xdist: this many worker processes, each taking whole test modules (a module's tests
# share its DynamoDB Local); 0 runs in this process (docs/contributing.md, "How the tests run").
PYTEST_WORKERS ?= 2
XDIST := -n $(PYTEST_WORKERS) --dist loadfile

.PHONY: help install install-runtime java node demo test lint pytest bench soak sim constraints clean

help:
	@echo "make demo      install what the demo needs and run it (PORT=8123: DynamoDB Local's port)"
	@echo "make test      install everything, then make lint and pytest"
	@echo "make install   create $(VENV), install Python deps (all extras), npm tools and Java 17"
	@echo "make install-runtime  the same with the runtime package only (what the demo needs)"
	@echo "make java      install Java 17 if java is missing (Debian's openjdk-17-jre-headless)"
	@echo "make node      install the npm tools (DynamoDB Local, the CDK CLI); check the Node.js"
	@echo "make lint      ruff check, ruff format --check and mypy"
	@echo "make pytest    the tests only (PYTEST_ARGS=\"-x -k wire\")"
	@echo "make bench     run the benchmarks (BENCH_ARGS=--quick: a smoke run)"
	@echo "make soak      the large recorded history, checked (report in benchmarks/results/)"
	@echo "make sim       simulated histories from SEEDS seeds (MUTANT=name: a past bug put back)"
	@echo "make constraints  regenerate constraints.txt from a clean venv"
	@echo "make clean     remove the caches of pytest, mypy, ruff and hypothesis"
	@echo "make help      this list"

# --- installation ------------------------------------------------------------------------

install: $(STAMPS)/python-all node java

install-runtime: $(STAMPS)/python-runtime node java

$(PY):
	bash scripts/make-venv.sh "$(PYTHON)" "$(VENV)"

# versioning.py holds the package's version: a new one must reach the installed metadata.
$(STAMPS)/python-all: pyproject.toml constraints.txt runtime/zae_limiter/versioning.py | $(PY)
	$(PY) -m pip install -q -c constraints.txt -e '.[dev,lambda,cdk,local,loadtest]'
	@mkdir -p $(STAMPS) && touch $@ $(STAMPS)/python-runtime

$(STAMPS)/python-runtime: pyproject.toml constraints.txt runtime/zae_limiter/versioning.py | $(PY)
	$(PY) -m pip install -q -c constraints.txt -e .
	@mkdir -p $(STAMPS) && touch $@

node: $(NPM_STAMP)
	@bash scripts/check-node.sh

$(NPM_STAMP): package.json package-lock.json
	bash scripts/ensure-node-deps.sh
	@touch $@

java:
	@bash scripts/ensure-java.sh

# --- running -----------------------------------------------------------------------------

demo: install-runtime
	$(PY) -m zae_limiter.demo $(if $(PORT),--port $(PORT))

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

pytest: install
	$(BIN)/pytest $(XDIST) $(PYTEST_ARGS)

test: lint
	$(BIN)/pytest $(XDIST) $(PYTEST_ARGS)

# Installs the runtime, Java and DynamoDB Local, and the bench extra (matplotlib); the benchmark
# itself makes benchmarks/.venv-0.17.0 for the earlier implementation. BENCH_ARGS=--quick: smoke run.
bench: install-runtime $(STAMPS)/python-bench
	$(PY) -m benchmarks.run $(BENCH_ARGS)

$(STAMPS)/python-bench: pyproject.toml constraints.txt | $(PY)
	$(PY) -m pip install -q -c constraints.txt -e '.[bench]'
	@mkdir -p $(STAMPS) && touch $@

# The large history (tests/support/history/soak.py; docs/contributing.md): about 5 minutes,
# exits 1 on a violation. SOAK_ARGS="--seed 7 --ops 10 --logs /tmp/history" for another run,
# SOAK_ARGS=--holds for the concurrency-hold history (report soak-holds-<date>.md),
# SOAK_ARGS=--regions for the history across three simulated Regions (soak-regions-<date>.md).
soak: install
	PYTHONPATH=tests $(PY) -m support.history.soak $(SOAK_ARGS)

# The deterministic simulation (tests/support/sim/; docs/contributing.md): SEEDS simulated
# histories, checked, on every core; prints operations, operations/s, a digest of all histories
# and the first failing seed, shrunk and printed as a test. MUTANT=name (make sim SIM_ARGS=--list)
# runs a copy of the library with one past bug put back. Exits 1 when a seed failed.
SEEDS ?= 200
sim: install
	PYTHONPATH=tests $(PY) -m support.sim --seeds $(SEEDS) $(if $(MUTANT),--mutant $(MUTANT)) $(SIM_ARGS)

# --- maintenance -------------------------------------------------------------------------

# Regenerate the lock: a throw-away venv with every extra, then pip freeze (minus the project).
constraints:
	rm -rf .constraints-venv
	"$(PYTHON)" -m venv .constraints-venv
	.constraints-venv/bin/pip install -q -e '.[dev,lambda,cdk,local,loadtest]'
	{ echo "# Pinned versions of every Python package zae-limiter installs with all extras (dev, lambda, cdk, local, loadtest)."; \
	  echo "# Regenerate: make constraints   (a clean venv, pip install -e '.[dev,lambda,cdk,local,loadtest]', pip freeze)."; \
	  .constraints-venv/bin/pip freeze --exclude-editable; } > constraints.txt
	rm -rf .constraints-venv

clean:
	rm -rf .pytest_cache .mypy_cache .ruff_cache .hypothesis
