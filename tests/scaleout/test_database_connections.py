"""A web process must not hoard PostgreSQL connections (R-OP2: several web processes on one
database, whose `max_connections` is shared by all of them and the workers; PostgreSQL's default
is 100). Django's documentation: "When using ASGI, persistent connections should be disabled"
(ref/databases, Persistent connections): under daphne every request runs in a context of its own,
so a kept-alive connection is a new connection per request that nobody reuses or closes. The web
process borrows from a pool instead (settings: SKILLRUNNER_WEB_DB_CONNECTIONS).

Four API clients making 120 requests must leave the web process with about as many connections as
there were requests in flight, not one per request."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

pytestmark = [pytest.mark.scaleout, pytest.mark.timeout(90)]

CLIENTS = 4
REQUESTS = 120


def test_a_web_process_keeps_no_more_connections_than_requests_in_flight(deployments):
    d = deployments(webs=1, workers=0).start()
    name = d.admin_database_url.rsplit("/", 1)[1]
    peak = {"held": 0}
    done = threading.Event()

    def sample() -> None:
        import psycopg

        with psycopg.connect(d.admin_database_url, autocommit=True, connect_timeout=5) as conn:
            for _ in range(3000):  # bounded: at most ~60 s
                held = conn.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()", (name,)
                ).fetchone()[0]
                peak["held"] = max(peak["held"], held)
                if done.wait(0.02):
                    return

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        with ThreadPoolExecutor(max_workers=CLIENTS) as pool:
            codes = list(pool.map(lambda i: d.request("GET", "/v1/jobs", ("alice", "bob")[i % 2])[0], range(REQUESTS)))
    finally:
        done.set()
        sampler.join(timeout=10)
    assert set(codes) == {200}
    assert peak["held"] <= CLIENTS + 2, (
        f"{CLIENTS} clients making {REQUESTS} requests made the web process hold up to {peak['held']} PostgreSQL connections"
    )
