# Skill Runner: `make run` serves web + worker on the embedded default; `make test` runs everything.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PORT ?= 8000
ENGINE_CLI_DIR := engines/cli
# The second pass, on PostgreSQL + Redis (SCALEOUT_DATABASE_URL, SCALEOUT_REDIS_URL: given, or
# private throwaway servers that scripts/test_servers.py starts and stops), runs again what those
# can change; the first pass runs everything on the embedded default.
#   CLIENT_TESTS (the job API, interactive runs, the pages' forms, upstream's plugin and reply
#   files): what clients send, stored and read back. PostgreSQL enforces column lengths,
#     integer ranges and NUL-free text where SQLite takes anything, reorders jsonb keys, returns
#     rows in no set order without ORDER BY, aborts a transaction at its first error, and locks
#     rows where SQLite locks the file (replies, cancels and wait deadlines racing:
#     test_reply_races; slots: test_slots, test_claim).
#   tests/end_to_end: processes on one database: web and worker through the Redis broker and
#     channel layer, the web's connection pool, and how each stops with them (the shutdown
#     matrix), is killed, restarts or recovers.
#   tests/real_engines/test_service_real_engines.py: a real CLI's turn through the job API.
#   tests/notifications: webhook deliveries and question emails claimed under row locks (the shared
#     outbox), sender threads and their connections; tests/end_to_end/test_question_email_delivery.py: a
#     worker killed mid-send on PostgreSQL.
#   tests/runs/test_fair_share.py (fair share on real row locks), test_thread_connections.py
#     (connections a thread leaves open), test_seed_history.py (server-side on PostgreSQL),
#     test_retention.py (old runs found by date).
#   tests/upstream/test_streams.py: streams woken through the Redis channel layer.
#   tests/upstream/test_management_and_files.py: upstream's run pages counted and ordered by the
#     database, the status fast read's raw statement.
#   tests/processes/test_wakeups.py: a sticky run's worker woken through a Redis list instead of a socket.
#   tests/runs/test_migrations.py: data migrations on PostgreSQL.
#   tests/metrics: the scrape's aggregate queries (JSON keys, GROUP BY) read on PostgreSQL.
#   tests/scaleout/test_rolling_restart.py: two workers and two webs restarted one after the other
#     with runs in flight (R-OP10); here only, not in the first pass (ROLLING_RESTART below).
CLIENT_TESTS := $(addprefix tests/runs/test_,admission.py auto_run_lifecycle.py cancel.py claim.py \
	failures.py logs.py output_repair.py ownership.py result_cache.py runtime_options.py \
	status_fast_path.py status_payload.py uploads.py cancel_while_waiting.py completion_gates.py \
	history.py job_api_modes.py pending_payload.py question_kinds.py replies.py resume.py slots.py \
	sticky_wait.py strict_and_timeouts.py pages.py) \
	tests/accounts/test_auth.py tests/engines/test_engine_isolation.py tests/kernel/test_errors.py \
	tests/skillrunner/test_openapi.py tests/health/test_system.py \
	$(addprefix tests/skills/test_,skill_format.py skill_install.py upstream_layout_skills.py) \
	$(addprefix tests/real_engines/test_,real_engines_interactive.py sticky_claude.py) \
	tests/scaleout/test_reply_races.py tests/upstream/test_plugin_contract.py tests/upstream/test_reply_files.py
SCALEOUT_TESTS := $(CLIENT_TESTS) tests/end_to_end tests/real_engines/test_service_real_engines.py \
	tests/notifications tests/runs/test_fair_share.py tests/runs/test_thread_connections.py \
	tests/runs/test_seed_history.py tests/runs/test_retention.py tests/upstream/test_streams.py \
	tests/processes/test_wakeups.py tests/runs/test_migrations.py tests/metrics tests/scaleout/test_rolling_restart.py \
	tests/upstream/test_management_and_files.py tests/processes/test_orm_broker.py
ROLLING_RESTART := tests/scaleout/test_rolling_restart.py
# Of the real CLIs there, Codex stands for the resumable engines and Claude Code for sticky_process
# (engines/base.py: the only profile runs/ tells apart; nothing under runs/ looks at which engine
# it is, and engines/ never reaches the database): their turns take every path the others take
# to PostgreSQL and Redis. The other CLIs' turns through the job API run in the first pass.
# Of the shutdown matrix, each kind of process stopped by SIGTERM and by SIGKILL: what the
# database and the broker see of a stop. SIGINT takes SIGTERM's path in every process (one
# handler for both), and how the signal reaches the tree (its parent, its group, every process,
# once or twice) is the same code on both: those run in the first pass.
SCALEOUT_SELECT := (not real_engine or codex or claude) \
	and not (test_every_stop and (INT or group- or tree- or twice))
