"""Upstream Skill Runner's client surface (SPEC §16), beside the service's own API.

Existing clients of the FastAPI Skill Runner — the Zotero plugin above all — speak paths, fields
and stream framings of their own. This app translates between them and the service's core
(runs, skills, accounts) in thin views; the core never learns upstream's names.

Modules:
- `urls.py` — the paths only upstream's clients use.
"""
