"""File replies (R-UP6): POST /v1/jobs/{id}/interaction/reply/files, multipart `metadata` (JSON)
plus repeated `files`, within the limits the handshake announces (R-UP3). The files land in the
run directory, the agent reads their paths after the reply's text, and the reply is decided like
every other (R-LC5): idempotency keys, 409s, ownership."""

from __future__ import annotations

import hashlib
import json
import urllib.parse
from pathlib import Path
from typing import Any

import pytest
from django.urls import reverse
from rest_framework.test import APIClient

from kernel.throttles import REPLY_SCOPE
from tests.support.conversations import (
    AUTO_FRESH,
    PLAN,
    QUESTION,
    ask,
    error_code,
    haiku_done,
    history_of,
    pending_of,
    reply,
    start,
    status_of,
)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(60)]

BOUNDARY = "reply-files-test-boundary-7f3a"
HEADING = "Files attached to this reply (in the run directory):"


def _part(disposition: str, content: bytes) -> bytes:
    return f"--{BOUNDARY}\r\nContent-Disposition: {disposition}\r\n\r\n".encode() + content + b"\r\n"


def file_part(name: str, content: bytes, *, encoded: bool = False) -> bytes:
    """A `files` part; `encoded` sends the name as RFC 2231 `filename*` (any character, a newline too)."""
    if encoded:
        return _part(f"form-data; name=\"files\"; filename*=UTF-8''{urllib.parse.quote(name)}", content)
    return _part(f'form-data; name="files"; filename="{name}"', content)


def metadata_part(metadata: Any) -> bytes:
    text = metadata if isinstance(metadata, str) else json.dumps(metadata)
    return _part('form-data; name="metadata"', text.encode())


def post_parts(client, request_id: str, *parts: bytes):
    body = b"".join(parts) + f"--{BOUNDARY}--\r\n".encode()
    return client.generic(
        "POST",
        f"/v1/jobs/{request_id}/interaction/reply/files",
        body,
        content_type=f"multipart/form-data; boundary={BOUNDARY}",
    )


def reply_files(client, request_id: str, metadata: Any, files: list[tuple[str, bytes]] = ()):
    return post_parts(client, request_id, metadata_part(metadata), *(file_part(n, c) for n, c in files))


def run_dir(request_id: str) -> Path:
    from runs.models import Run

    return Run.objects.get(pk=request_id).run_dir


def prompts(fake_codex) -> list[str]:
    return [call["prompt"] for call in fake_codex.invocations()]


def staging_left(settings) -> list[Path]:
    staging = Path(settings.DATA_DIR) / "reply-staging"
    return list(staging.iterdir()) if staging.exists() else []


def assert_nothing_written(client, request_id: str, settings, fake_codex, turns: int = 1) -> None:
    """The refused reply changed nothing: still waiting on question 1, no files anywhere, no turn."""
    status = status_of(client, request_id)
    assert status["status"] == "waiting_user" and status["pending_interaction_id"] == 1
    assert history_of(client, request_id)[0]["response"] is None
    assert not (run_dir(request_id) / "reply-files").exists()
    assert staging_left(settings) == []
    assert len(fake_codex.invocations()) == turns


@pytest.fixture
def waiting(api, install_skill, fake_codex) -> str:
    """A haiku run waiting on question 1; its next turn answers."""
    install_skill("haiku-writer")
    fake_codex.script(ask("Which sea?"), haiku_done())
    request_id = start(api, "haiku-writer")
    assert pending_of(api, request_id)["interaction_id"] == 1
    return request_id


