"""The inbox (R-NT4): every question waiting for the user, oldest first, answerable in place
through the same service and reply rate limit; the nav count on every page; the user socket."""

from __future__ import annotations

import pytest
from asgiref.sync import async_to_sync
from channels.testing import WebsocketCommunicator
from rest_framework.throttling import SimpleRateThrottle

from tests.kernel.test_limits import forget_throttling
from tests.support.conversations import ask_envelope, plan_done, start, status_of
from tests.support.web_clients import SAME_SITE, token_headers

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(60)]


def question(prompt: str, options=(), prose: str = "") -> dict:
    body = {"interaction_id": 1, "kind": "choose_one", "prompt": prompt, "options": list(options)}
    return ask_envelope(body, prose=prose)


@pytest.fixture
def two_waiting(api, install_skill, fake_codex):
    install_skill("trip-planner")
    fake_codex.script(question("First: where?", ["Oslo", "Lisbon"]), plan_done())
    first = start(api)
    fake_codex.script(question("Second: when?"), plan_done())
    second = start(api)
    return first, second


@pytest.fixture
def browser(client, alice):
    client.force_login(alice)
    return client


def test_lists_waiting_questions_oldest_first_with_the_nav_count(browser, two_waiting, bob_api, fake_codex):
    fake_codex.script(question("Bob's question"))
    start(bob_api)  # someone else's question is not in alice's inbox
    page = browser.get("/inbox/").content.decode()
    assert page.index("First: where?") < page.index("Second: when?")
    assert "Bob&#x27;s question" not in page and "Bob's question" not in page
    assert '<button type="submit" class="quick-reply" name="option" value="0" formnovalidate>Oslo</button>' in page
    assert '<span id="inbox-count" class="count">2</span>' in page
    runs_page = browser.get("/").content.decode()  # the count is in the nav of every page
    assert '<span id="inbox-count" class="count">2</span>' in runs_page and "js/inbox.js" in runs_page


def test_answers_in_place_as_json_and_as_a_plain_form(browser, api, two_waiting):
    first, second = two_waiting
    answer = browser.post(
        "/inbox/", {"request_id": first, "interaction_id": "1", "option": "0"}, HTTP_ACCEPT="application/json"
    )
    assert answer.status_code == 200, answer.content
    assert answer.json() == {"request_id": first, "status": "queued", "accepted": True}
    assert status_of(api, first)["status"] == "succeeded"
    assert api.get(f"/v1/jobs/{first}/interaction/history").json()["interactions"][0]["response"] == "Oslo"
    form = browser.post("/inbox/", {"request_id": second, "interaction_id": "1", "response": "In May"})
    assert form.status_code == 302 and form["Location"] == "/inbox/"
    assert status_of(api, second)["status"] == "succeeded"
    history = api.get(f"/v1/jobs/{second}/interaction/history").json()["interactions"]
    assert history[0]["response"] == "In May" and history[0]["answered_by"] == "alice"
    assert "Nothing is waiting for you" in browser.get("/inbox/").content.decode()


def test_quick_replies_show_the_value_they_send_R_FS4(browser, api, install_skill, fake_codex):
    """An option whose label differs from its value shows both; the button sends the value."""
    install_skill("trip-planner")
    options = [{"label": "Keep my files", "value": "delete everything"}, {"label": "Two", "value": 2}, "Same"]
    fake_codex.script(question("Which one?", options), plan_done())
    request_id = start(api)
    page = browser.get("/inbox/").content.decode()
    assert ">Keep my files → delete everything</button>" in page and ">Two → 2</button>" in page
    assert ">Same</button>" in page
    bad = browser.post(
        "/inbox/", {"request_id": request_id, "interaction_id": "1", "option": "3"}, HTTP_ACCEPT="application/json"
    )
    assert bad.status_code == 400 and bad.json()["detail"]["code"] == "VALIDATION_ERROR"
    sent = browser.post(
        "/inbox/", {"request_id": request_id, "interaction_id": "1", "option": "1"}, HTTP_ACCEPT="application/json"
    )
    assert sent.status_code == 200, sent.content
    assert api.get(f"/v1/jobs/{request_id}/interaction/history").json()["interactions"][0]["response"] == 2


def test_errors_keep_the_api_codes(browser, bob, two_waiting):
    first, _ = two_waiting
    stale = browser.post(
        "/inbox/", {"request_id": first, "interaction_id": "7", "response": "x"}, HTTP_ACCEPT="application/json"
    )
    assert stale.status_code == 409 and stale.json()["detail"]["code"] == "INTERACTION_STALE"
    missing = browser.post("/inbox/", {"request_id": first, "response": "x"}, HTTP_ACCEPT="application/json")
    assert missing.status_code == 400 and missing.json()["detail"]["code"] == "VALIDATION_ERROR"
    browser.force_login(bob)
    foreign = browser.post(
        "/inbox/", {"request_id": first, "interaction_id": "1", "response": "x"}, HTTP_ACCEPT="application/json"
    )
    assert foreign.status_code == 404 and foreign.json()["detail"]["code"] == "RUN_NOT_FOUND"


