"""Skill packages: validation, zip safety, and immutable per-version snapshots that runs use.

| module | role |
|---|---|
| `models.py` | a skill and its immutable installed versions |
| `packages.py` | reading and validating a package folder (no database) |
| `services.py` | installing: every path (zip, folder, bundled set) ends in `install_package` |
| `selectors.py` | reads of installed skills |
| `api.py` | `GET /v1/skills…`, `POST /v1/skill-packages/install` |
| `views.py`, `forms.py`, `urls.py` | the skill pages, and the routes of pages and API |
| `admin.py` | the read-only admin audit of skills |
| `bundled/` | the bundled demo skills |
"""
