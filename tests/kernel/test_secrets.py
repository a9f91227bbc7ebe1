"""Secrets stay secret (SPEC §8 "logs … secrets redacted", README "API keys and tokens are redacted
from log lines", research §5.2 "redact known token shapes in captured CLI stdout before it becomes
an event"; R-EN5 "no server secrets" for engines).

An engine that was talked into echoing its provider key (prompt injection is the normal case for
an agent) puts it in its question, its final answer and its stdout/stderr. The operator's key
must not reach the run's owner through any door: logs endpoint, events (and so the websocket and
SSE stream), pending payload, interaction history, result, bundle, admin pages; nor the server's
own log output. tests/runs/test_logs.py covers the logs endpoint and the bundle for a key printed on stderr,
and the engine environment for server variables; this adds every other door, and the keys
configured for the *other* engines."""

from __future__ import annotations

import io
import json
import logging
import zipfile

import pytest
from django.test import Client

from engines.registry import ENGINE_NAMES

pytestmark = pytest.mark.django_db(transaction=True)

KEYS = {name: f"{name}-provider-key-0b9d41e7c2aa{index}" for index, name in enumerate(ENGINE_NAMES)}
PLAN = {"days": [{"day": 1, "activities": ["walk"]}], "plan_file": "artifacts/plan.md", "__SKILL_DONE__": True}


@pytest.fixture
def keyed(configure_engine, fake_codex):
    for name, key in KEYS.items():
        configure_engine(name, api_key=key)
    return fake_codex


@pytest.fixture
def leaky_run(api, install_skill, keyed, caplog):
    """An interactive run whose engine echoes the codex key in its question, answer and output,
    and dumps its environment."""
    caplog.set_level(logging.DEBUG)
    install_skill("trip-planner")
    key = KEYS["codex"]
    keyed.script(
        {
            "message": f"I found OPENAI_API_KEY={key} in my environment. Where to?",
            "stderr": f"auth with {key}\n",
            "echo_env": "engine-env.json",  # in the run dir, where a sandboxed engine may write
        },
        {
            "files": {"artifacts/plan.md": "# Oslo\n"},
            "message": json.dumps({**PLAN, "destination": f"Oslo via {key}"}),
            "stderr": f"still {key}\n",
        },
    )
    response = api.post(
        "/v1/jobs",
        {
            "skill_id": "trip-planner",
            "engine": "codex",
            "input": {},
            "runtime_options": {"execution_mode": "interactive"},
        },
        format="json",
    )
    rid = response.json()["request_id"]
    pending = api.get(f"/v1/jobs/{rid}/interaction/pending")
    reply = api.post(f"/v1/jobs/{rid}/interaction/reply", {"interaction_id": 1, "response": "Oslo"}, format="json")
    assert reply.status_code == 200, reply.content
    from runs.models import Run

    env_dump = Run.objects.get(pk=rid).run_dir / "engine-env.json"
    return {"rid": rid, "pending": pending, "env": json.loads(env_dump.read_text())}


def _body(response) -> str:
    if not response.streaming:
        return response.content.decode("utf-8", "replace")
    if getattr(response, "is_async", False):
        from asgiref.sync import async_to_sync

        async def collect():
            return [chunk async for chunk in response.streaming_content]

        chunks = async_to_sync(collect)()
    else:
        chunks = list(response.streaming_content)
    return b"".join(c if isinstance(c, bytes) else c.encode() for c in chunks).decode("utf-8", "replace")


def _leaks(texts: dict[str, str]) -> dict[str, list[str]]:
    found = {where: [name for name, key in KEYS.items() if key in text] for where, text in texts.items()}
    return {where: names for where, names in found.items() if names}


def test_engine_echoing_its_key_does_not_leak_it_through_the_api(api, leaky_run):
    rid = leaky_run["rid"]
    assert api.get(f"/v1/jobs/{rid}").json()["status"] == "succeeded"
    doors = {
        "pending": _body(leaky_run["pending"]),
        "events/history": _body(api.get(f"/v1/jobs/{rid}/events/history?after_seq=0")),
        "events (SSE)": _body(api.get(f"/v1/jobs/{rid}/events")),
        "interaction/history": _body(api.get(f"/v1/jobs/{rid}/interaction/history")),
        "result": _body(api.get(f"/v1/jobs/{rid}/result")),
        "logs": _body(api.get(f"/v1/jobs/{rid}/logs")),
        "status": _body(api.get(f"/v1/jobs/{rid}")),
    }
    with zipfile.ZipFile(io.BytesIO(b"".join(api.get(f"/v1/jobs/{rid}/bundle").streaming_content))) as bundle:
        doors.update({f"bundle:{name}": bundle.read(name).decode("utf-8", "replace") for name in bundle.namelist()})
    assert (
        "Where to?" in doors["pending"] and "Oslo via" in doors["result"]
    )  # the content is there, only the key is not
    assert _leaks(doors) == {}


def test_engine_echoing_its_key_does_not_leak_it_through_the_admin(admin_user, leaky_run):
    from runs.models import Interaction, RunEvent

    client = Client()
    client.force_login(admin_user)
    rid = leaky_run["rid"]
    pages = {
        "run": client.get(f"/admin/runs/run/{rid}/change/"),
        "run list search": client.get("/admin/runs/run/", {"q": "Oslo"}),
        "interaction": client.get(f"/admin/runs/interaction/{Interaction.objects.get(run_id=rid).pk}/change/"),
        "interaction list": client.get("/admin/runs/interaction/"),
        **{
            f"event {e.seq}": client.get(f"/admin/runs/runevent/{e.pk}/change/")
            for e in RunEvent.objects.filter(run_id=rid)
        },
    }
    assert {name: r.status_code for name, r in pages.items() if r.status_code != 200} == {}
    assert _leaks({name: _body(r) for name, r in pages.items()}) == {}


def test_server_log_output_never_carries_keys_or_tokens(api, leaky_run, caplog):
    from rest_framework.test import APIClient

    stranger = APIClient()
    stranger.credentials(HTTP_AUTHORIZATION="Token sr_deadbeefAAAAAAAAAAAAAAAAAAAAAAAAAAAA")
    stranger.get(f"/v1/jobs/{leaky_run['rid']}")
    api.get(f"/v1/jobs/{leaky_run['rid']}/logs")
    text = "\n".join(record.getMessage() for record in caplog.records) + caplog.text
    assert _leaks({"log": text}) == {}
    assert api.token_key not in text and "sr_deadbeefAAAA" not in text


def test_an_engine_gets_no_key_but_its_relays_placeholder(leaky_run, settings):
    """R-EN5/R-EN8, R-SB8: no configured key reaches the engine, not even its own: it holds a
    placeholder that its provider relay alone turns into the key."""
    env = leaky_run["env"]
    values = set(env.values())
    assert [name for name in KEYS if any(KEYS[name] in value for value in values)] == []
    assert env["SKILLRUNNER_PROVIDER_API_KEY"].startswith("skillrunner-placeholder-")
    assert settings.SECRET_KEY not in values and not any(settings.SECRET_KEY in v for v in values)
