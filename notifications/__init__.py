"""Webhooks and question emails about runs (R-NT1–R-NT3). It depends on `runs` and `runs` never
imports it: a run's changes reach it through `runs.hooks`, connected in `receivers.py` when the
app is ready. A status change writes its deliveries in the transaction of the change
(`hooks.status_changed`); admission lets it refuse a callback URL before anything is written
(`hooks.checking_callback`) and register it with the new run (`hooks.callback_requested`); the
supervisor's tick offers due deliveries and question emails (`hooks.supervisor_jobs`).
Its tables keep the names they had in `runs` (`runs_webhook*`).

| module | role |
|---|---|
| `models.py` | `WebhookEndpoint` (a user's, or one run's `callback_url`), `WebhookDelivery` (the outbox, one row per event and endpoint), `WebhookAttempt`, `QuestionEmail` (the emails' outbox, one row per question), `OutboxEnds` (how many rows of each outbox ended in each state, for GET /metrics) |
| `outbox.py` | what both outboxes share: leasing a due row under a row lock, the retry schedule, finding the rows due, counting each row's end |
| `services.py` | registering endpoints, the deliveries a status change writes, leasing and sending them with retries, redelivery |
| `receivers.py` | what the app does when `runs` calls: the signal receivers and the supervisor's jobs |
| `destinations.py`, `transport.py` | where a webhook may go (public addresses, checked after DNS) and the one pinned HTTP POST |
| `signing.py` | the signature, event and delivery headers |
| `sender.py` | the sender threads of a worker process: a slow receiver or mail server holds neither a cluster worker nor other rows |
| `email.py` | question emails: a row written after the grace period, sent at least once, skipped if answered first |
| `task_queue.py`, `tasks.py` | deliveries and emails handed to the django-q2 cluster, and its entry points |
| `api.py`, `urls.py` | `/v1/webhooks`; the routes of the API and of the settings page's webhook forms |
| `views.py`, `forms.py` | the settings page's webhooks section, registered in `accounts.settings_page` when the app is ready |
| `admin.py` | endpoints and the delivery log with its attempts and a "redeliver" action |
"""
