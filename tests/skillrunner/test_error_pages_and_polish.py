"""Polish (issue 30, item 5): styled error pages with ways back into the site, the favicon,
one name per status, the runs list with its status first."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from tests.runs.test_pages import logged_in

pytestmark = pytest.mark.django_db(transaction=True)


def test_not_found_is_a_page_of_the_site_with_ways_on(alice):
    response = logged_in(alice).get("/runs/00000000-0000-0000-0000-000000000000/")
    html = response.content.decode()
    assert response.status_code == 404
    assert '<link rel="stylesheet" href="/static/css/app.css">' in html
    assert "<h1>Page not found</h1>" in html and html.count("<h1") == 1
    assert f'<a href="{reverse("ui:run-list")}">Your runs</a>' in html and 'aria-label="Main"' in html


def test_not_found_for_someone_logged_out_offers_the_login(client):
    html = client.get("/nothing-here/").content.decode()
    assert "<h1>Page not found</h1>" in html and f'<a href="{reverse("login")}">Log in</a>' in html


def test_the_api_still_answers_json(client):
    response = client.get("/v1/nothing-here")
    assert response.status_code == 404 and response.json()["detail"]["code"] == "NOT_FOUND"


def test_forbidden_is_a_page_of_the_site(alice):
    response = logged_in(alice).post(reverse("ui:skill-list"), {})
    html = response.content.decode()
    assert response.status_code == 403
    assert "<h1>Not allowed</h1>" in html and "installing skills, are for staff" in html


def test_an_expired_form_says_so(alice):
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(alice)
    response = browser.post(reverse("ui:inbox"), {"request_id": "x"})
    assert response.status_code == 403 and "<h1>This form has expired</h1>" in response.content.decode()


def test_a_server_error_page_needs_nothing_from_the_request():
    from django.template.loader import render_to_string

    html = render_to_string("500.html")
    assert "<h1>Something went wrong here</h1>" in html and 'href="/accounts/login/"' in html


def test_the_favicon(client):
    response = client.get("/favicon.ico")
    assert response.status_code == 301 and response["Location"] == "/static/favicon.svg"
    assert (
        b'<link rel="icon" href="/static/favicon.svg" type="image/svg+xml">' in client.get("/accounts/login/").content
    )


def test_one_name_per_status_and_status_first_in_the_runs_list(alice, trip_run):
    request_id = trip_run()
    html = logged_in(alice).get(reverse("ui:run-list")).content.decode()
    assert '<span class="badge status-waiting_user">Waiting for you</span>' in html
    assert '<option value="waiting_user">Waiting for you</option>' in html
    assert html.index('<th scope="col">Status</th>') < html.index('<th scope="col">Run</th>')
    run_page = logged_in(alice).get(reverse("ui:run-detail", args=[request_id])).content.decode()
    assert 'class="badge status-waiting_user">Waiting for you</span>' in run_page
