"""The six question kinds through the API (R-LC3, R-LC5): each pending carries its hint data, a
structured reply fitting it is stored as sent and read by the agent in words, one that does not
fit is a 400 with a stable code that changes nothing; the REST reply, the run socket, the inbox
and the file-reply path all decide it in the one service."""

from __future__ import annotations

from typing import Any

import pytest

from runs.models import Run
from tests.ui.conftest import browser_headers, receive_messages, run_async, run_socket
from tests.upstream.test_reply_files import prompts, reply_files

from .helpers import ask_envelope, error_code, history_of, pending_of, plan_done, reply, start, status_of

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(60)]

FIELDS = [
    {"name": "title", "label": "Title", "type": "text", "required": True},
    {"name": "year", "label": "Year", "type": "integer"},
    {"name": "due", "label": "Due", "type": "date"},
]
QUESTIONS: dict[str, dict[str, Any]] = {
    "open_text": {"kind": "open_text", "prompt": "Anything else?"},
    "choose_one": {"kind": "choose_one", "prompt": "Tone?", "options": ["formal", "casual"], "allow_free_text": False},
    "confirm": {"kind": "confirm", "prompt": "Translate the abstract too?"},
    "fill_fields": {"kind": "fill_fields", "prompt": "Citation details:", "fields": FIELDS},
    "upload_files": {
        "kind": "upload_files",
        "prompt": "Send the paper.",
        "files": [{"name": "paper", "accept": ".pdf"}],
    },
    "risk_ack": {"kind": "risk_ack", "prompt": "Overwrite the notes?", "risk": "40 notes are replaced for good."},
}
HINTS = {
    "open_text": {},
    "choose_one": {"allow_free_text": False},
    "confirm": {},
    "fill_fields": {
        "fields": [
            {"name": "title", "label": "Title", "type": "text", "required": True},
            {"name": "year", "label": "Year", "type": "integer", "required": False},
            {"name": "due", "label": "Due", "type": "date", "required": False},
        ]
    },
    "upload_files": {"files": [{"name": "paper", "required": False, "accept": ".pdf"}]},
    "risk_ack": {"risk": "40 notes are replaced for good."},
}
GOOD = [
    ("choose_one", {"choice": "casual"}, "casual"),
    ("confirm", {"confirmed": False}, "No"),
    ("fill_fields", {"fields": {"title": "Tides", "year": 2024}}, "title: Tides\nyear: 2024"),
    ("risk_ack", {"acknowledged": True}, "I acknowledge the risk; go ahead."),
]
BAD = [
    ("choose_one", {"choice": "rude"}, "REPLY_CHOICE_UNKNOWN"),
    ("confirm", {"confirmed": "sure"}, "REPLY_CONFIRMED_INVALID"),
    ("risk_ack", {"acknowledged": 1}, "REPLY_ACKNOWLEDGED_INVALID"),
    ("fill_fields", {"fields": {"year": "2024"}}, "REPLY_FIELDS_INVALID"),
    ("open_text", {"confirmed": True}, "REPLY_KIND_MISMATCH"),
    ("upload_files", {"fields": {}}, "REPLY_KIND_MISMATCH"),
]


def waiting_on(api, fake_codex, kind: str) -> str:
    fake_codex.script(ask_envelope({"interaction_id": 1, **QUESTIONS[kind]}), plan_done())
    request_id = start(api)
    assert status_of(api, request_id)["status"] == "waiting_user"
    return request_id


@pytest.mark.parametrize("kind", list(QUESTIONS))
def test_each_kind_is_served_with_its_hint_data(api, trip, fake_codex, kind):
    request_id = waiting_on(api, fake_codex, kind)
    pending = pending_of(api, request_id)
    assert (pending["kind"], pending["ui_hints"]) == (kind, HINTS[kind])
    assert pending["required_fields"] == (["title"] if kind == "fill_fields" else [])


@pytest.mark.parametrize("kind,response,text", GOOD)
def test_a_fitting_structured_reply_is_stored_as_sent_and_the_agent_reads_it_in_words(
    api, trip, fake_codex, kind, response, text
):
    request_id = waiting_on(api, fake_codex, kind)
    answered = reply(api, request_id, 1, response)
    assert answered.status_code == 200, answered.content
    assert status_of(api, request_id)["status"] == "succeeded"
    assert history_of(api, request_id)[0]["response"] == response
    assert prompts(fake_codex)[-1] == text
    events = api.get(f"/v1/jobs/{request_id}/events/history?after_seq=0").json()["events"]
    assert next(e for e in events if e["kind"] == "interaction_reply")["payload"]["text"] == text


@pytest.mark.parametrize("kind,response,code", BAD)
def test_a_structured_reply_that_does_not_fit_is_400_and_changes_nothing(api, trip, fake_codex, kind, response, code):
    request_id = waiting_on(api, fake_codex, kind)
    refused = reply(api, request_id, 1, response, idempotency_key="k-1")
    assert refused.status_code == 400, refused.content
    assert error_code(refused) == code
    status = status_of(api, request_id)
    assert (status["status"], status["pending_interaction_id"], status["attempt_number"]) == ("waiting_user", 1, 1)
    assert history_of(api, request_id)[0]["response"] is None
    assert len(fake_codex.invocations()) == 1
    # The key was not spent on the refused reply: the corrected one goes through with it.
    assert reply(api, request_id, 1, "in my own words", idempotency_key="k-1").status_code == 200


