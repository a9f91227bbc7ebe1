"""The run: its models, every change to it, and the REST API and pages that show it. The worker
process and the turns it runs are `worker/`, the live connections `live/`, the engines' Django
side `enginehost/`, webhooks and question emails `notifications/`, which plugs into a run's life
through `hooks.py`.

| module | role |
|---|---|
| `models.py` | `Run`, `Interaction`, `RunEvent`, turn usage; the rows that coordinate workers (`OwnerQueue`, the dispatch lock, recovered workers) |
| `services/` | the only writer of a run's state, one transaction per change with its event: `admission`, `dispatching`, `claims`, `activity` (a running turn's agent activity), `interactions`, `lifecycle.transition` (the state machine), `spend` (the relay's counts and refusals), `security` (keys found in output) |
| `selectors.py` | reads of runs through the caller's visibility |
| `events.py` | appending numbered run events and waking listeners after commit |
| `hooks.py` | what other apps add without runs importing them: signals at a status change and at admission with a callback URL, jobs for the supervisor's tick |
| `task_queue.py` | turns handed to the django-q2 cluster (by task name: `worker.tasks`) |
| `turn_end.py` | a finished turn taken to the run's next state, the worker's one entry (`end_turn`): outcome, artifacts, repair review, keys in output, completion |
| `outcome.py` | what a finished turn means: the completion gates |
| `artifacts.py` | collecting the files a final answer declares |
| `repair.py` | output repair rounds in the same engine session |
| `runfiles.py` | reading an agent's run directory without trusting its shape |
| `usage.py` | token usage, cost and duration per turn, run and aggregate |
| `supervision.py` | recovery at worker start and the once-a-second tick: deadlines, dead claims, re-dispatch, the jobs other apps registered; the worker's retry policy for the database |
| `retention.py` | removing the folders of old finished runs |
| `sweeps.py` | removing temporary folders: a run's staging when it ends, what a killed process left once old enough (hourly) |
| `cache.py` | reusing an identical earlier auto run's result |
| `options.py`, `inputs.py` | a run's runtime options and its input against the skill's schemas |
| `api.py`, `serializers.py` | the `/v1/jobs` API and its shapes |
| `replies.py` | the one way a reply comes in, by any transport: rate, lookup, shape, then `services.submit_reply` |
| `urls.py` | the jobs API's routes and the run pages' |
| `views.py`, `forms.py`, `preview.py`, `questions.py`, `context_processors.py` | the run pages, the new-run form, artifact previews, the inbox's questions and answers |
| `bundles.py` | a finished run's downloadable bundle |
| `output_keys.py` | provider keys in what a run's agent left: redacted at the turn's end and as files are served (R-SB10) |
| `admin.py` | the read-only admin audit of runs |
"""
