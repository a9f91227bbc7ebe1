"""/v1/schema/ and /v1/docs/ (SPEC §8): the OpenAPI document and its browsable docs, served offline."""

from __future__ import annotations

import re
from html.parser import HTMLParser

import pytest

pytestmark = pytest.mark.django_db

JOB_PATHS = [
    "/v1/jobs",
    "/v1/jobs/{request_id}",
    "/v1/jobs/{request_id}/upload",
    "/v1/jobs/{request_id}/interaction/pending",
    "/v1/jobs/{request_id}/interaction/reply",
    "/v1/jobs/{request_id}/interaction/history",
    "/v1/jobs/{request_id}/cancel",
    "/v1/jobs/{request_id}/result",
    "/v1/jobs/{request_id}/artifacts",
    "/v1/jobs/{request_id}/artifacts/{path}",
    "/v1/jobs/{request_id}/bundle",
    "/v1/jobs/{request_id}/logs",
    "/v1/jobs/{request_id}/events/history",
    "/v1/jobs/{request_id}/events",
    "/v1/skills",
    "/v1/skills/{skill_id}",
    "/v1/skill-packages/install",
    "/v1/engines",
    "/v1/engines/{engine}/models",
]


def _schema(api) -> dict:
    response = api.get("/v1/schema/", {"format": "json"})
    assert response.status_code == 200, response.content[:300]
    return response.json()


def test_schema_is_served_as_openapi_3(api):
    schema = _schema(api)
    assert schema["openapi"].startswith("3.")
    assert schema["info"]["title"]


def test_schema_lists_every_api_path(api):
    paths = _schema(api)["paths"]
    missing = [p for p in JOB_PATHS if p not in paths]
    assert missing == []
    assert "post" in paths["/v1/jobs"] and "get" in paths["/v1/jobs"]
    assert "post" in paths["/v1/jobs/{request_id}/cancel"]
    assert "post" in paths["/v1/jobs/{request_id}/interaction/reply"]


def test_schema_describes_the_create_request(api):
    schema = _schema(api)
    body = schema["paths"]["/v1/jobs"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    ref = body["$ref"].rsplit("/", 1)[-1]
    properties = schema["components"]["schemas"][ref]["properties"]
    assert {"skill_id", "engine", "input", "parameter", "runtime_options"} <= set(properties)


def test_schema_documents_token_authentication(api):
    """API clients authenticate with `Authorization: Token <key>` (SPEC §8); the document must say so,
    or the docs page offers no way to try the API with a token."""
    schemes = _schema(api).get("components", {}).get("securitySchemes", {})
    token = [
        s
        for s in schemes.values()
        if (s.get("type") == "apiKey" and s.get("in") == "header" and s.get("name") == "Authorization")
        or (s.get("type") == "http" and s.get("scheme", "").lower() == "token")
    ]
    assert token, schemes


def test_schema_yaml_by_default(api):
    response = api.get("/v1/schema/")
    assert response.status_code == 200
    assert b"openapi:" in response.content[:50]


class _Refs(HTMLParser):
    def __init__(self):
        super().__init__()
        self.refs: list[str] = []

    def handle_starttag(self, tag, attrs):
        for name, value in attrs:
            if name in ("src", "href") and value:
                self.refs.append(value)


def test_docs_page_uses_only_local_assets(api):
    """Served offline: no CDN, every referenced asset is on this server and actually served."""
    response = api.get("/v1/docs/")
    assert response.status_code == 200
    html = response.content.decode()
    parser = _Refs()
    parser.feed(html)
    assert parser.refs, "the docs page references no assets at all"
    external = [r for r in parser.refs if re.match(r"^(https?:)?//", r)]
    assert external == []
    assert not re.search(r"https?://(cdn|unpkg|cdnjs|fonts\.googleapis|jsdelivr)", html)
    for ref in parser.refs:
        if ref.startswith("/static/"):
            asset = api.get(ref)
            assert asset.status_code == 200, ref
            body = b"".join(asset.streaming_content) if asset.streaming else asset.content
            assert body, ref


def test_docs_page_points_at_the_local_schema(api):
    # The page's script comes from a URL (no inline script under the CSP, R-FS3).
    script = api.get("/v1/docs/?script=").content.decode()
    assert "/v1/schema/" in script
