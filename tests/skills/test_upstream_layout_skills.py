"""R-SK1/R-SK5: packages in the upstream Skill Runner layout (tests/support/skills: per-engine
settings files, file inputs without x-input-source, x-type artifacts, UTF-8 text) install
unchanged, by the management command (folder or zip) and through the zip endpoint."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from django.core.management import call_command

from tests.conftest import TEST_SKILLS
from tests.support.jobs import tree_state, upload, zip_folder

pytestmark = pytest.mark.django_db

PACKAGES = sorted(p.name for p in TEST_SKILLS.iterdir() if (p / "assets" / "runner.json").is_file())


def test_the_test_set_is_there():
    assert len(PACKAGES) >= 5, PACKAGES


def _runner(name: str) -> dict:
    return json.loads((TEST_SKILLS / name / "assets" / "runner.json").read_text())


def _check_installed(api, name: str) -> None:
    from skills.selectors import current_version

    runner = _runner(name)
    version = current_version(name)
    assert version is not None
    assert version.version == runner["version"]
    # The snapshot holds the package byte for byte: nothing rewritten, nothing dropped.
    assert tree_state(version.path) == tree_state(TEST_SKILLS / name)
    body = api.get(f"/v1/skills/{name}").json()
    assert body["id"] == name
    assert body["version"] == runner["version"]
    assert body["execution_modes"] == runner["execution_modes"]
    assert body["effective_engines"], body
    assert body["schemas"]["output"] == json.loads((TEST_SKILLS / name / "assets" / "output.schema.json").read_text())


@pytest.mark.parametrize("name", PACKAGES)
def test_install_folder_with_management_command(api, name):
    out = io.StringIO()
    call_command("install_skill", str(TEST_SKILLS / name), stdout=out)
    assert f"installed {name} {_runner(name)['version']}" in out.getvalue()
    _check_installed(api, name)


@pytest.mark.parametrize("name", PACKAGES)
def test_install_zip_with_management_command(api, name, tmp_path):
    archive = tmp_path / f"{name}.zip"
    archive.write_bytes(zip_folder(TEST_SKILLS / name))
    out = io.StringIO()
    call_command("install_skill", str(archive), stdout=out)
    assert name in out.getvalue()
    _check_installed(api, name)


@pytest.mark.parametrize("name", PACKAGES)
def test_install_through_the_zip_endpoint(staff_api, api, name):
    response = staff_api.post(
        "/v1/skill-packages/install",
        {"file": upload(f"{name}.zip", zip_folder(TEST_SKILLS / name))},
        format="multipart",
    )
    assert response.status_code == 200, response.content
    assert response.json()["skill_id"] == name
    assert response.json()["version"] == _runner(name)["version"]
    _check_installed(api, name)


def test_all_upstream_layout_skills_listed_together(staff_api, api):
    for name in PACKAGES:
        call_command("install_skill", str(TEST_SKILLS / name), stdout=io.StringIO())
    listed = {s["id"]: s for s in api.get("/v1/skills").json()}
    assert sorted(listed) == PACKAGES


def test_command_reports_refusal_without_traceback(tmp_path):
    from django.core.management.base import CommandError

    missing = tmp_path / "nothing-here"
    with pytest.raises(CommandError):
        call_command("install_skill", str(missing))
    broken = tmp_path / "broken"
    (broken / "assets").mkdir(parents=True)
    (broken / "SKILL.md").write_text("no front matter")
    with pytest.raises(CommandError, match="SKILL_"):
        call_command("install_skill", str(broken))


def test_package_without_execution_modes_is_refused_by_command(tmp_path):
    """R-SK4: an *installed* package must declare execution_modes."""
    import shutil

    from django.core.management.base import CommandError

    folder = tmp_path / "dice-pair"
    shutil.copytree(TEST_SKILLS / "dice-pair", folder)
    runner = json.loads((folder / "assets" / "runner.json").read_text())
    runner.pop("execution_modes")
    (folder / "assets" / "runner.json").write_text(json.dumps(runner))
    with pytest.raises(CommandError, match="SKILL_EXECUTION_MODES_MISSING"):
        call_command("install_skill", str(folder))


def test_packages_are_not_modified_by_installing(api):
    before = {name: tree_state(TEST_SKILLS / name) for name in PACKAGES}
    for name in PACKAGES:
        call_command("install_skill", str(TEST_SKILLS / name), stdout=io.StringIO())
    assert {name: tree_state(Path(TEST_SKILLS / name)) for name in PACKAGES} == before
