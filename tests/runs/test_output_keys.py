"""R-SB10's last sentence: a configured provider key in what the agent left (its artifacts, its
answer, its output) is never served. It is redacted in the artifact download, the preview, the
bundle, the result and the logs, and recorded once per place as a `security` event that the
run's owner reads in the event history and staff find in the admin."""

from __future__ import annotations

import io
import json
import zipfile

import pytest
from django.test import Client

from kernel.logging import READ_BYTES, REDACTED, ValueRedactor

pytestmark = pytest.mark.django_db(transaction=True)

KEY = "sk-operator-provider-key-4c1d9e0b7a"
LATER_KEY = "gemini-key-configured-after-the-run-93f0"
MARKER = REDACTED.encode()
HAIKU = {"topic": "sea", "haiku": ["waves fold", "into the grey", "morning"], "haiku_file": "artifacts/haiku.md"}


@pytest.fixture
def haiku(install_skill, fake_codex, configure_engine):
    install_skill("haiku-writer")
    configure_engine("codex", api_key=KEY)
    return fake_codex


def _body(response) -> bytes:
    return b"".join(response.streaming_content) if response.streaming else response.content


def _start(api, haiku, **step) -> str:
    haiku.script(step)
    response = api.post(
        "/v1/jobs", {"skill_id": "haiku-writer", "engine": "codex", "input": {"topic": "sea"}}, format="json"
    )
    rid = response.json()["request_id"]
    assert api.get(f"/v1/jobs/{rid}").json()["status"] == "succeeded", api.get(f"/v1/jobs/{rid}/result").json()
    return rid


def _findings(api, rid) -> list[dict]:
    events = api.get(f"/v1/jobs/{rid}/events/history", {"after_seq": 0}).json()["events"]
    return [event["payload"] for event in events if event["kind"] == "security"]


def _run_dir(rid):
    from runs.models import Run

    return Run.objects.get(pk=rid).run_dir


@pytest.fixture
def leaky(api, haiku):
    """A run whose agent wrote the key into its artifact, its final JSON answer and its output."""
    return _start(
        api,
        haiku,
        files={"artifacts/haiku.md": f"waves fold\n{KEY}\nmorning\n", "artifacts/notes/raw.bin": f"\x00\xff{KEY}\x01"},
        message=json.dumps({**HAIKU, "topic": f"sea {KEY}"}),
        stderr=f"using {KEY}\n",
    )


def test_a_key_the_agent_wrote_is_redacted_wherever_the_run_is_served(api, leaky):
    artifact = _body(api.get(f"/v1/jobs/{leaky}/artifacts/artifacts/haiku.md"))
    assert artifact == f"waves fold\n{REDACTED}\nmorning\n".encode()
    assert _body(api.get(f"/v1/jobs/{leaky}/artifacts/notes/raw.bin")) == f"\x00\xff{REDACTED}\x01".encode()

    result = _body(api.get(f"/v1/jobs/{leaky}/result"))
    assert KEY.encode() not in result and MARKER in result

    logs = api.get(f"/v1/jobs/{leaky}/logs").json()
    assert KEY not in json.dumps(logs) and REDACTED in logs["stdout"] and REDACTED in logs["stderr"]

    with zipfile.ZipFile(io.BytesIO(_body(api.get(f"/v1/jobs/{leaky}/bundle")))) as bundle:
        members = {name: bundle.read(name) for name in bundle.namelist()}
    assert set(members) == {"result/result.json", "artifacts/haiku.md", "artifacts/notes/raw.bin"}
    assert {name: KEY.encode() in data or MARKER not in data for name, data in members.items()} == dict.fromkeys(
        members, False
    )

    # Redacted where the agent left it, at the turn's end (not only on the way out).
    assert KEY.encode() not in (_run_dir(leaky) / "artifacts" / "haiku.md").read_bytes()

    # Upstream's paths to the run's files (R-UP10) too: a file's preview and the debug bundle.
    late = _run_dir(leaky) / "left.txt"  # where no turn's end looked
    late.write_text(f"left {KEY}\n")
    shown = api.get(f"/v1/jobs/{leaky}/file", {"path": "left.txt"}).json()["preview"]
    assert shown["content"] == f"left {REDACTED}\n"
    with zipfile.ZipFile(io.BytesIO(_body(api.get(f"/v1/jobs/{leaky}/bundle/debug")))) as debug:
        assert not [name for name in debug.namelist() if KEY.encode() in debug.read(name)]


def test_each_place_a_key_was_found_is_recorded_once_however_often_it_is_served(api, leaky, client, alice):
    client.force_login(alice)
    for _ in range(3):
        assert _body(api.get(f"/v1/jobs/{leaky}/artifacts/haiku.md")).count(MARKER) == 1
        assert api.get(f"/v1/jobs/{leaky}/bundle").status_code == 200
        assert REDACTED in client.get(f"/runs/{leaky}/preview/artifacts/haiku.md").content.decode()
    findings = _findings(api, leaky)
    assert sorted(finding["path"] for finding in findings) == [
        "artifacts/haiku.md",
        "artifacts/notes/raw.bin",
        "logs/attempt-1.stderr.txt",
        "logs/attempt-1.stdout.txt",
        "result",
    ]
    assert {(f["attempt"], f["source"], f["reason"]) for f in findings} == {(1, "output", "PROVIDER_KEY_IN_OUTPUT")}
    assert KEY not in json.dumps(findings)


