# The two set-up commands are `make demo` and `make test`; both create the
# environment first. Everything else here is for development.

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
INSTALLED := $(VENV)/.installed
DEMO_SCENARIO ?= hgx-h200
DEMO_PORT ?= 9478

.PHONY: env system-deps demo test lint docs check-docs soak clean

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

demo: env system-deps
	$(VENV)/bin/ray-accel demo --scenario $(DEMO_SCENARIO) --port $(DEMO_PORT)

lint: env
	$(VENV)/bin/ruff check .

docs: env
	$(VENV)/bin/ray-accel catalog > docs/metrics.md

test: env system-deps lint
	$(PY) -m pytest

soak: env system-deps
	$(PY) -m pytest -m slow

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
