"""GET /metrics (R-OP11): the service's figures in Prometheus' text format, for a staff token or
a scrape address (SKILLRUNNER_METRICS_ALLOW). Read from the shared database at each scrape, so any
web answers for every process on every machine; no other app imports this one.

| module | role |
|---|---|
| `collector.py` | `ServiceCollector`: each figure, one aggregate query on an index |
| `views.py` | `MetricsView`: who may scrape, and the scrape itself |
"""