def test_two_files_resume_the_run_and_the_agent_reads_them_at_the_listed_paths(
    api, install_skill, fake_codex, settings
):
    install_skill("haiku-writer")
    # The resumed turn copies one reply file where the test can see it: the agent, in its
    # sandbox, really reads the file at the path it was told.
    fake_codex.script(ask("Which sea?"), haiku_done(shell="cat reply-files/1/notes.txt > seen.txt"))
    request_id = start(api, "haiku-writer")
    notes, photo = b"the Baltic, in winter\n", bytes(range(256)) * 4

    response = reply_files(
        api, request_id, {"interaction_id": 1, "text": "See my notes."}, [("notes.txt", notes), ("photo.jpg", photo)]
    )

    assert response.status_code == 200, response.content
    assert response.json() == {"request_id": request_id, "status": "queued", "accepted": True, "mode": "interaction"}
    assert status_of(api, request_id)["status"] == "succeeded"
    assert prompts(fake_codex)[1] == (
        f"See my notes.\n\n{HEADING}\n- reply-files/1/notes.txt\n- reply-files/1/photo.jpg"
    )
    folder = run_dir(request_id) / "reply-files" / "1"
    assert (folder / "notes.txt").read_bytes() == notes and (folder / "photo.jpg").read_bytes() == photo
    assert (run_dir(request_id) / "seen.txt").read_bytes() == notes
    assert history_of(api, request_id)[0]["response"] == {
        "text": "See my notes.",
        "files": [
            {
                "name": "notes.txt",
                "path": "reply-files/1/notes.txt",
                "size_bytes": len(notes),
                "sha256": hashlib.sha256(notes).hexdigest(),
            },
            {
                "name": "photo.jpg",
                "path": "reply-files/1/photo.jpg",
                "size_bytes": len(photo),
                "sha256": hashlib.sha256(photo).hexdigest(),
            },
        ],
    }
    assert staging_left(settings) == []


def test_files_without_text_give_the_agent_just_their_list(api, waiting, fake_codex):
    response = reply_files(api, waiting, {"interaction_id": 1}, [("sea.md", b"# North Sea\n")])
    assert response.status_code == 200, response.content
    assert prompts(fake_codex)[1] == f"{HEADING}\n- reply-files/1/sea.md"
    assert history_of(api, waiting)[0]["response"]["text"] == ""


def test_text_only_reply_is_an_ordinary_reply(api, waiting, fake_codex):
    """No files: the reply is its text, recorded and prompted exactly as the JSON reply would."""
    response = reply_files(api, waiting, {"interaction_id": 1, "text": "The Baltic, please"})
    assert response.status_code == 200, response.content
    assert status_of(api, waiting)["status"] == "succeeded"
    assert prompts(fake_codex)[1] == "The Baltic, please"
    assert history_of(api, waiting)[0]["response"] == "The Baltic, please"
    assert not (run_dir(waiting) / "reply-files").exists()


def test_upstreams_metadata_message_and_bindings_are_understood(api, waiting, fake_codex):
    """Upstream's client sends `message` for the text and binds files to slots; both are taken."""
    metadata = {
        "interaction_id": 1,
        "idempotency_key": "upstream-1",
        "message": "Here is the paper",
        "bindings": [{"slot": "paper", "file_index": 0}],
    }
    response = reply_files(api, waiting, metadata, [("paper.pdf", b"%PDF-1.7\n")])
    assert response.status_code == 200, response.content
    assert prompts(fake_codex)[1] == f"Here is the paper\n\n{HEADING}\n- reply-files/1/paper.pdf"
    assert (run_dir(waiting) / "reply-files" / "1" / "paper.pdf").read_bytes() == b"%PDF-1.7\n"


def test_text_and_message_together_are_refused(api, waiting, fake_codex, settings):
    response = reply_files(api, waiting, {"interaction_id": 1, "text": "a", "message": "b"}, [("a.txt", b"a")])
    assert response.status_code == 400 and error_code(response) == "VALIDATION_ERROR"
    assert_nothing_written(api, waiting, settings, fake_codex)


