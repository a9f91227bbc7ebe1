"""POST /v1/skill-packages/install (R-SK5, R-SK6, SPEC §8): staff only, synchronous, zip-safe,
strictly increasing versions, and a refused upload changes nothing on disk."""

from __future__ import annotations

import io
import json
import os
import zipfile

import pytest
from rest_framework.test import APIClient

from engines.registry import ENGINE_NAMES
from tests.conftest import BUNDLED_SKILLS
from tests.support.jobs import clone_skill, detail, error_code, haiku_step, make_zip, tree_state, upload, zip_folder

pytestmark = pytest.mark.django_db(transaction=True)

INSTALL = "/v1/skill-packages/install"


def _post(client, content: bytes, name: str = "skill.zip"):
    return client.post(INSTALL, {"file": upload(name, content)}, format="multipart")


def _haiku_zip(tmp_path, version: str = "1.0.0", *, body: str | None = None, extra=None) -> bytes:
    folder = clone_skill(
        BUNDLED_SKILLS / "haiku-writer",
        tmp_path / f"src-{version}-{len(os.listdir(tmp_path))}",
        manifest={"version": version},
        body=body,
    )
    return zip_folder(folder, extra=extra)


def _installed_versions():
    from skills.models import SkillVersion

    return sorted((v.skill.skill_id, v.version) for v in SkillVersion.objects.select_related("skill"))


@pytest.fixture
def disk(settings):
    """Snapshot of the data dir; `unchanged()` compares, ignoring only an empty staging parent."""

    class Disk:
        def __init__(self):
            self.before = tree_state(settings.DATA_DIR)

        def unchanged(self) -> bool:
            after = tree_state(settings.DATA_DIR)
            if (
                after.get("tmp/") == "dir"
                and "tmp/" not in self.before
                and not any(k.startswith("tmp/") and k != "tmp/" for k in after)
            ):
                after.pop("tmp/")
            return after == self.before

    return Disk


def test_staff_installs_a_zip_synchronously(staff_api, api, tmp_path, settings):
    response = _post(staff_api, _haiku_zip(tmp_path))
    assert response.status_code == 200, response.content
    body = response.json()
    assert (body["skill_id"], body["version"]) == ("haiku-writer", "1.0.0")
    listed = api.get("/v1/skills/haiku-writer")
    assert listed.status_code == 200
    skill = listed.json()
    assert skill["version"] == "1.0.0"
    assert skill["execution_modes"] == ["auto", "interactive"]
    for field in (
        "id",
        "name",
        "version",
        "description",
        "engines",
        "unsupported_engines",
        "effective_engines",
        "execution_modes",
        "schemas",
    ):
        assert field in skill, field
    assert set(skill["schemas"]) == {"input", "parameter", "output"}
    assert [s["id"] for s in api.get("/v1/skills").json()] == ["haiku-writer"]


def test_non_staff_gets_403_and_nothing_is_installed(api, tmp_path, disk):
    """SPEC §8: an authenticated user lacking the permission gets 403."""
    state = disk()
    response = _post(api, _haiku_zip(tmp_path))
    assert response.status_code == 403
    assert _installed_versions() == []
    assert state.unchanged()


def test_anonymous_gets_401_with_token_challenge(tmp_path, db):
    """Token first; Basic named too on this path, for upstream's management client (R-UP2)."""
    response = _post(APIClient(), _haiku_zip(tmp_path))
    assert response.status_code == 401
    assert response["WWW-Authenticate"] == 'Token, Basic realm="Skill Runner"'
    assert _installed_versions() == []


