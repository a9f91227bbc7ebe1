"""The small kernel every app shares. It imports no project app (`engines`, which is Django-free,
it may: its names of engines and control files).

| module | role |
|---|---|
| `errors.py`, `api_errors.py` | the one family of coded errors and the handler that renders them for the API |
| `middleware.py`, `parsers.py`, `negotiation.py`, `throttles.py` | request guards (size, JSON errors, CSP, a wrong method's page), safe JSON parsing, content negotiation, rate limits shared by API, sockets and forms |
| `archives.py`, `byte_ranges.py`, `lookups.py`, `converters.py` | safe zip extraction, byte ranges, ids a client sent, URL converters |
| `counters.py` | counter rows added to in one statement, created on first use |
| `compiled.py` | querysets compiled once per process: whose SQL never changes (the dispatch read, the metrics scrape), or whose values change (`PreparedQuery`: the reads of every turn and run); a unique key's row without `.first()`'s ordering |
| `links.py`, `context_processors.py`, `forms.py`, `readonly_admin.py`, `formats/` | links to pages from outside a request, what every page and form shares, read-only admin bases, date formats |
| `logging.py` | secrets kept out of log output, and configured keys out of any bytes (`ValueRedactor`), in bounded memory |
"""
