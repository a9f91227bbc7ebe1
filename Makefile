# Skill Runner: `make run` serves web + worker on the embedded default; `make test` runs everything.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PORT ?= 8000
ENGINE_CLI_DIR := engines/cli
# Run a second time on PostgreSQL + Redis (SCALEOUT_DATABASE_URL, SCALEOUT_REDIS_URL: given, or
# private throwaway servers that scripts/test_services.py starts and stops).
SCALEOUT_TESTS := tests/api tests/interactive tests/live tests/real_engines/test_service_real_engines.py \
	tests/sandbox tests/notifications tests/runs/test_fair_share.py tests/runs/test_retention.py \
	tests/runs/test_thread_connections.py tests/runs/test_seed_history.py tests/ui/test_pages.py \
	tests/upstream/test_streams.py tests/upstream/test_plugin_contract.py tests/upstream/test_reply_files.py \
	tests/test_wakeups.py

.PHONY: run test test-suites lint engines system-packages sandbox bench venv test-venv clean

# The service's own dependencies only; the test tools go in with `make test` (own stamp each).
venv: $(VENV)/.installed-service
test-venv: $(VENV)/.installed-test

$(VENV)/.installed-service: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -e .
	touch $@

$(VENV)/.installed-test: $(VENV)/.installed-service
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[test]'
	touch $@

run: venv engines sandbox
	$(PY) manage.py serve --port $(PORT)

engines: $(ENGINE_CLI_DIR)/node_modules/.installed

$(ENGINE_CLI_DIR)/node_modules/.installed: $(ENGINE_CLI_DIR)/package.json $(ENGINE_CLI_DIR)/package-lock.json
	cd $(ENGINE_CLI_DIR) && npm ci --no-audit --no-fund --loglevel=error
	touch $@

# What the suite runs besides Python and Node (bubblewrap, Chromium, PostgreSQL, Redis), via apt.
system-packages:
	@scripts/system-packages.sh

# What `make run` needs for the agent sandbox (SPEC §11): bubblewrap, and socat for
# SKILLRUNNER_SANDBOX_NETWORK=provider (prlimit/setpriv come with util-linux).
sandbox:
	@scripts/system-packages.sh --sandbox-only

test: test-venv engines system-packages lint
	$(PY) scripts/test_services.py $(MAKE) --no-print-directory test-suites

# Both passes run on two processes, one test module each at a time: every test has its own data
# dir, database and ports, and each process its own Redis database (tests/settings.py).
test-suites:
	$(PY) -m pytest -n 2 --dist loadscope tests
	DATABASE_URL=$(SCALEOUT_DATABASE_URL) REDIS_URL=$(SCALEOUT_REDIS_URL) $(PY) -m pytest -n 2 --dist loadscope $(wildcard $(SCALEOUT_TESTS))

lint: test-venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

# What a user sees, from outside: both configurations at caps 1 and 16 (docs/benchmarks.md).
bench: test-venv
	$(PY) -m bench

clean:
	rm -rf $(VENV) $(ENGINE_CLI_DIR)/node_modules data test-output
