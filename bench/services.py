"""How both benchmarks configure the service they start (also in docs/benchmarks.md)."""

from __future__ import annotations

import os
from pathlib import Path

from tests.support.service_processes import ServiceProcesses

from .httpclient import Api

CONFIGS = {
    "embedded": {"DATABASE_URL": "", "REDIS_URL": ""},
    "scaleout": {
        "DATABASE_URL": os.environ.get("SCALEOUT_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres"),
        "REDIS_URL": os.environ.get("SCALEOUT_REDIS_URL", "redis://127.0.0.1:6379/0"),
    },
}
# What the benchmarks change from the defaults, and why: the production settings module, and
# per-user rate limits high enough for one user to submit 1,000+ runs (the defaults, 120/min and
# 240/min, would throttle the bench itself). The engine (SKILLRUNNER_CODEX_BIN) and the slot cap
# are each bench's own.
BENCH_ENV = {
    "DJANGO_SETTINGS_MODULE": "skillrunner.settings",
    "SKILLRUNNER_RATE_RUN_CREATE": "100000/min",
    "SKILLRUNNER_RATE_REPLY": "100000/min",
    # (g) delivers webhooks to a receiver in the bench process, on 127.0.0.1 (R-NT2 refuses it otherwise).
    "SKILLRUNNER_WEBHOOK_ALLOW_PRIVATE": "true",
}


def bench_service(data_dir: Path, config: str, env: dict[str, str]) -> ServiceProcesses:
    """A ServiceProcesses (fresh data dir, throwaway PostgreSQL database and queue name on scaleout)
    with the production settings and the bench's environment; not started."""
    service = ServiceProcesses(data_dir, env={**CONFIGS[config], **env})
    service.env.update(BENCH_ENV)  # ServiceProcesses sets tests.settings itself; the bench runs the real settings
    return service


def wait_ready(service: ServiceProcesses, token: str) -> None:
    api = Api("127.0.0.1", service.port, token)
    service.wait_until(lambda: api.get("/v1/system/readyz")[0] == 200, 60, "the worker to report ready")
    api.close()


def loadavg() -> str:
    """1/5/15-minute load averages: the machine may be shared, and the figures depend on it."""
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])
