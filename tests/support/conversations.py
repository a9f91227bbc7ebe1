"""Helpers for interactive runs: scripted questions and answers, job requests, replies, processes, waits."""

from __future__ import annotations

import json
from typing import Any

from tests.support.clients import job_body
from tests.support.processes import kill_all as kill_all
from tests.support.processes import process_alive as process_alive
from tests.support.processes import processes_in as processes_in

# Shared helpers, re-exported to this suite.
from tests.support.service_processes import wait_until as wait_until

INTERACTIVE = {"execution_mode": "interactive"}
AUTO_FRESH = {"no_cache": True}  # auto by default; never answered from the result cache

PLAN = {
    "destination": "Kyoto",
    "days": [{"day": 1, "activities": ["Fushimi Inari at dawn"]}],
    "plan_file": "artifacts/plan.md",
}
PLAN_FILE = {"artifacts/plan.md": "# Kyoto\n\nDay 1: Fushimi Inari at dawn\n"}
HAIKU = {"topic": "sea", "haiku": ["waves fold", "into the grey", "morning"], "haiku_file": "artifacts/haiku.md"}
HAIKU_FILE = {"artifacts/haiku.md": "waves fold\ninto the grey\nmorning\n"}
QUESTION = "Where would you like to go, and for how many days?"


# --- fake codex steps ---------------------------------------------------------------------------


def ask(text: str = QUESTION, **extra: Any) -> dict[str, Any]:
    """A turn whose final message is a plain-text question (no JSON at all)."""
    return {"message": text, **extra}


def ask_envelope(body: dict[str, Any], *, shape: str = "ask_user", prose: str = "", **extra: Any) -> dict[str, Any]:
    """A turn ending with an ask_user envelope, in either accepted shape (R-TP4)."""
    envelope = {"ask_user": body} if shape == "ask_user" else {"outcome": "ask_user", "interaction": body}
    text = (prose + "\n\n" if prose else "") + json.dumps(envelope)
    return {"message": text, **extra}


def plan_done(
    *, marker: bool = True, data: dict[str, Any] | None = None, files: dict[str, str] | None = None, **extra: Any
) -> dict[str, Any]:
    """A trip-planner turn that writes the plan artifact and answers with the result JSON."""
    payload = dict(PLAN if data is None else data)
    if marker:
        payload["__SKILL_DONE__"] = True
    return {"files": PLAN_FILE if files is None else files, "message": json.dumps(payload), **extra}


def haiku_done(*, marker: bool = False, **extra: Any) -> dict[str, Any]:
    payload = dict(HAIKU)
    if marker:
        payload["__SKILL_DONE__"] = True
    return {"files": HAIKU_FILE, "message": json.dumps(payload), **extra}


# --- API ----------------------------------------------------------------------------------------


def interactive_job(
    skill_id: str = "trip-planner", *, runtime_options: dict[str, Any] | None = None, **kwargs: Any
) -> dict[str, Any]:
    """A job body for this suite: interactive unless told otherwise."""
    return job_body(skill_id, runtime_options=INTERACTIVE if runtime_options is None else runtime_options, **kwargs)


def start(client, skill_id: str = "trip-planner", **kwargs: Any) -> str:
    """POST /v1/jobs (turns run inline in these tests) and return the request id."""
    response = client.post("/v1/jobs", interactive_job(skill_id, **kwargs), format="json")
    assert response.status_code == 200, response.content
    return response.json()["request_id"]


def start_deciding_after_a_second(client) -> str:
    """A haiku run whose unanswered question is decided for the user one second after it is asked
    (R-LC10): not strict, session_timeout_sec 1."""
    return start(
        client,
        "haiku-writer",
        runtime_options={
            "execution_mode": "interactive",
            "interactive_require_user_reply": False,
            "session_timeout_sec": 1,
        },
    )


def status_of(client, request_id: str) -> dict[str, Any]:
    response = client.get(f"/v1/jobs/{request_id}")
    assert response.status_code == 200, response.content
    return response.json()


def pending_of(client, request_id: str) -> dict[str, Any] | None:
    response = client.get(f"/v1/jobs/{request_id}/interaction/pending")
    assert response.status_code == 200, response.content
    return response.json()["pending"]


def reply(client, request_id: str, interaction_id: int, response: Any, **extra: Any):
    return client.post(
        f"/v1/jobs/{request_id}/interaction/reply",
        {"interaction_id": interaction_id, "response": response, **extra},
        format="json",
    )


def history_of(client, request_id: str) -> list[dict[str, Any]]:
    response = client.get(f"/v1/jobs/{request_id}/interaction/history")
    assert response.status_code == 200, response.content
    return response.json()["interactions"]


def events_of(client, request_id: str) -> list[dict[str, Any]]:
    response = client.get(f"/v1/jobs/{request_id}/events/history?after_seq=0")
    assert response.status_code == 200, response.content
    return response.json()["events"]


def statuses_through(client, request_id: str) -> list[str]:
    """Every status the run went through, in order, from its event log."""
    return [e["payload"]["to"] for e in events_of(client, request_id) if e["kind"] == "status"]


def result_of(client, request_id: str) -> dict[str, Any]:
    response = client.get(f"/v1/jobs/{request_id}/result")
    assert response.status_code == 200, response.content
    return response.json()["result"]


def error_code(response) -> str | None:
    detail = response.json().get("detail")
    return detail.get("code") if isinstance(detail, dict) else None


def warning_codes(status: dict[str, Any]) -> list[str]:
    return [w["code"] for w in status["warnings"]]


def assert_events_consistent(events: list[dict[str, Any]]) -> None:
    """seq is 1, 2, 3 … and every status change starts where the previous one ended."""
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1)), [e["seq"] for e in events]
    previous = None
    for event in events:
        if event["kind"] == "status":
            assert event["payload"]["from"] == previous, (event, previous)
            previous = event["payload"]["to"]