def test_a_file_written_after_the_turn_or_a_key_configured_later_is_still_never_served(
    api, leaky, configure_engine, client, alice
):
    """The guard where files are served: what the turn's end could not have seen."""
    configure_engine("gemini", api_key=LATER_KEY)
    late = _run_dir(leaky) / "artifacts" / "late.md"  # as a resident process might write while its run waits
    late.write_text(f"# Late\n{KEY} and {LATER_KEY}\n")
    bundle_before = _body(api.get(f"/v1/jobs/{leaky}/bundle"))

    for _ in range(2):
        download = _body(api.get(f"/v1/jobs/{leaky}/artifacts/late.md"))
        assert download == f"# Late\n{REDACTED} and {REDACTED}\n".encode()
    client.force_login(alice)
    preview = client.get(f"/runs/{leaky}/preview/artifacts/late.md").content.decode()
    assert KEY not in preview and LATER_KEY not in preview and REDACTED in preview
    with zipfile.ZipFile(io.BytesIO(bundle_before)) as bundle:
        late_member = bundle.read("artifacts/late.md")
    assert late_member == f"# Late\n{REDACTED} and {REDACTED}\n".encode()

    configure_engine("claude", api_key="claude-key-after-the-bundle-was-built-11")
    late.write_text("claude-key-after-the-bundle-was-built-11\n")  # a new key: the bundle is built again
    with zipfile.ZipFile(io.BytesIO(_body(api.get(f"/v1/jobs/{leaky}/bundle")))) as bundle:
        assert bundle.read("artifacts/late.md") == MARKER + b"\n"
    assert [f["path"] for f in _findings(api, leaky)].count("artifacts/late.md") == 1


def test_a_key_cut_by_a_read_of_a_large_artifact_is_still_redacted(api, haiku):
    # At the turn's end the file is read in READ_BYTES pieces; served, in FileResponse's blocks.
    borders = [READ_BYTES, 2 * READ_BYTES, 4096 * 300 + 1]
    content = bytearray(b"." * (3 * READ_BYTES))
    for border in borders:
        start = border - len(KEY) // 2
        content[start : start + len(KEY)] = KEY.encode()
    rid = _start(api, haiku, files={"artifacts/haiku.md": content.decode()}, message=json.dumps(HAIKU))
    expected = bytes(content).replace(KEY.encode(), MARKER)
    assert (_run_dir(rid) / "artifacts" / "haiku.md").read_bytes() == expected

    # Written after the turn, so only the download's guard sees it; not UTF-8, and kept so.
    later = bytearray(b"\xff\xfe-" * READ_BYTES)
    for border in (4096, 4096 * 77, READ_BYTES):
        start = border - 5
        later[start : start + len(KEY)] = KEY.encode()
    (_run_dir(rid) / "artifacts" / "late.bin").write_bytes(bytes(later))
    assert _body(api.get(f"/v1/jobs/{rid}/artifacts/late.bin")) == bytes(later).replace(KEY.encode(), MARKER)


@pytest.mark.parametrize("size", [1, 2, 7, 4096])
def test_the_redactor_finds_a_key_however_the_bytes_are_cut(size):
    data = f"head {KEY} middle {KEY}{KEY} tail".encode()
    redactor = ValueRedactor((KEY, "abc"))  # a shorter key beside it: the longest sets what is held back
    out = b"".join(redactor.feed(data[i : i + size]) for i in range(0, len(data), size)) + redactor.feed(b"", True)
    assert out == data.replace(KEY.encode(), MARKER) and redactor.found == 3


def test_owners_see_their_security_events_and_others_do_not(api, bob_api, leaky):
    assert any(f["path"] == "artifacts/haiku.md" for f in _findings(api, leaky))
    assert bob_api.get(f"/v1/jobs/{leaky}/events/history").status_code == 404


def test_staff_find_the_runs_with_security_events_in_the_admin(api, haiku, leaky, admin_user):
    clean = _start(api, haiku, files={"artifacts/haiku.md": "a\nb\nc\n"}, message=json.dumps(HAIKU))
    staff = Client()
    staff.force_login(admin_user)

    def listed(query: str) -> set[str]:
        page = staff.get(f"/admin/runs/run/{query}").content.decode()
        return {rid for rid in (leaky, clean) if f">{rid[:8]}<" in page}

    assert listed("") == {leaky, clean}
    assert listed("?security=yes") == {leaky}
    assert listed("?security=no") == {clean}
    page = staff.get("/admin/runs/run/").content.decode()
    assert "security events" in page and "column-security" in page
    change = staff.get(f"/admin/runs/run/{leaky}/change/").content.decode()
    assert "PROVIDER_KEY_IN_OUTPUT" in change and KEY not in change