def test_update_needs_a_strictly_greater_version(staff_api, tmp_path, disk):
    """R-SK6: same version and downgrades are refused with a stable code; nothing changes."""
    assert _post(staff_api, _haiku_zip(tmp_path, "1.2.0")).status_code == 200
    for version in ("1.2.0", "1.1.9", "0.9", "1.2"):
        state = disk()
        response = _post(staff_api, _haiku_zip(tmp_path, version))
        assert response.status_code == 400, version
        assert error_code(response) == "SKILL_VERSION_NOT_NEWER", version
        assert state.unchanged(), version
    response = _post(staff_api, _haiku_zip(tmp_path, "1.10.0"))  # numeric, not lexical, ordering
    assert response.status_code == 200, response.content
    assert staff_api.get("/v1/skills/haiku-writer").json()["version"] == "1.10.0"
    assert _installed_versions() == [("haiku-writer", "1.10.0"), ("haiku-writer", "1.2.0")]


def test_update_never_changes_a_past_or_running_run(staff_api, api, tmp_path, fake_codex, manual_dispatch, settings):
    """R-SK6: every run works on its own snapshot; an update between creation and execution
    does not reach the run, and a finished run keeps its version."""
    from runs.models import Run

    assert _post(staff_api, _haiku_zip(tmp_path, "1.0.0", body="# Version one instructions")).status_code == 200
    fake_codex.script(haiku_step())
    rid = api.post("/v1/jobs", {"skill_id": "haiku-writer", "input": {"topic": "sea"}}, format="json").json()[
        "request_id"
    ]
    assert _post(staff_api, _haiku_zip(tmp_path, "2.0.0", body="# Version two instructions")).status_code == 200
    manual_dispatch.run_inline(rid)
    run = Run.objects.get(pk=rid)
    assert run.status == "succeeded"
    assert api.get(f"/v1/jobs/{rid}").json()["skill_version"] == "1.0.0"
    local_copy = (run.run_dir / ".codex" / "skills" / "haiku-writer" / "SKILL.md").read_text()
    assert "Version one instructions" in local_copy
    assert "Version two instructions" not in local_copy
    assert run.skill_version.path.is_dir()  # the old snapshot outlives the update
    new_run = api.post("/v1/jobs", {"skill_id": "haiku-writer", "input": {"topic": "sea"}}, format="json").json()[
        "request_id"
    ]
    assert Run.objects.get(pk=new_run).skill_version.version == "2.0.0"


def test_installed_snapshot_is_not_patched_by_runs(staff_api, api, tmp_path, fake_codex):
    """R-PA1: the runtime patch goes to the run's copy, never the installed skill."""
    from skills.selectors import current_version

    assert _post(staff_api, _haiku_zip(tmp_path)).status_code == 200
    snapshot = current_version("haiku-writer").path / "SKILL.md"
    before = snapshot.read_text()
    fake_codex.script(haiku_step())
    rid = api.post("/v1/jobs", {"skill_id": "haiku-writer", "input": {"topic": "sea"}}, format="json").json()[
        "request_id"
    ]
    assert api.get(f"/v1/jobs/{rid}").json()["status"] == "succeeded"
    assert snapshot.read_text() == before


UNSAFE = {
    "absolute path": (
        {"haiku-writer/SKILL.md": "x", "/tmp/skillrunner-abs-escape.txt": "pwned"},
        None,
        "/tmp/skillrunner-abs-escape.txt",
    ),
    "parent reference": (
        {"haiku-writer/SKILL.md": "x", "haiku-writer/../../escape.txt": "pwned"},
        None,
        "../escape.txt",
    ),
    "leading parent": ({"haiku-writer/SKILL.md": "x", "../escape.txt": "pwned"}, None, "../escape.txt"),
    "symlink": (
        {"haiku-writer/SKILL.md": "x"},
        {"haiku-writer/assets/leak": "/etc/passwd"},
        "haiku-writer/assets/leak",
    ),
    ".codex": ({"haiku-writer/SKILL.md": "x", "haiku-writer/.codex/config.toml": "x=1"}, None, ".codex/config.toml"),
    ".gemini": (
        {"haiku-writer/SKILL.md": "x", "haiku-writer/.gemini/settings.json": "{}"},
        None,
        ".gemini/settings.json",
    ),
    ".iflow": ({"haiku-writer/SKILL.md": "x", "haiku-writer/.iflow/settings.json": "{}"}, None, ".iflow/settings.json"),
    ".claude": (
        {"haiku-writer/SKILL.md": "x", "haiku-writer/.claude/settings.json": "{}"},
        None,
        ".claude/settings.json",
    ),
    ".mcp.json": ({"haiku-writer/SKILL.md": "x", "haiku-writer/.mcp.json": "{}"}, None, ".mcp.json"),
    ".env": ({"haiku-writer/SKILL.md": "x", "haiku-writer/.env": "SECRET=1"}, None, ".env"),
    "nested .env": ({"haiku-writer/SKILL.md": "x", "haiku-writer/scripts/.env": "SECRET=1"}, None, "scripts/.env"),
}


