"""Who is asking: API tokens and credentials, local mode, login, the account settings page, and the
caps on a user's live connections.

| module | role |
|---|---|
| `models.py` | `ApiToken` (stored hashed; named, with an optional expiry), `LiveConnection` (one open socket or stream) |
| `authentication.py` | Token, Bearer and Basic credentials for the API |
| `local_mode.py` | single-user local mode: a request without credentials acts as the local user |
| `login.py` | login with throttled failures |
| `connections.py` | the per-user cap on live connections, and ending them with their credential |
| `settings_page.py` | the settings page: rendering it with accounts' own sections and the registered ones, and how its forms answer (post/redirect/get) |
| `settings_sections.py` | the sections higher apps register in the settings page (`notifications`' webhooks) without accounts importing them, and without importing the page |
| `services.py`, `views.py`, `forms.py` | the settings page's own parts: notification preferences, API tokens |
| `schema.py` | token authentication in the OpenAPI document |
| `admin.py` | API tokens in the admin |
| `urls.py` | login and logout (the admin's too), the settings page and its tokens' forms |
"""