def test_a_form_reply_names_every_field_problem(api, trip, fake_codex):
    request_id = waiting_on(api, fake_codex, "fill_fields")
    refused = reply(api, request_id, 1, {"fields": {"year": 20.5, "due": "tomorrow", "colour": "red"}})
    assert refused.status_code == 400
    assert refused.json()["detail"]["field_errors"] == {
        "title": "this field is required",
        "year": "expected a whole number",
        "due": "expected a date as YYYY-MM-DD",
        "colour": "this field was not asked for",
    }


@pytest.mark.parametrize("kind", list(QUESTIONS))
def test_free_text_still_answers_every_kind(api, trip, fake_codex, kind):
    """Upstream's clients send text whatever the kind (R-LC3): never refused for it."""
    request_id = waiting_on(api, fake_codex, kind)
    assert reply(api, request_id, 1, {"text": "see my notes"}).status_code == 200
    assert prompts(fake_codex)[-1] == "see my notes"


def test_the_run_socket_takes_and_refuses_form_replies_like_rest(alice, api, trip, fake_codex):
    request_id = waiting_on(api, fake_codex, "fill_fields")
    headers = browser_headers(alice)

    async def scenario():
        socket = run_socket(request_id, headers, after_seq=5)
        assert (await socket.connect())[0]
        await socket.receive_json_from()  # the snapshot
        await socket.send_json_to({"type": "reply", "interaction_id": 1, "response": {"fields": {"year": 1}}})
        (refused,) = await receive_messages(socket, 1)
        await socket.send_json_to({"type": "reply", "interaction_id": 1, "response": {"fields": {"title": "Tides"}}})
        messages = await receive_messages(socket, 1)
        await socket.disconnect()
        return refused, messages

    refused, _ = run_async(scenario)
    assert refused["type"] == "error" and refused["code"] == "REPLY_FIELDS_INVALID"
    assert refused["field_errors"] == {"title": "this field is required"}
    assert history_of(api, request_id)[0]["response"] == {"fields": {"title": "Tides"}}


def test_the_inbox_sends_structured_replies_as_json(client, alice, api, trip, fake_codex):
    client.force_login(alice)
    request_id = waiting_on(api, fake_codex, "confirm")

    def post(reply_json: str):
        body = {"request_id": request_id, "interaction_id": "1", "reply": reply_json}
        return client.post("/inbox/", body, HTTP_ACCEPT="application/json")

    refused = post('{"acknowledged": true}')
    assert refused.status_code == 400 and refused.json()["detail"]["code"] == "REPLY_KIND_MISMATCH"
    malformed = post("{yes")
    assert malformed.status_code == 400 and malformed.json()["detail"]["code"] == "MALFORMED_REQUEST"
    assert post('{"confirmed": true}').status_code == 200
    assert history_of(api, request_id)[0]["response"] == {"confirmed": True}
    assert prompts(fake_codex)[-1] == "Yes"


def test_files_answer_an_upload_question_through_the_file_reply_path(api, trip, fake_codex):
    request_id = waiting_on(api, fake_codex, "upload_files")
    answered = reply_files(api, request_id, {"interaction_id": 1, "text": "here"}, [("paper.pdf", b"%PDF-1.7")])
    assert answered.status_code == 200, answered.content
    recorded = history_of(api, request_id)[0]["response"]
    assert recorded["text"] == "here" and [f["name"] for f in recorded["files"]] == ["paper.pdf"]
    assert (Run.objects.get(pk=request_id).run_dir / "reply-files/1/paper.pdf").read_bytes() == b"%PDF-1.7"
    events = api.get(f"/v1/jobs/{request_id}/events/history?after_seq=0").json()["events"]
    assert next(e for e in events if e["kind"] == "interaction_reply")["payload"]["text"] == "here\n\nFiles: paper.pdf"


def test_the_admin_shows_a_form_reply_readably_beside_its_json(client, admin_user, api, trip, fake_codex):
    request_id = waiting_on(api, fake_codex, "fill_fields")
    assert reply(api, request_id, 1, {"fields": {"title": "<b>Tides</b>", "year": 2024}}).status_code == 200
    client.force_login(admin_user)
    interaction = Run.objects.get(pk=request_id).interactions.get()
    for path in (f"/admin/runs/interaction/{interaction.pk}/change/", f"/admin/runs/run/{request_id}/change/"):
        page = client.get(path).content.decode()
        assert (
            '<p class="readable-answer" style="white-space: pre-wrap">title: &lt;b&gt;Tides&lt;/b&gt;\nyear: 2024</p>'
            in page
        )
    listing = client.get("/admin/runs/interaction/").content.decode()
    assert (
        "title: &lt;b&gt;Tides&lt;/b&gt; year: 2024" in listing
        or "title: &lt;b&gt;Tides&lt;/b&gt;\nyear: 2024" in listing
    )