@pytest.mark.parametrize(
    "limits, files, code",
    [
        pytest.param(
            {"SKILLRUNNER_REPLY_MAX_FILES": 2},
            [("a", b"1"), ("b", b"2"), ("c", b"3")],
            "REPLY_FILES_TOO_MANY",
            id="count",
        ),
        pytest.param(
            {"SKILLRUNNER_REPLY_MAX_FILE_BYTES": 10},
            [("small", b"x" * 10), ("big", b"x" * 11)],
            "REPLY_FILE_TOO_LARGE",
            id="one-file",
        ),
        pytest.param(
            {"SKILLRUNNER_REPLY_MAX_FILE_BYTES": 10, "SKILLRUNNER_REPLY_MAX_TOTAL_BYTES": 15},
            [("a", b"x" * 8), ("b", b"x" * 8)],
            "REPLY_FILES_TOO_LARGE",
            id="total",
        ),
    ],
)
def test_the_limits_the_handshake_announces_are_enforced_and_leave_nothing(
    api, waiting, fake_codex, settings, limits, files, code
):
    for name, value in limits.items():
        setattr(settings, name, value)
    handshake = api.post(
        "/v1/system/handshake",
        {
            "schema": "zotero-agents.skillrunner-handshake.request.v1",
            "requested_protocols": ["skillrunner.interaction-files.v1"],
        },
        format="json",
    ).json()["protocols"]["skillrunner.interaction-files.v1"]
    announced = {"max_files": 8, "max_file_bytes": 10 * 1024 * 1024, "max_total_bytes": 25 * 1024 * 1024}
    announced.update({key.removeprefix("SKILLRUNNER_REPLY_").lower(): value for key, value in limits.items()})
    assert handshake == {"supported": True, **announced}

    response = reply_files(api, waiting, {"interaction_id": 1, "text": "files"}, files)

    assert response.status_code == 413, response.content
    assert error_code(response) == code
    assert_nothing_written(api, waiting, settings, fake_codex)
    # Within the limits the same request goes through.
    assert reply_files(api, waiting, {"interaction_id": 1, "text": "files"}, files[:1]).status_code == 200


@pytest.mark.parametrize(
    "sent, saved",
    [
        pytest.param("../escape.txt", "escape.txt", id="parent"),
        pytest.param("../../../../etc/passwd", "passwd", id="deep-parent"),
        pytest.param("a/b.txt", "b.txt", id="directories"),
        pytest.param("..\\..\\win.txt", "win.txt", id="backslashes"),
        pytest.param("/abs/olute.txt", "olute.txt", id="absolute"),
        pytest.param("  padded.txt ", "padded.txt", id="blanks"),
        pytest.param("京都 notes.txt", "京都 notes.txt", id="unicode"),
    ],
)
def test_file_names_lose_their_directories(api, waiting, sent, saved):
    response = post_parts(api, waiting, metadata_part({"interaction_id": 1}), file_part(sent, b"content", encoded=True))
    assert response.status_code == 200, response.content
    folder = run_dir(waiting) / "reply-files" / "1"
    assert [p.name for p in folder.iterdir()] == [saved]
    assert (folder / saved).read_bytes() == b"content"
    assert history_of(api, waiting)[0]["response"]["files"][0]["path"] == f"reply-files/1/{saved}"


@pytest.mark.parametrize(
    "sent",
    [
        pytest.param("..", id="dot-dot"),
        pytest.param("a/..", id="ends-in-dot-dot"),
        pytest.param("dir/", id="ends-in-slash"),
        pytest.param(".", id="dot"),
        pytest.param("   ", id="blank"),
        pytest.param("bell\x07.txt", id="control"),
        pytest.param("two\nlines.txt", id="newline"),
        pytest.param("nul\x00.txt", id="nul"),
        pytest.param("evil\u202etxt.exe", id="bidi-override"),
        pytest.param("x" * 201, id="too-long"),
    ],
)
def test_unusable_file_names_are_refused(api, waiting, fake_codex, settings, sent):
    response = post_parts(
        api,
        waiting,
        metadata_part({"interaction_id": 1}),
        file_part("ok.txt", b"1"),
        file_part(sent, b"2", encoded=True),
    )
    assert response.status_code == 400, response.content
    assert error_code(response) == "REPLY_FILES_INVALID"
    assert_nothing_written(api, waiting, settings, fake_codex)


def test_a_files_part_without_a_file_name_is_refused(api, waiting, fake_codex, settings):
    """`filename=""` is what a browser sends for an empty file input: not a file at all."""
    response = post_parts(api, waiting, metadata_part({"interaction_id": 1}), file_part("", b"something"))
    assert response.status_code == 400 and error_code(response) == "REPLY_FILES_INVALID"
    assert_nothing_written(api, waiting, settings, fake_codex)