def test_inbox_answers_share_the_reply_rate_limit(browser, api, alice, two_waiting, monkeypatch):
    first, second = two_waiting
    forget_throttling(alice)
    monkeypatch.setattr(SimpleRateThrottle, "THROTTLE_RATES", {"interaction_reply": "1/min"})
    try:
        assert (
            api.post(
                f"/v1/jobs/{first}/interaction/reply", {"interaction_id": 1, "response": "Oslo"}, format="json"
            ).status_code
            == 200
        )
        refused = browser.post(
            "/inbox/", {"request_id": second, "interaction_id": "1", "response": "May"}, HTTP_ACCEPT="application/json"
        )
        assert refused.status_code == 429 and refused.json()["detail"]["code"] == "RATE_LIMITED"
        assert status_of(api, second)["status"] == "waiting_user"
    finally:
        forget_throttling(alice)


def test_inbox_socket_sends_the_count_and_follows_changes(api, install_skill, fake_codex):
    install_skill("trip-planner")

    async def scenario():
        from asgiref.sync import sync_to_async

        from skillrunner.asgi import application

        socket = WebsocketCommunicator(application, "/ws/inbox/", headers=token_headers(api))
        assert (await socket.connect())[0]
        first = await socket.receive_json_from(5)
        fake_codex.script(question("Live question?", ["Yes", "No"]), plan_done())
        request_id = await sync_to_async(start)(api)
        second = await socket.receive_json_from(10)
        await sync_to_async(api.post)(
            f"/v1/jobs/{request_id}/interaction/reply", {"interaction_id": 1, "response": "Yes"}, format="json"
        )
        third = await socket.receive_json_from(10)
        await socket.disconnect()
        return first, second, third, request_id

    first, second, third, request_id = async_to_sync(scenario)()
    assert first == {"type": "inbox", "count": 0, "questions": []}
    assert second["count"] == 1
    (item,) = second["questions"]
    assert item["request_id"] == request_id and item["prompt"] == "Live question?"
    assert item["options"] == ["Yes", "No"] and item["url"] == f"/runs/{request_id}/"
    assert third == {"type": "inbox", "count": 0, "questions": []}


def test_inbox_socket_refuses_anonymous():
    async def scenario():
        from skillrunner.asgi import application

        socket = WebsocketCommunicator(application, "/ws/inbox/", headers=SAME_SITE)
        await socket.connect()
        output = await socket.receive_output(5)
        await socket.disconnect()
        return output

    assert async_to_sync(scenario)() == {"type": "websocket.close", "code": 4401}


def test_each_card_names_its_run_and_tells_it_apart(browser, api, install_skill, fake_codex):
    """Two runs of one skill asking the same question: each card shows its run's short id, its
    input, what the agent said before asking, and when the wait ends and what happens then."""
    install_skill("trip-planner")
    fake_codex.script(
        question("Where would you like to go this weekend?", ["Oslo", "Lisbon"], prose="I can plan a weekend away.")
    )
    strict = start(api, input={"traveller": "Alice"})
    lenient = start(
        api,
        input={"traveller": "Bob " + "very " * 15 + "long"},
        runtime_options={"execution_mode": "interactive", "interactive_require_user_reply": False},
    )
    page = browser.get("/inbox/")
    first, second = (item["summary"] for item in page.context["questions"])
    assert (first["request_id"], second["request_id"]) == (strict, lenient)
    assert first["short_id"] == strict[:8] and first["values"] == ["traveller: Alice"]
    assert second["values"][0].startswith("traveller: Bob very") and len(second["values"][0]) == len("traveller: ") + 60
    assert first["said_before"] == second["said_before"] == "I can plan a weekend away."
    assert (first["deadline_at"], first["on_deadline"]) == (None, None)  # a strict resumable run waits
    assert second["on_deadline"] == "auto_decide" and second["deadline_at"] is not None
    html = page.content.decode()
    assert f'href="/runs/{strict}/#reply"' in html and "traveller: Alice" in html
    assert "the agent decides by itself" in html
    assert f'action="/runs/{lenient}/cancel/"' in html


def test_the_question_itself_is_not_repeated_as_what_the_agent_said(browser, two_waiting):
    summaries = [item["summary"] for item in browser.get("/inbox/").context["questions"]]
    assert [summary["said_before"] for summary in summaries] == [None, None]


def test_cancel_from_the_inbox(browser, api, two_waiting, bob):
    first, second = two_waiting
    from django.test import Client

    stranger = Client()
    stranger.force_login(bob)
    assert stranger.post(f"/runs/{first}/cancel/", {"next": "/inbox/"}).status_code == 404
    response = browser.post(f"/runs/{first}/cancel/", {"next": "/inbox/"}, follow=True)
    assert response.redirect_chain == [("/inbox/", 302)]
    assert "was canceled." in response.content.decode()
    assert status_of(api, first)["status"] == "canceled"
    assert [item["summary"]["request_id"] for item in response.context["questions"]] == [second]
    again = browser.post(f"/runs/{first}/cancel/", {"next": "https://elsewhere.example/"})
    assert again["Location"] == f"/runs/{first}/"  # never sent off the site
