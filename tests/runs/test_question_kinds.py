"""The six question kinds through the API (R-LC3, R-LC5): each pending carries its hint data; any
reply answers any kind, since `kind` is display metadata the service never checks replies against:
a structured one is stored as sent and read by the agent in words (or as its JSON when its value
has another shape), whether or not it fits the question; the REST reply, the run socket, the inbox
and the file-reply path all take it through the one service."""

from __future__ import annotations

from typing import Any

import pytest

from runs.models import Run
from tests.support.conversations import ask_envelope, history_of, pending_of, plan_done, reply, start, status_of
from tests.support.web_clients import browser_headers, receive_until_closed, run_async, run_socket
from tests.upstream.test_reply_files import prompts, reply_files

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
FITTING = [
    ("choose_one", {"choice": "casual"}, "casual"),
    ("confirm", {"confirmed": False}, "No"),
    ("fill_fields", {"fields": {"title": "Tides", "year": 2024}}, "title: Tides\nyear: 2024"),
    ("risk_ack", {"acknowledged": True}, "I acknowledge the risk; go ahead."),
]
# Replies the question's kind or hint data would not have asked for: taken all the same (R-LC3).
NOT_FITTING = [
    ("choose_one", {"choice": "rude"}, "rude"),
    ("confirm", {"confirmed": "sure"}, '{"confirmed":"sure"}'),
    ("risk_ack", {"acknowledged": 1}, '{"acknowledged":1}'),
    ("fill_fields", {"fields": {"year": "2024", "colour": "red"}}, "year: 2024\ncolour: red"),
    ("fill_fields", {"fields": ["Tides"]}, '{"fields":["Tides"]}'),
    ("open_text", {"confirmed": True}, "Yes"),
    ("upload_files", {"fields": {}}, "(the form was sent empty)"),
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


@pytest.mark.parametrize("kind,response,text", FITTING + NOT_FITTING)
def test_a_structured_reply_is_taken_stored_as_sent_and_read_by_the_agent_in_words(
    api, trip, fake_codex, kind, response, text
):
    request_id = waiting_on(api, fake_codex, kind)
    answered = reply(api, request_id, 1, response)
    assert answered.status_code == 200, answered.content
    status = status_of(api, request_id)
    assert (status["status"], status["attempt_number"]) == ("succeeded", 2)
    assert history_of(api, request_id)[0]["response"] == response
    assert prompts(fake_codex)[-1] == text
    events = api.get(f"/v1/jobs/{request_id}/events/history?after_seq=0").json()["events"]
    assert next(e for e in events if e["kind"] == "interaction_reply")["payload"]["text"] == text


@pytest.mark.parametrize("kind", list(QUESTIONS))
def test_free_text_still_answers_every_kind(api, trip, fake_codex, kind):
    """Upstream's clients send text whatever the kind (R-LC3): never refused for it."""
    request_id = waiting_on(api, fake_codex, kind)
    assert reply(api, request_id, 1, {"text": "see my notes"}).status_code == 200
    assert prompts(fake_codex)[-1] == "see my notes"


def test_the_run_socket_takes_a_form_reply_missing_a_required_field_like_rest(alice, api, trip, fake_codex):
    request_id = waiting_on(api, fake_codex, "fill_fields")
    headers = browser_headers(alice)

    async def scenario():
        socket = run_socket(request_id, headers, after_seq=5)
        assert (await socket.connect())[0]
        await socket.receive_json_from()  # the snapshot
        await socket.send_json_to({"type": "reply", "interaction_id": 1, "response": {"fields": {"year": 1}}})
        return await receive_until_closed(socket)

    messages, _ = run_async(scenario)
    ack = next(m for m in messages if m["type"] == "ack")
    assert (ack["action"], ack["accepted"]) == ("reply", True)
    assert not [m for m in messages if m["type"] == "error"]
    assert history_of(api, request_id)[0]["response"] == {"fields": {"year": 1}}
    assert prompts(fake_codex)[-1] == "year: 1"
    assert status_of(api, request_id)["status"] == "succeeded"


def test_the_inbox_sends_structured_replies_as_json(client, alice, api, trip, fake_codex):
    client.force_login(alice)
    request_id = waiting_on(api, fake_codex, "confirm")

    def post(reply_json: str):
        body = {"request_id": request_id, "interaction_id": "1", "reply": reply_json}
        return client.post("/inbox/", body, HTTP_ACCEPT="application/json")

    malformed = post("{yes")
    assert malformed.status_code == 400 and malformed.json()["detail"]["code"] == "MALFORMED_REQUEST"
    # Another kind's form answers a confirm question all the same (R-LC3).
    assert post('{"acknowledged": false}').status_code == 200
    assert history_of(api, request_id)[0]["response"] == {"acknowledged": False}
    assert prompts(fake_codex)[-1] == "I do not accept the risk; do not go ahead."


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
