"""The project package: the wiring of the apps, nothing else.

| module | role |
|---|---|
| `settings.py` | every setting from the environment (R-OP4), refused loudly when malformed |
| `urls.py` | the root URLconf: each app's `urls.py`, the OpenAPI document, the admin, the pages' `ui` namespace |
| `asgi.py` | HTTP through Django (one reused thread per request), websockets through Channels |

What every app shares lives in `kernel/`, the processes' machinery in `processes/`, the probes in
`health/`.
"""
