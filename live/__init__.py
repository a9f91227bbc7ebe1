"""Live connections (R-UI1, R-UI2, R-FS2, R-FS3, R-NT4): the websockets and server-sent event
streams that show runs as they change, and the one watcher per web process that wakes them. Every
message they send is read from the run's event log (`runs.events`); replies and cancels go to the
same services as the REST API. No models: a connection's row is `accounts.models.LiveConnection`.

| module | role |
|---|---|
| `watcher.py` | `ProcessWatcher`: one per event loop, woken by the channel layer or a host datagram, reads the event table once per change and wakes the listeners of the runs that changed; `RunChangeWaiter`, `UserChangeWaiter` are what a connection waits on; renews and ends this process's live connections |
| `consumers.py` | the run socket `/ws/runs/<id>/` (`RunConsumer`) and the base every socket shares (`LiveConnectionConsumer`: its connection opened, counted against the caps and ended with its credential) |
| `inbox.py` | the inbox socket `/ws/inbox/` (`InboxConsumer`): the user's waiting questions, kept live on every page |
| `sse.py` | server-sent events from the event log: the stream loop any framing uses (`follow_log`), the service's own framing, the response (`sse_response`) and `GET /v1/jobs/{id}/events` (`EventStreamView`) |
| `routing.py` | the websocket routes and who may open them (token header or session, allowed origins) |
| `shutdown.py` | a stopping web process (daphne, SIGTERM) closes its websockets with 1001 so clients resume elsewhere (R-OP10); every close the service sends waits for the client's answer instead of autobahn's 1 s, so a late reader still gets all that came before it |
"""