@pytest.mark.parametrize("case", list(UNSAFE), ids=list(UNSAFE))
def test_unsafe_entries_are_refused_by_name(staff_api, tmp_path, disk, case):
    """R-SK5: absolute paths, `..`, symlinks and engine control files are refused with a message
    naming them, and the refusal leaves the disk as it was."""
    valid = {
        f"haiku-writer/{p.relative_to(BUNDLED_SKILLS / 'haiku-writer').as_posix()}": p.read_bytes()
        for p in (BUNDLED_SKILLS / "haiku-writer").rglob("*")
        if p.is_file()
    }
    entries, links, named = UNSAFE[case]
    state = disk()
    response = _post(staff_api, make_zip({**valid, **entries}, symlinks=links))
    assert response.status_code == 400, response.content
    body = detail(response)
    assert body["code"] == "ARCHIVE_UNSAFE_ENTRY"
    assert named in body["message"], body["message"]
    assert _installed_versions() == []
    assert state.unchanged()
    assert not os.path.exists("/tmp/skillrunner-abs-escape.txt")
    assert not (tmp_path / "escape.txt").exists()


def test_git_metadata_is_stripped_not_refused(staff_api, tmp_path):
    response = _post(staff_api, _haiku_zip(tmp_path, extra={"haiku-writer/.git/config": "[core]\n"}))
    assert response.status_code == 200, response.content
    from skills.selectors import current_version

    assert not (current_version("haiku-writer").path / ".git").exists()


@pytest.mark.parametrize(
    "entries",
    [
        {"a/SKILL.md": "x", "b/SKILL.md": "x"},  # two top-level folders
        {"SKILL.md": "---\nname: x\n---\n", "assets/runner.json": "{}"},  # files at the top level
        {"haiku-writer/SKILL.md": "x", "README.md": "x"},  # a folder plus a loose file
        {},  # empty archive
    ],
    ids=["two-folders", "no-folder", "folder-and-file", "empty"],
)
def test_exactly_one_top_level_folder(staff_api, disk, entries):
    state = disk()
    response = _post(staff_api, make_zip(entries))
    assert response.status_code == 400
    assert error_code(response) == "SKILL_PACKAGE_INVALID"
    assert "top-level" in detail(response)["message"]
    assert state.unchanged()


def test_macosx_folder_does_not_count_as_a_second_folder(staff_api, tmp_path):
    response = _post(staff_api, _haiku_zip(tmp_path, extra={"__MACOSX/haiku-writer/._SKILL.md": "junk"}))
    assert response.status_code == 200, response.content


def test_too_many_members(staff_api, tmp_path, settings, disk):
    settings.SKILLRUNNER_ZIP_MAX_MEMBERS = 8
    state = disk()
    extra = {f"haiku-writer/references/note{i}.md": "n" for i in range(10)}
    response = _post(staff_api, _haiku_zip(tmp_path, extra=extra))
    assert response.status_code == 400
    assert error_code(response) == "ARCHIVE_TOO_MANY_MEMBERS"
    assert state.unchanged()


