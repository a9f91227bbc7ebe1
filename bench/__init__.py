"""Benchmarks of the running service (`make bench`, i.e. `python -m bench`).

Not tests: nothing here is collected by pytest. The benchmark starts daphne + `manage.py worker`
through tests.support.service_processes, drives the /v1 API over HTTP and the run websocket like an
API client would, and uses a /bin/sh stand-in for `codex exec --json` that answers at once and
stamps its start and exit times into the run directory. See docs/benchmarks.md.
"""
