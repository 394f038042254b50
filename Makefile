# The two set-up commands are `make demo` and `make test`; both create the
# environment first. Everything else here is for development.

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
INSTALLED := $(VENV)/.installed
DEMO_SCENARIO ?= hgx-h200
DEMO_PORT ?= 9478

.PHONY: env system-deps demo test lint docs check-docs soak clean grafana bench frontend frontend-deps

$(INSTALLED): pyproject.toml setup.py
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' || \
		{ echo "Python 3.11 or newer is required (set PYTHON=...)"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	touch $@

env: $(INSTALLED)

system-deps:
	./tools/system-deps.sh

# Without Prometheus (not installable here) the demo still runs, and says so.
demo: env
	@./tools/system-deps.sh demo || echo "make demo: system packages missing (see above); the demo runs with what it finds"
	$(VENV)/bin/ray-accel demo --scenario $(DEMO_SCENARIO) --port $(DEMO_PORT)

lint: env
	$(VENV)/bin/ruff check .

docs: env
	$(VENV)/bin/ray-accel catalog > docs/metrics.md

# Regenerates grafana/generated/ (boards, provider, alert rules and their tests) and
# docs/alerts.md from grafana/; a test fails when they are out of date.
grafana: env
	$(PY) -m ray_accel.grafana.generate

# The Accelerators tab (frontend/): node modules from the lock file, and the bundle built
# into dashboard_module/static/ (committed, so installing the package needs no Node.js;
# a test fails when it is older than its sources).
FRONTEND_DEPS := frontend/node_modules/.package-lock.json
$(FRONTEND_DEPS): frontend/package-lock.json
	cd frontend && npm ci --no-audit --no-fund
	touch $@

frontend-deps: system-deps $(FRONTEND_DEPS)

frontend: env frontend-deps
	cd frontend && npm run build
	$(PY) -m ray_accel.dashboard_module.frontend_build --write

# Two test files run at a time, each on its own worker (a module's Ray cluster and
# agents stay on one worker); TEST_WORKERS=0 runs the suite in this process.
TEST_WORKERS ?= 2
test: env system-deps lint frontend-deps
	cd frontend && npm test
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile

# Rewrites docs/benchmarks.md: collection cost beside Ray's own provider, scrape cost,
# memory under process churn, the smallest sampling interval under 1% of a core.
bench: env system-deps
	$(PY) bench/run.py

soak: env system-deps
	$(PY) -m pytest -m slow -rP

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache frontend/node_modules