def test_too_large_uncompressed(staff_api, tmp_path, settings, disk):
    settings.SKILLRUNNER_ZIP_MAX_TOTAL_BYTES = 64 * 1024
    state = disk()
    extra = {"haiku-writer/references/big.txt": os.urandom(100 * 1024)}
    response = _post(staff_api, _haiku_zip(tmp_path, extra=extra))
    assert response.status_code == 400
    assert error_code(response) == "ARCHIVE_TOO_LARGE"
    assert state.unchanged()


def test_zip_bomb_ratio(staff_api, tmp_path, disk):
    """A member expanding far beyond the ratio cap is refused while streaming."""
    state = disk()
    extra = {"haiku-writer/references/zeros.txt": b"\0" * (8 * 1024 * 1024)}
    content = _haiku_zip(tmp_path, extra=extra)
    assert len(content) < 100 * 1024  # it really is a bomb
    response = _post(staff_api, content)
    assert response.status_code == 400
    assert error_code(response) == "ARCHIVE_RATIO_EXCEEDED"
    assert state.unchanged()


def _lie_about_size(content: bytes, name: str, claimed: int) -> bytes:
    """Rewrite the uncompressed size of member `name` in both its local and central headers."""
    import struct

    data = bytearray(content)
    encoded = name.encode()
    for signature, size_offset, name_offset in ((b"PK\x03\x04", 22, 30), (b"PK\x01\x02", 24, 46)):
        position = data.find(signature)
        while position != -1:
            if data[position + name_offset : position + name_offset + len(encoded)] == encoded:
                struct.pack_into("<I", data, position + size_offset, claimed)
            position = data.find(signature, position + 4)
    return bytes(data)


def test_lying_header_sizes_do_not_bypass_the_cap(staff_api, tmp_path, settings, disk):
    """Sizes are counted while extracting, not read from headers: a member whose headers claim
    10 bytes but which holds 100 KiB never lands on disk whole."""
    settings.SKILLRUNNER_ZIP_MAX_TOTAL_BYTES = 64 * 1024
    name = "haiku-writer/references/big.txt"
    content = _lie_about_size(_haiku_zip(tmp_path, extra={name: os.urandom(100 * 1024)}), name, 10)
    with zipfile.ZipFile(io.BytesIO(content)) as archive:
        assert archive.getinfo(name).file_size == 10  # the lie is in place
    state = disk()
    response = _post(staff_api, content)
    assert response.status_code == 400
    assert error_code(response) in ("ARCHIVE_TOO_LARGE", "ARCHIVE_INVALID")
    assert state.unchanged()


def test_not_a_zip(staff_api, disk):
    state = disk()
    response = _post(staff_api, b"this is not a zip archive at all")
    assert response.status_code == 400
    assert error_code(response) == "ARCHIVE_INVALID"
    assert state.unchanged()


def test_missing_file_field(staff_api):
    response = staff_api.post(INSTALL, {"other": "x"}, format="multipart")
    assert response.status_code == 400
    assert error_code(response) == "UPLOAD_FILE_MISSING"


def test_json_body_is_not_accepted(staff_api):
    response = staff_api.post(INSTALL, {"file": "x"}, format="json")
    assert 400 <= response.status_code < 500
    assert response.status_code != 500


def test_upload_over_the_size_limit_is_413(staff_api, tmp_path, settings, disk):
    """SPEC §8: upload too large → 413 (SKILLRUNNER_MAX_UPLOAD_BYTES)."""
    settings.SKILLRUNNER_MAX_UPLOAD_BYTES = 32 * 1024
    content = _haiku_zip(tmp_path, extra={"haiku-writer/references/big.bin": os.urandom(64 * 1024)})
    state = disk()
    response = _post(staff_api, content)
    assert response.status_code == 413, response.content
    assert _installed_versions() == []
    assert state.unchanged()