# Not again: the sandbox tests (tests/engines/test_red_team_fake.py and the like). On PostgreSQL
# they probe less than on SQLite (no database file is in reach), and their runs take the lifecycle
# CLIENT_TESTS cover there.

.PHONY: run test test-fast test-servers test-suites lint engines system-packages sandbox bench venv test-venv clean

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

# What `make run` needs for the agent sandbox (SPEC §11): bubblewrap, libseccomp for its seccomp
# filter, and socat for SKILLRUNNER_SANDBOX_NETWORK=provider (prlimit/setpriv come with util-linux).
sandbox:
	@scripts/system-packages.sh --sandbox-only

# pip, npm and apt at once (each waits mostly on downloads and disks), then lint beside the suites:
# seconds of CPU against their minutes. A lint failure fails `make test` once the suites end.
test:
	@$(MAKE) --no-print-directory --jobs=3 --output-sync=target test-venv engines system-packages
	@$(MAKE) --no-print-directory --jobs=2 lint test-servers

# The daily loop: every app's unit, API and orchestration tests with the scripted stand-in CLI on
# the embedded default, in a few minutes. What it leaves out, `make test` (CI) runs: the real
# engine CLIs, the browser, PostgreSQL + Redis (faults of backing services too), and the tests
# that start whole services as processes.
FAST_LEFT_OUT_MARKS := real_engine or browser or scaleout
FAST_LEFT_OUT_DIRS := tests/end_to_end tests/real_engines tests/browser tests/scaleout
test-fast: test-venv sandbox
	@echo "make test-fast leaves out: $(FAST_LEFT_OUT_DIRS), and tests marked $(FAST_LEFT_OUT_MARKS) (make test runs them)"
	@started=$$(date +%s); $(PY) -m pytest -n 2 --dist loadscope -q -m "not ($(FAST_LEFT_OUT_MARKS))" \
		$(addprefix --ignore=,$(FAST_LEFT_OUT_DIRS)) tests; status=$$?; \
	echo "make test-fast: $$(( $$(date +%s) - started )) s, exit $$status"; exit $$status

# Without the jobserver of `make test`: Python closes its pipes on the way to the inner make.
test-servers: test-venv
	MAKEFLAGS= $(PY) scripts/test_servers.py $(MAKE) --no-print-directory test-suites

# Both passes run at once, the first on three processes and the second on one
# (tests/support/scheduling.py: a module at a time, and each test sharing nothing with its module
# on its own): many tests wait on processes they started, so one pass alone leaves the cores idle
# a third of the time. Four processes keep two cores busy; split two and two, the second pass
# ended halfway through the first, which then left the cores idle a fifth of the time (a fresh
# clone's `make test`: 886 s split two and two, 796 s and 801 s three and one). Every test has its own data
# dir, database and ports, and each process its own Redis database (tests/settings.py). The second
# pass's output follows the first's; each pass's wall time is printed at the end.
EMBEDDED_PASS = $(PY) -m pytest -n 3 --dist loadscope --ignore=$(ROLLING_RESTART) tests
SCALEOUT_PASS = DATABASE_URL=$(SCALEOUT_DATABASE_URL) REDIS_URL=$(SCALEOUT_REDIS_URL) \
	$(PY) -m pytest -n 1 --dist loadscope -k "$(SCALEOUT_SELECT)" $(SCALEOUT_TESTS)
test-suites:
	@started=$$(date +%s); scaleout=$$(mktemp -d); \
	echo '$(SCALEOUT_PASS) (output below, once it ends)'; \
	( $(SCALEOUT_PASS) > $$scaleout/log 2>&1; echo $$? > $$scaleout/status; \
		echo $$(( $$(date +%s) - started )) > $$scaleout/seconds ) & \
	echo '$(EMBEDDED_PASS)'; $(EMBEDDED_PASS); embedded=$$?; embedded_seconds=$$(( $$(date +%s) - started )); \
	wait; cat $$scaleout/log; status=$$(cat $$scaleout/status); \
	echo "make test: embedded default (SQLite, ORM broker): $$embedded_seconds s, exit $$embedded"; \
	echo "make test: PostgreSQL + Redis: $$(cat $$scaleout/seconds) s, exit $$status"; \
	echo "make test: both passes: $$(( $$(date +%s) - started )) s"; \
	rm -rf $$scaleout; [ $$embedded -eq 0 ] && [ $$status -eq 0 ]

lint: test-venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

# What a user sees, from outside: both configurations at caps 1 and 16 (docs/benchmarks.md).
bench: test-venv
	$(PY) -m bench

clean:
	rm -rf $(VENV) $(ENGINE_CLI_DIR)/node_modules data test-output
