"""Hostile input archives on POST /v1/jobs/{id}/upload (R-SK5 rules applied to run inputs, SPEC §8,
research §5.2). tests/runs/test_uploads.py covers `..`, an absolute name, a symlink, .codex/, .env,
.mcp.json, a ratio bomb and the member cap; these are the variants it does not: the other engines'
control folders, control files below the top level, Windows-style names, a link used as a folder,
duplicates, several small bombs adding up, lying size headers, nested archives.

Each refused upload must name the entry, change nothing on disk, leave the run waiting for its
files, never start the engine, and still accept a clean upload afterwards."""

from __future__ import annotations

import io
import json
import os
import struct
import zipfile

import pytest

from tests.support.jobs import make_zip, tree_state, upload

pytestmark = pytest.mark.django_db(transaction=True)

DOCUMENT = "one two three\nfour five\n"


@pytest.fixture(autouse=True)
def word_count(install_skill):
    install_skill("word-count")


@pytest.fixture
def waiting_run(api):
    response = api.post("/v1/jobs", {"skill_id": "word-count", "engine": "codex", "input": {}}, format="json")
    assert response.status_code == 200 and response.json()["status"] is None, response.content
    return response.json()["request_id"]


def _post(api, rid: str, content: bytes):
    return api.post(f"/v1/jobs/{rid}/upload", {"file": upload("inputs.zip", content)}, format="multipart")