def test_clashing_names_are_kept_apart(api, waiting):
    files = [("a.txt", b"1"), ("dir/a.txt", b"2"), ("a-2.txt", b"3"), ("a.txt", b"4")]
    assert reply_files(api, waiting, {"interaction_id": 1}, files).status_code == 200
    folder = run_dir(waiting) / "reply-files" / "1"
    contents = {p.name: p.read_bytes() for p in folder.iterdir()}
    assert contents == {"a.txt": b"1", "a-2.txt": b"2", "a-2-2.txt": b"3", "a-3.txt": b"4"}
    names = [f["name"] for f in history_of(api, waiting)[0]["response"]["files"]]
    assert names == ["a.txt", "a-2.txt", "a-2-2.txt", "a-3.txt"]


def test_a_link_the_agent_left_at_reply_files_is_never_followed(api, install_skill, fake_codex, settings, tmp_path):
    """The agent owns its run directory: `reply-files` may be a link out of it. The files are then
    not placed (409), nothing lands where the link points, and the run still waits."""
    outside = tmp_path / "outside"
    outside.mkdir()
    install_skill("haiku-writer")
    fake_codex.script(ask("Which sea?", links={"reply-files": str(outside)}), haiku_done())
    request_id = start(api, "haiku-writer")

    response = reply_files(api, request_id, {"interaction_id": 1, "text": "t"}, [("a.txt", b"secret")])

    assert response.status_code == 409 and error_code(response) == "REPLY_FILES_PATH_TAKEN"
    assert list(outside.iterdir()) == []
    assert (run_dir(request_id) / "reply-files").is_symlink()
    status = status_of(api, request_id)
    assert status["status"] == "waiting_user" and status["pending_interaction_id"] == 1
    assert staging_left(settings) == []
    # The same answer as text still gets through.
    assert reply(api, request_id, 1, "t").status_code == 200


def test_reply_when_not_waiting_is_409_like_the_json_reply(api, waiting, fake_codex, settings):
    assert reply_files(api, waiting, {"interaction_id": 1, "text": "first"}).status_code == 200
    assert status_of(api, waiting)["status"] == "succeeded"
    late = reply_files(api, waiting, {"interaction_id": 1, "text": "late"}, [("a.txt", b"a")])
    assert late.status_code == 409 and error_code(late) == "RUN_NOT_WAITING"
    json_late = reply(api, waiting, 1, "late")
    assert json_late.status_code == 409 and error_code(json_late) == "RUN_NOT_WAITING"
    assert not (run_dir(waiting) / "reply-files").exists()
    assert staging_left(settings) == []


def test_reply_to_an_auto_run_is_400(api, install_skill, fake_codex, settings):
    install_skill("haiku-writer")
    fake_codex.script(haiku_done())
    request_id = start(api, "haiku-writer", runtime_options=AUTO_FRESH)
    response = reply_files(api, request_id, {"interaction_id": 1}, [("a.txt", b"a")])
    assert response.status_code == 400 and error_code(response) == "RUN_NOT_INTERACTIVE"
    assert staging_left(settings) == []


def test_wrong_interaction_id_is_409_and_writes_nothing(api, waiting, fake_codex, settings):
    response = reply_files(api, waiting, {"interaction_id": 2, "text": "t"}, [("a.txt", b"a")])
    assert response.status_code == 409 and error_code(response) == "INTERACTION_STALE"
    assert response.json()["detail"]["pending_interaction_id"] == 1
    assert_nothing_written(api, waiting, settings, fake_codex)


def test_same_key_and_same_files_replay_the_answer_and_other_files_are_409(api, install_skill, fake_codex, settings):
    install_skill("haiku-writer")
    fake_codex.script(ask("First?"), ask("Second?"), haiku_done())
    request_id = start(api, "haiku-writer")
    metadata = {"interaction_id": 1, "idempotency_key": "k-1", "text": "here"}
    first = reply_files(api, request_id, metadata, [("a.txt", b"one")])
    assert first.status_code == 200, first.content
    turns = len(fake_codex.invocations())

    for _ in range(2):
        again = reply_files(api, request_id, metadata, [("a.txt", b"one")])
        assert again.status_code == 200, again.content
        assert again.json() == {
            "request_id": request_id,
            "status": "waiting_user",
            "accepted": True,
            "mode": "interaction",
        }
    for other in ([("a.txt", b"two")], [("b.txt", b"one")], [("a.txt", b"one"), ("b.txt", b"")], []):
        conflict = reply_files(api, request_id, metadata, other)
        assert conflict.status_code == 409 and error_code(conflict) == "IDEMPOTENCY_KEY_REUSED", other
    text_changed = reply_files(api, request_id, {**metadata, "text": "there"}, [("a.txt", b"one")])
    assert text_changed.status_code == 409 and error_code(text_changed) == "IDEMPOTENCY_KEY_REUSED"

    assert len(fake_codex.invocations()) == turns
    status = status_of(api, request_id)
    assert status["pending_interaction_id"] == 2 and status["attempt_number"] == 2
    folder = run_dir(request_id) / "reply-files"
    assert [p.relative_to(folder).as_posix() for p in folder.rglob("*")] == ["1", "1/a.txt"]
    assert (folder / "1" / "a.txt").read_bytes() == b"one"
    assert staging_left(settings) == []