@pytest.mark.parametrize(
    "change,code",
    [
        ({"drop": ("execution_modes",)}, "SKILL_EXECUTION_MODES_MISSING"),
        ({"manifest": {"execution_modes": []}}, "SKILL_MANIFEST_INVALID"),
        ({"manifest": {"execution_modes": ["batch"]}}, "SKILL_MANIFEST_INVALID"),
        ({"drop": ("version",)}, "SKILL_MANIFEST_INVALID"),
        ({"manifest": {"version": "one"}}, "SKILL_MANIFEST_INVALID"),
        ({"manifest": {"engines": ["codex"], "unsupported_engines": ["codex"]}}, "SKILL_MANIFEST_INVALID"),
        ({"manifest": {"unsupported_engines": list(ENGINE_NAMES)}}, "SKILL_MANIFEST_INVALID"),
        ({"manifest": {"max_attempt": 0}}, "SKILL_MANIFEST_INVALID"),
    ],
    ids=[
        "no-modes",
        "empty-modes",
        "unknown-mode",
        "no-version",
        "bad-version",
        "overlap",
        "no-engine-left",
        "max-attempt-0",
    ],
)
def test_invalid_manifests_are_refused_with_a_code(staff_api, tmp_path, disk, change, code):
    """R-SK2..R-SK4 through the endpoint: a coded 400 and nothing on disk."""
    folder = clone_skill(BUNDLED_SKILLS / "haiku-writer", tmp_path / "src", **change)
    state = disk()
    response = _post(staff_api, zip_folder(folder))
    assert response.status_code == 400, response.content
    assert error_code(response) == code
    assert state.unchanged()


def test_identity_mismatch_is_refused(staff_api, tmp_path, disk):
    """R-SK1: folder name = runner.json id = SKILL.md name."""
    folder = clone_skill(BUNDLED_SKILLS / "haiku-writer", tmp_path / "src")
    state = disk()
    response = _post(staff_api, zip_folder(folder, top="other-name"))
    assert response.status_code == 400
    assert error_code(response) == "SKILL_IDENTITY_MISMATCH"
    assert state.unchanged()


def test_missing_output_schema_is_refused(staff_api, tmp_path, disk):
    folder = clone_skill(
        BUNDLED_SKILLS / "haiku-writer", tmp_path / "src", manifest={"schemas": {"input": "assets/input.schema.json"}}
    )
    (folder / "assets" / "output.schema.json").unlink()
    state = disk()
    response = _post(staff_api, zip_folder(folder))
    assert response.status_code == 400
    assert error_code(response) == "SKILL_SCHEMA_INVALID"
    assert state.unchanged()


def test_unknown_runner_fields_are_kept_and_ignored(staff_api, tmp_path):
    """R-SK2: unknown fields do not block an install."""
    folder = clone_skill(
        BUNDLED_SKILLS / "haiku-writer", tmp_path / "src", manifest={"mcp": {"required_servers": []}, "x-future": 1}
    )
    response = _post(staff_api, zip_folder(folder))
    assert response.status_code == 200, response.content
    from skills.selectors import current_version

    assert current_version("haiku-writer").manifest["x-future"] == 1


def test_refused_update_keeps_the_installed_version_usable(staff_api, api, tmp_path, disk):
    assert _post(staff_api, _haiku_zip(tmp_path, "1.0.0")).status_code == 200
    state = disk()
    bad = make_zip({"haiku-writer/SKILL.md": "x", "haiku-writer/.env": "A=1"})
    assert _post(staff_api, bad).status_code == 400
    assert state.unchanged()
    assert api.get("/v1/skills/haiku-writer").json()["version"] == "1.0.0"


def test_zip_with_stored_and_deflated_members_installs(staff_api, tmp_path):
    folder = clone_skill(BUNDLED_SKILLS / "haiku-writer", tmp_path / "src")
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for index, path in enumerate(sorted(p for p in folder.rglob("*") if p.is_file())):
            compression = zipfile.ZIP_STORED if index % 2 else zipfile.ZIP_DEFLATED
            archive.write(path, f"haiku-writer/{path.relative_to(folder).as_posix()}", compress_type=compression)
    response = _post(staff_api, buffer.getvalue())
    assert response.status_code == 200, response.content
    runner = json.loads((folder / "assets" / "runner.json").read_text())
    assert response.json()["version"] == runner["version"]
