"""The probes (`views.py`, routed by `urls.py`): `/healthz`, `/readyz`, `/v1/system/ping`; and the
checks `/readyz` walks (`readiness.py`): the database's, and those the apps register from their
AppConfig.ready."""
