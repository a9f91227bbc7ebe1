"""The project (settings, URLs, ASGI, start-up), which wires the apps together, and the small kernel
every app shares. The kernel modules import no Django app (`engines`, which is Django-free, they
may: its names of engines and control files); what the apps add to the kernel they register
from their AppConfig.ready (their readiness checks).

| module | role |
|---|---|
| `settings.py` | every setting from the environment (R-OP4), refused loudly when malformed |
| `startup.py` | the explicit start-up step of every entry point (`manage.py`, `asgi.py`, the suite): a private data dir and the secret key, or one line saying why not (R-OP12) |
| `urls.py`, `urls_ui.py` | the API under `/v1/`, probes, admin; the pages each app owns, at the site root |
| `asgi.py` | HTTP through Django (one reused thread per request), websockets through Channels |
| `serve_parent.py`, `forking.py` | what `manage.py serve` becomes after forking web and worker; children that end with their parent |
| `system.py`, `readiness.py` | `/healthz`, `/readyz`, `/v1/system/ping`; the checks `/readyz` walks: the database's, and those the apps register |
| `errors.py`, `api_errors.py` | the one family of coded errors and the handler that renders them for the API |
| `middleware.py`, `parsers.py`, `negotiation.py`, `throttles.py` | request guards (size, JSON errors, CSP), safe JSON parsing, content negotiation, rate limits shared by API, sockets and forms |
| `queue_broker.py`, `wakeups.py`, `group_messages.py` | the embedded default's woken task broker; waking a waiter in another process; channel-layer messages from sync code (datagrams to this host's watchers without a cross-process layer) |
| `archives.py`, `byte_ranges.py`, `lookups.py`, `converters.py` | safe zip extraction, byte ranges, ids a client sent, URL converters |
| `links.py`, `context_processors.py`, `forms.py`, `readonly_admin.py` | links to pages from outside a request, what every page and form shares, read-only admin bases |
| `logging.py` | secrets kept out of log output, and configured keys out of any bytes (`ValueRedactor`), in bounded memory |
"""