def test_another_users_run_is_404_and_nothing_is_written(api, bob_api, waiting, fake_codex, settings):
    response = reply_files(bob_api, waiting, {"interaction_id": 1, "text": "mine"}, [("a.txt", b"a")])
    assert response.status_code == 404 and error_code(response) == "RUN_NOT_FOUND"
    assert_nothing_written(api, waiting, settings, fake_codex)


@pytest.mark.parametrize(
    "parts, code",
    [
        pytest.param([metadata_part("{not json")], "REPLY_METADATA_INVALID", id="not-json"),
        pytest.param([metadata_part("[1]")], "REPLY_METADATA_INVALID", id="array"),
        pytest.param([metadata_part("[" * 100_000)], "REPLY_METADATA_INVALID", id="deep-nesting"),
        pytest.param(
            [metadata_part({"interaction_id": 1, "text": "t", "reponse": "x", "extra": 1})],
            "REPLY_METADATA_INVALID",
            id="unknown-keys",
        ),
        pytest.param([metadata_part({"text": "t"})], "VALIDATION_ERROR", id="no-interaction-id"),
        pytest.param([metadata_part({"interaction_id": 0, "text": "t"})], "VALIDATION_ERROR", id="interaction-id-0"),
        pytest.param([metadata_part({"interaction_id": 1, "text": ["t"]})], "VALIDATION_ERROR", id="text-list"),
        pytest.param([metadata_part({"interaction_id": 1, "bindings": "x"})], "VALIDATION_ERROR", id="bindings"),
        pytest.param([metadata_part({"interaction_id": 1})], "REPLY_FILES_INVALID", id="nothing-to-say"),
        pytest.param([file_part("a.txt", b"a")], "REPLY_METADATA_INVALID", id="no-metadata"),
        pytest.param(
            [metadata_part({"interaction_id": 1}), metadata_part({"interaction_id": 1})],
            "REPLY_METADATA_INVALID",
            id="two-metadata",
        ),
        pytest.param(
            [metadata_part({"interaction_id": 1, "text": "t"}), _part('form-data; name="note"', b"x")],
            "REPLY_FILES_INVALID",
            id="unknown-part",
        ),
        pytest.param(
            [metadata_part({"interaction_id": 1}), _part('form-data; name="file"; filename="a.txt"', b"x")],
            "REPLY_FILES_INVALID",
            id="file-in-another-part",
        ),
    ],
)
def test_malformed_requests_are_400_and_change_nothing(api, waiting, fake_codex, settings, parts, code):
    response = post_parts(api, waiting, *parts)
    assert response.status_code == 400, response.content
    assert error_code(response) == code
    assert_nothing_written(api, waiting, settings, fake_codex)


def test_a_json_body_is_415(api, waiting, fake_codex, settings):
    response = api.post(
        f"/v1/jobs/{waiting}/interaction/reply/files", {"interaction_id": 1, "text": "t"}, format="json"
    )
    assert response.status_code == 415
    assert_nothing_written(api, waiting, settings, fake_codex)


