# The two commands a newcomer needs (see README.md):
#   make demo    set up .venv and run fleetscope on this machine (SQLite); Ctrl-C stops it
#   make test    run the whole test suite in parallel (needs PostgreSQL on 127.0.0.1 for the storage tests)
#   make test-fast  the unit and in-process tests only (no processes, servers, browser or PostgreSQL): a quick answer
PYTHON ?= python3
VENV ?= .venv
DURATION ?=
DEMO_ARGS ?=

$(VENV)/.installed: pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	@echo 'Setting up $(VENV): the first time downloads a few hundred MB (torch included) and takes a few minutes.'
	$(VENV)/bin/pip install --progress-bar on --upgrade pip
	$(VENV)/bin/pip install --progress-bar on -c constraints.txt -e '.[all,dev,torch]'
	touch $@

# Parallel workers for `make test`: most tests wait on processes, so more workers than cores overlap
# them. On 2 cores 4 workers left the CPU idle a third of the time and 6 keep it busy (docs/benchmarks.md).
TEST_WORKERS ?= 6

.PHONY: setup demo test test-fast lint bench
setup: $(VENV)/.installed

demo: setup
	$(VENV)/bin/fleetscope demo --dir fleetscope-demo $(if $(DURATION),--duration $(DURATION)) $(DEMO_ARGS)

test: setup
	@start=$$(date +%s); $(VENV)/bin/python -m pytest -q -n $(TEST_WORKERS) --dist loadgroup; rc=$$?; \
	  echo "make test: $$(( $$(date +%s) - start )) s"; exit $$rc

test-fast: setup
	@start=$$(date +%s); $(VENV)/bin/python -m pytest -q -n 2 -m 'not (processes or server or browser or postgresql)'; rc=$$?; \
	  echo "make test-fast: $$(( $$(date +%s) - start )) s"; exit $$rc

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports
	@# mypy cannot follow setuptools' package-dir mapping: give it a fleetscope/ tree of links.
	@mkdir -p build/typecheck/fleetscope
	@for p in agent cli collector dashboard proto; do ln -sfn ../../../$$p build/typecheck/fleetscope/$$p; done
	$(VENV)/bin/mypy
	$(VENV)/bin/vermin --target=3.10- --no-tips --violations --eval-annotations --backport typing agent proto cli
	$(VENV)/bin/python -m fleetscope.proto.generate --check

bench: setup
	$(VENV)/bin/python benchmarks/bench_ingest.py ingest --seconds 30
	$(VENV)/bin/python benchmarks/bench_ingest.py agent --seconds 60
