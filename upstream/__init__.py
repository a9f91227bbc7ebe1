"""Upstream Skill Runner's client surface (SPEC §16), beside the service's own API.

Existing clients of the FastAPI Skill Runner — the Zotero plugin above all — speak paths, fields
and stream framings of their own. This app translates between them and the service's core
(runs, skills, accounts) in thin views; the core never learns upstream's names.

Modules:
- `handshake.py` — the handshake's answer (R-UP3): which protocols this service speaks.
- `fcmp.py` — pure translation of a run's event log into upstream's FCMP envelopes and chat
  items (R-UP5), and how their seqs and attempts relate to the log's.
- `streams.py` — reading the log for those: cursor and range parameters, the histories, the
  server-sent-event framing run by the core's stream loop (live.sse).
- `api.py` — the views: the handshake, management runs, `/ui`; `/chat`, `/chat/history`, and
  `/events`, `/events/history` answering in either form by their parameters; a run's status and
  its reply with upstream's fields besides the service's; engine log-in paths, not supported here.
- `management.py` — the management reads: skills (with their schemas), runtime defaults, engines.
- `files.py` — a run's files as upstream's tree and previews, log byte ranges, the bundle with logs.
- `reply_files.py` — reading a file reply (R-UP6): multipart `metadata` plus `files` parts.
- `serializers.py` — the shapes of the answers for the OpenAPI document; upstream's status fields.
- `urls.py` — upstream's paths: those only its clients use, and those shared with the service's own API.
"""
