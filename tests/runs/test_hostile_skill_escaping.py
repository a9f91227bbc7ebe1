"""A hostile skill package's text is shown escaped on every page, and every page sends a
Content-Security-Policy without inline script (R-FS3, R-FS4)."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse
from django.utils.html import escape

from tests.support.hostile_skill import PAYLOAD, SKILL_ID, write_hostile_skill

pytestmark = pytest.mark.django_db(transaction=True)

PAGES = [("ui:skill-list", []), ("ui:choose-skill", []), ("ui:run-new", [SKILL_ID])]


@pytest.fixture
def hostile(install_skill, tmp_path):
    write_hostile_skill(tmp_path)
    return install_skill(SKILL_ID, tmp_path)


@pytest.mark.parametrize("name,args", PAGES)
def test_skill_text_is_escaped_on_every_page_R_FS4(alice, hostile, name, args):
    client = Client()
    client.force_login(alice)
    page = client.get(reverse(name, args=args))
    assert page.status_code == 200
    html = page.content.decode()
    assert "<script>window.__xss" not in html and "<img src=x" not in html and "<svg onload" not in html
    assert escape(PAYLOAD) in html


def test_new_run_form_help_text_is_escaped_R_FS4(alice, hostile):
    client = Client()
    client.force_login(alice)
    html = client.get(reverse("ui:run-new", args=[SKILL_ID])).content.decode()
    assert f"Help {escape(PAYLOAD)}" in html
    assert f"JSON {escape(PAYLOAD)} Enter a JSON value." in html


@pytest.mark.parametrize("url", ["/accounts/login/", "/v1/system/ping", "/v1/docs/", "/nope"])
def test_every_response_has_a_csp_without_inline_script_R_FS3(client, url):
    response = client.get(url)
    policy = dict(part.strip().split(" ", 1) for part in response["Content-Security-Policy"].split(";"))
    assert policy["script-src"] == "'self'" and policy["default-src"] == "'self'"
    assert policy["object-src"] == "'none'"


def test_api_docs_load_their_script_from_a_url_R_FS3(client, alice):
    client.force_login(alice)
    html = client.get("/v1/docs/").content.decode()
    assert "<script>" not in html and 'src="/v1/docs/?script="' in html
    script = client.get("/v1/docs/?script=")
    assert script.status_code == 200 and script["Content-Type"].startswith("application/javascript")
