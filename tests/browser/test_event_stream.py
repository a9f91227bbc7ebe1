"""R-OP8: GET /v1/jobs/{id}/events serves the clients that ask for `text/event-stream`: a
browser's EventSource in real Chromium and an SSE client library (httpx-sse), each following an
interactive run live from its first event to the end, seeing exactly the event log."""

from __future__ import annotations

import json

import httpx
import pytest
from httpx_sse import connect_sse

from tests.browser.conftest import log_in
from tests.browser.test_run_chat import trip_script

pytestmark = [pytest.mark.browser, pytest.mark.timeout(120)]

# Every kind runs/services.py appends; the SSE `event:` field carries it.
EVENT_KINDS = [
    "status",
    "warning",
    "result",
    "input_uploaded",
    "assistant_message",
    "interaction_pending",
    "interaction_reply",
    "recovered",
    "repair",
    "activity",
    "activity_truncated",
]

FOLLOW_WITH_EVENT_SOURCE = """
([url, kinds]) => {
  window.__sse = {events: [], errors: 0, ended: false};
  const source = new EventSource(url);
  for (const kind of kinds) {
    source.addEventListener(kind, (e) => window.__sse.events.push({kind, id: Number(e.lastEventId), data: JSON.parse(e.data)}));
  }
  source.addEventListener("end", () => { window.__sse.ended = true; source.close(); });
  source.onerror = () => { window.__sse.errors += 1; };
}
"""


def _history(live, token: str, request_id: str) -> list[dict]:
    status, body = live.service.request("GET", f"/v1/jobs/{request_id}/events/history?after_seq=0", token)
    assert status == 200, body
    return body["events"]


def _reply(live, token: str, request_id: str) -> None:
    body = {"interaction_id": 1, "response": "Oslo"}
    status, answer = live.service.request("POST", f"/v1/jobs/{request_id}/interaction/reply", token, body)
    assert status == 200, answer


def test_event_source_in_chromium_follows_a_run_live(live, new_page):
    trip_script(live, first_turn_seconds=1)
    token = live.token("alice")
    request_id = live.start_trip("alice")
    page = new_page()
    log_in(page, "alice")  # EventSource sends the session cookie, as the run page would
    page.evaluate(FOLLOW_WITH_EVENT_SOURCE, [f"/v1/jobs/{request_id}/events", EVENT_KINDS])

    page.wait_for_function(
        "() => window.__sse.events.some(e => e.kind === 'status' && e.data.payload.to === 'waiting_user')",
        timeout=20_000,
    )
    _reply(live, token, request_id)
    page.wait_for_function("() => window.__sse.ended", timeout=20_000)

    seen = page.evaluate("window.__sse")
    history = _history(live, token, request_id)
    assert seen["errors"] == 0  # a 406 (or any failure) would show up here, and nothing would arrive
    assert [e["id"] for e in seen["events"]] == [e["seq"] for e in history]
    assert [(e["kind"], e["data"]["payload"]) for e in seen["events"]] == [(e["kind"], e["payload"]) for e in history]
    assert history[-1]["kind"] == "status" and history[-1]["payload"]["to"] == "succeeded"


def test_an_sse_client_library_follows_a_run_live(live):
    trip_script(live)
    token = live.token("alice")
    request_id = live.start_trip("alice")
    received: list[tuple[int, str, dict]] = []
    replied = False
    with httpx.Client(base_url=live.url, headers={"Authorization": f"Token {token}"}, timeout=30) as client:
        with connect_sse(client, "GET", f"/v1/jobs/{request_id}/events") as source:
            assert source.response.request.headers["Accept"] == "text/event-stream"
            assert source.response.status_code == 200
            assert source.response.headers["Content-Type"].startswith("text/event-stream")
            for sse in source.iter_sse():
                if sse.event == "end":
                    break
                data = json.loads(sse.data)
                received.append((int(sse.id), sse.event, data["payload"]))
                if sse.event == "status" and data["payload"]["to"] == "waiting_user" and not replied:
                    _reply(live, token, request_id)
                    replied = True
    history = _history(live, token, request_id)
    assert replied
    assert received == [(e["seq"], e["kind"], e["payload"]) for e in history]
    assert received[-1][2]["to"] == "succeeded"
