"""The machinery of the service's processes, below every app (it imports none).

| module | role |
|---|---|
| `startup.py` | the explicit start-up step of every entry point (`manage.py`, `asgi.py`, the suite): a private data dir and the secret key, or one line saying why not (R-OP12); `manage.py` keeps out libraries imported only because they are installed |
| `memory.py` | glibc's allocator for threads that mostly wait (two arenas; `serve` and `worker` restart once without per-thread caches), and its free memory given back once a process is idle (the web's request threads, the task pool) |
| `serve_parent.py`, `forking.py` | what `manage.py serve` becomes after forking web and worker; children that end with their parent |
| `queue_broker.py`, `wakeups.py`, `group_messages.py` | the broker each process enqueues through, and the embedded default's woken task broker; waking a waiter in another process; channel-layer messages from sync code (datagrams to this host's watchers without a cross-process layer) |
"""
