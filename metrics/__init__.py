"""GET /metrics (R-OP11): the service's figures in Prometheus' text format, for a staff token or
a scrape address (SKILLRUNNER_METRICS_ALLOW). Read from the shared database at each scrape, so any
web answers for every process on every machine; no other app imports this one.

| module | role |
|---|---|
| `collector.py` | `ServiceCollector`: two statements, every counter row (UNION ALL) and the service as it stands (one row of index counts), and a function per family building it from their rows |
| `receivers.py`, `models.py` | what grows with every run, counted as it happens: turn durations, failures by code, the relay's tokens and refusals (how deliveries and emails ended: `notifications.models.OutboxEnds`) |
| `views.py` | `MetricsView`: who may scrape, and the scrape itself |
"""
