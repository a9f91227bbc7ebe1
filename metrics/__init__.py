"""GET /metrics (R-OP11): the service's figures in Prometheus' text format, for a staff token or
a scrape address (SKILLRUNNER_METRICS_ALLOW). Read from the shared database at each scrape, so any
web answers for every process on every machine; no other app imports this one.

| module | role |
|---|---|
| `collector.py` | `ServiceCollector`: each figure, one query: a few counter rows, or an aggregate on an index |
| `receivers.py`, `models.py` | what grows with every run, counted as it happens: turn durations, failures by code, the relay's tokens and refusals |
| `views.py` | `MetricsView`: who may scrape, and the scrape itself |
"""