def test_a_session_needs_csrf_and_its_files_are_received_the_same_way(alice, api, waiting, fake_codex, settings):
    """A session's CSRF check reads the body during authentication, before the view: the files are
    still judged and staged by the reply's own rules, and a refused request leaves nothing."""
    client = APIClient(enforce_csrf_checks=True)
    client.force_login(alice)
    client.get(reverse("ui:run-list"))
    token = client.cookies["csrftoken"].value

    refused = reply_files(client, waiting, {"interaction_id": 1, "text": "t"}, [("a.txt", b"a")])
    assert refused.status_code == 403
    assert_nothing_written(api, waiting, settings, fake_codex)
    client.credentials(HTTP_X_CSRFTOKEN=token)
    hostile = post_parts(
        client, waiting, metadata_part({"interaction_id": 1}), file_part("bell\x07.txt", b"x", encoded=True)
    )
    assert hostile.status_code == 400 and error_code(hostile) == "REPLY_FILES_INVALID"
    assert_nothing_written(api, waiting, settings, fake_codex)
    settings.SKILLRUNNER_REPLY_MAX_FILES = 1
    too_many = reply_files(client, waiting, {"interaction_id": 1}, [("a.txt", b"a"), ("b.txt", b"b")])
    assert too_many.status_code == 413 and error_code(too_many) == "REPLY_FILES_TOO_MANY"
    assert_nothing_written(api, waiting, settings, fake_codex)

    accepted = reply_files(client, waiting, {"interaction_id": 1, "text": "t"}, [("../a.txt", b"a")])
    assert accepted.status_code == 200, accepted.content
    assert (run_dir(waiting) / "reply-files" / "1" / "a.txt").read_bytes() == b"a"
    assert staging_left(settings) == []


@pytest.fixture
def two_replies_a_minute(monkeypatch, alice):
    from rest_framework.throttling import SimpleRateThrottle

    from tests.support.throttling import forget_throttling

    forget_throttling(alice)
    monkeypatch.setattr(SimpleRateThrottle, "THROTTLE_RATES", {REPLY_SCOPE: "2/min"})
    yield
    forget_throttling(alice)


def test_file_replies_count_toward_the_reply_rate_limit(api, waiting, fake_codex, settings, two_replies_a_minute):
    """One limit for every way of replying: a JSON reply and a file reply use it up, the next file
    reply is refused before its body is read."""
    assert reply(api, waiting, 99, "stale").status_code == 409
    assert reply_files(api, waiting, {"interaction_id": 99, "text": "stale"}).status_code == 409
    refused = reply_files(api, waiting, {"interaction_id": 1, "text": "t"}, [("a.txt", b"a")])
    assert refused.status_code == 429 and error_code(refused) == "RATE_LIMITED"
    assert_nothing_written(api, waiting, settings, fake_codex)


def test_the_openapi_document_describes_the_multipart_body(api):
    document = api.get("/v1/schema/", {"format": "json"}).json()
    body = document["paths"]["/v1/jobs/{request_id}/interaction/reply/files"]["post"]["requestBody"]
    ref = body["content"]["multipart/form-data"]["schema"]["$ref"].rsplit("/", 1)[-1]
    assert {"metadata", "files"} <= set(document["components"]["schemas"][ref]["properties"])


@pytest.mark.real_engine
@pytest.mark.timeout(120)
def test_a_sticky_claude_run_gets_the_files_in_its_live_process(api, trip, claude, background_runs):
    """sticky_process (R-LC7): the reply and its file list go to the process that asked, which
    reads the file at the listed path."""
    claude.set_script(
        [
            {"text": QUESTION},
            {"shell": "cat reply-files/1/dates.txt > seen.txt"},
            {"shell": "printf '# Kyoto\\n\\nDay 1: Fushimi Inari at dawn\\n' > artifacts/plan.md"},
            {"text": json.dumps({**PLAN, "__SKILL_DONE__": True})},
        ]
    )
    sticky = background_runs(engine="claude")
    assert sticky.wait_for(api, {"waiting_user", "failed", "succeeded"})["status"] == "waiting_user"

    response = reply_files(api, sticky.request_id, {"interaction_id": 1, "text": "Kyoto"}, [("dates.txt", b"May\n")])

    assert response.status_code == 200 and response.json()["status"] == "running", response.content
    assert sticky.wait_for(api, {"succeeded", "failed"})["status"] == "succeeded"
    sticky.join()
    asked = [r for r in claude.requests if r.step_index is not None][1]
    assert asked.latest_user_text == f"Kyoto\n\n{HEADING}\n- reply-files/1/dates.txt"
    assert (run_dir(sticky.request_id) / "seen.txt").read_bytes() == b"May\n"
