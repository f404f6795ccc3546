# dtlab: `make demo` (install + quickstart) and `make test` are all a fresh machine needs.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
export RAY_AUTH_MODE ?= disabled
export PYTHONUNBUFFERED := 1

.PHONY: install services demo test bench ui ray-up ray-down clean

install: $(STAMP)

# torch first, pinned: pip then takes the CPU build on disk instead of a multi-GB CUDA build.
$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[test]'
	touch $(STAMP)

# PostgreSQL, Prometheus and Chromium for the integration tests (apt, root; .ci/run calls it).
# Without them those tests skip, saying why.
services:
	bash infra/install_services.sh

demo: install
	$(VENV)/bin/dtlab run experiment=error_feedback
	@echo
	@echo "MLflow UI:      $(VENV)/bin/dtlab ui        (http://127.0.0.1:5000)"
	@echo "Ray dashboard:  make ray-up, then RAY_ADDRESS=127.0.0.1:6379 $(VENV)/bin/dtlab run experiment=error_feedback cluster=remote"
	@echo "                and open http://127.0.0.1:8265 (the embedded session's dashboard lives only while a run does)"
	@echo "Compare runs:   $(VENV)/bin/dtlab compare"

test: install
	$(PY) -m pytest -q -m "not slow" --timeout=900 tests

bench: install
	$(PY) -m pytest -q -m slow --timeout=3600 tests
	for f in benchmarks/bench_*.py; do echo "== $$f"; $(PY) $$f || exit 1; done

ui: install
	$(VENV)/bin/dtlab ui

ray-up: install
	$(VENV)/bin/ray start --head --node-ip-address=127.0.0.1 --dashboard-host=127.0.0.1 --port=6379 --include-dashboard=true

ray-down:
	-$(VENV)/bin/ray stop

clean:
	rm -rf runs .pytest_cache
