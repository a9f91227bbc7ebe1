# Skill Runner: `make run` serves web + worker on the embedded default; `make test` runs everything.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PORT ?= 8000
ENGINE_CLI_DIR := engines/cli
CHROMIUM ?= /usr/bin/chromium
# The scale-out configuration the suite also runs against (both services run on this machine kind).
SCALEOUT_DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/postgres
SCALEOUT_REDIS_URL ?= redis://127.0.0.1:6379/0
SCALEOUT_TESTS := tests/api tests/interactive tests/live tests/real_engines/test_service_real_engines.py

.PHONY: run test lint engines browser bench venv clean

venv: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[test]'
	touch $@

run: venv
	$(PY) manage.py serve --port $(PORT)

engines: $(ENGINE_CLI_DIR)/node_modules/.installed

$(ENGINE_CLI_DIR)/node_modules/.installed: $(ENGINE_CLI_DIR)/package.json $(ENGINE_CLI_DIR)/package-lock.json
	cd $(ENGINE_CLI_DIR) && npm ci --no-audit --no-fund --loglevel=error
	touch $@

browser:
	@test -x $(CHROMIUM) || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; }

test: venv engines browser lint
	$(PY) -m pytest tests
	DATABASE_URL=$(SCALEOUT_DATABASE_URL) REDIS_URL=$(SCALEOUT_REDIS_URL) $(PY) -m pytest $(wildcard $(SCALEOUT_TESTS))

lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

bench: venv
	$(PY) -m tests.bench

clean:
	rm -rf $(VENV) $(ENGINE_CLI_DIR)/node_modules data test-output