def _zip_with_raw_names(entries: list[tuple[str, bytes]]) -> bytes:
    """zipfile normalises some names on write (backslashes stay, but we want exact control)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, content in entries:
            info = zipfile.ZipInfo(name)
            archive.writestr(info, content)
    return buffer.getvalue()


def _link_then_through(link: str, target: str, through: str) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("document", DOCUMENT)
        info = zipfile.ZipInfo(link)
        info.create_system = 3
        info.external_attr = (0o120777) << 16
        archive.writestr(info, target)
        archive.writestr(through, "written through the link")
    return buffer.getvalue()


def _lie_about_size(content: bytes, name: str, claimed: int) -> bytes:
    data = bytearray(content)
    encoded = name.encode()
    for signature, size_offset, name_offset in ((b"PK\x03\x04", 22, 30), (b"PK\x01\x02", 24, 46)):
        position = data.find(signature)
        while position != -1:
            if data[position + name_offset : position + name_offset + len(encoded)] == encoded:
                struct.pack_into("<I", data, position + size_offset, claimed)
            position = data.find(signature, position + 4)
    return bytes(data)


HOSTILE = {
    "gemini-settings": (
        _zip_with_raw_names(
            [
                ("document", DOCUMENT.encode()),
                (".gemini/settings.json", b'{"security": {"folderTrust": {"enabled": false}}}'),
            ]
        ),
        ".gemini/settings.json",
    ),
    "gemini-env": (
        _zip_with_raw_names([("document", DOCUMENT.encode()), (".gemini/.env", b"GEMINI_API_KEY=x")]),
        ".gemini/.env",
    ),
    "claude-settings": (
        _zip_with_raw_names(
            [("document", DOCUMENT.encode()), (".claude/settings.json", b'{"permissions": {"allow": ["Bash"]}}')]
        ),
        ".claude/settings.json",
    ),
    "iflow-settings": (
        _zip_with_raw_names([("document", DOCUMENT.encode()), (".iflow/settings.json", b"{}")]),
        ".iflow/settings.json",
    ),
    "nested-codex": (
        _zip_with_raw_names(
            [("document", DOCUMENT.encode()), ("docs/.codex/config.toml", b'approval_policy = "never"')]
        ),
        "docs/.codex/config.toml",
    ),
    "nested-env": (_zip_with_raw_names([("document", DOCUMENT.encode()), ("a/b/.env", b"X=1")]), "a/b/.env"),
    "nested-mcp": (
        _zip_with_raw_names([("document", DOCUMENT.encode()), ("deep/.mcp.json", b'{"mcpServers": {}}')]),
        "deep/.mcp.json",
    ),
    "backslash-parent": (
        _zip_with_raw_names([("document", DOCUMENT.encode()), ("..\\..\\evil.txt", b"x")]),
        "evil.txt",
    ),
    "drive-letter": (_zip_with_raw_names([("document", DOCUMENT.encode()), ("C:/evil.txt", b"x")]), "C:/evil.txt"),
    "dot-parent": (_zip_with_raw_names([("document", DOCUMENT.encode()), ("./../evil.txt", b"x")]), "evil.txt"),
    "inner-parent": (_zip_with_raw_names([("document", DOCUMENT.encode()), ("a/../../evil.txt", b"x")]), "evil.txt"),
    "parent-directory-entry": (_zip_with_raw_names([("document", DOCUMENT.encode()), ("../", b"")]), "../"),
    "link-as-folder": (_link_then_through("linkdir", "/tmp", "linkdir/evil.txt"), "linkdir"),
    "link-to-run-dir": (_link_then_through("up", "..", "up/.codex/config.toml"), "up"),
    "duplicate": (_zip_with_raw_names([("document", DOCUMENT.encode()), ("document", b"second copy")]), "document"),
    # R-FS3: these were 500s (mkdir over a file).
    "file-then-folder": (_zip_with_raw_names([("document", DOCUMENT.encode()), ("x", b"1"), ("x/y", b"2")]), "x"),
    "file-then-folder-entry": (_zip_with_raw_names([("document", DOCUMENT.encode()), ("x", b"1"), ("x/", b"")]), "x"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE), ids=sorted(HOSTILE))
def test_hostile_input_archive_is_refused_by_name_and_changes_nothing(
    api, fake_codex, settings, waiting_run, case, tmp_path
):
    from runs.models import Run

    content, named = HOSTILE[case]
    before = tree_state(settings.DATA_DIR)
    response = _post(api, waiting_run, content)
    assert response.status_code == 400, (response.status_code, response.content[:300])
    detail = response.json()["detail"]
    assert detail["code"] == "ARCHIVE_UNSAFE_ENTRY", detail
    assert named in detail["message"], detail
    assert tree_state(settings.DATA_DIR) == before
    assert not list(settings.DATA_DIR.rglob("evil.txt")) and not os.path.exists("/tmp/evil.txt")
    run = Run.objects.get(pk=waiting_run)
    # R-UP8: a refused upload never leaves its run queued; the run ended with the refusal's code.
    assert run.status == "failed" and run.error["code"] == "ARCHIVE_UNSAFE_ENTRY", run.error
    assert fake_codex.invocations() == []
    again = _post(api, waiting_run, make_zip({"document": DOCUMENT}))
    assert again.status_code == 409, again.content
    assert fake_codex.invocations() == []


def test_many_small_bombs_are_stopped_by_the_total_cap(api, settings, waiting_run):
    """Members just under the 1 MiB ratio threshold are not ratio-checked one by one; together they
    must still stop at SKILLRUNNER_ZIP_MAX_TOTAL_BYTES, and nothing stays on disk."""
    settings.SKILLRUNNER_ZIP_MAX_TOTAL_BYTES = 4 * 1024 * 1024
    content = make_zip({"document": DOCUMENT, **{f"zeros/{i}.bin": b"\0" * (1024 * 1024 - 1) for i in range(12)}})
    assert len(content) < 64 * 1024  # 12 MiB of zeros in a few KiB
    before = tree_state(settings.DATA_DIR)
    response = _post(api, waiting_run, content)
    assert response.status_code == 400
    assert response.json()["detail"]["code"] == "ARCHIVE_TOO_LARGE"
    assert tree_state(settings.DATA_DIR) == before


def test_lying_size_headers_do_not_bypass_the_caps(api, settings, waiting_run):
    settings.SKILLRUNNER_ZIP_MAX_TOTAL_BYTES = 64 * 1024
    content = _lie_about_size(make_zip({"document": DOCUMENT, "big.bin": os.urandom(256 * 1024)}), "big.bin", 10)
    with zipfile.ZipFile(io.BytesIO(content)) as archive:
        assert archive.getinfo("big.bin").file_size == 10
    before = tree_state(settings.DATA_DIR)
    response = _post(api, waiting_run, content)
    assert response.status_code == 400
    assert response.json()["detail"]["code"] in ("ARCHIVE_TOO_LARGE", "ARCHIVE_INVALID")
    assert tree_state(settings.DATA_DIR) == before


def test_nested_archives_are_files_not_extracted(api, fake_codex, waiting_run):
    """An archive inside the upload is an input file like any other: its hostile names never
    reach the disk because it is never unpacked."""
    from runs.models import Run

    inner = make_zip({"../../../evil.txt": "x", ".codex/config.toml": "approval_policy = 'never'"})
    fake_codex.script({"message": json.dumps({"lines": 2, "words": 5})})
    response = _post(api, waiting_run, make_zip({"document": DOCUMENT, "attachments/inner.zip": inner}))
    assert response.status_code == 200, response.content
    run_dir = Run.objects.get(pk=waiting_run).run_dir
    assert (run_dir / "uploads" / "attachments" / "inner.zip").read_bytes() == inner
    assert not list(run_dir.parent.parent.rglob("evil.txt"))
    assert not (run_dir / "uploads" / ".codex").exists()
