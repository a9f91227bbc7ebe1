"""The worker process: `manage.py worker` (and `serve`, which is web and worker in one), its
django-q2 cluster, and the turns it runs. A turn reads top to bottom in `execution.run_claimed_turn`:
claim (runs.services), prepare the request, run it through the engine adapter (engines/), finish
(the logs saved and the answer scrubbed here, the rest by `runs.turn_end.end_turn`). It changes a
run only through `runs.services`; `runs` names its task by string only (`runs.task_queue.TURN_TASK`).

| module | role |
|---|---|
| `execution.py` | one turn: claim, build the request, drive the adapter (a resident process for sticky runs), save its logs and scrub configured keys from its answer (R-SB10), then hand it to `runs.turn_end.end_turn`; every service call through `runs.supervision.retry_while_database_away` |
| `turn_activity.py` | a turn's agent activity coalesced and capped, written through `runs.services.append_activity` |
| `tasks.py` | the django-q2 entry point of a turn |
| `cluster.py` | the worker's django-q2 cluster, one task process, started (again, if it dies) and stopped by the worker |
| `threadpool.py` | the task process: threads running django-q2's pusher, monitor and schedules, and one per slot running its worker loop |
| `management/commands/worker.py` | the worker: start-up recovery, the supervisor, the cluster, its stop |
| `management/commands/serve.py` | `make run`: web and worker under one Django-free parent |
"""
