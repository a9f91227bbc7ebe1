"""skills.services: snapshots and version rules (R-SK5, R-SK6), folder sync with legacy packages (R-SK4)."""

from __future__ import annotations

import io
import json
import shutil

import pytest
from django.core.management import call_command

from kernel.errors import ApplicationError
from skills.packages import SkillPackageError
from skills.services import install_path, install_zip, sync_skill_directory
from tests.conftest import BUNDLED_SKILLS
from tests.support.jobs import clone_skill, make_zip, tree_state, zip_folder

pytestmark = pytest.mark.django_db


def _version(tmp_path, version: str, **kwargs):
    return clone_skill(
        BUNDLED_SKILLS / "haiku-writer", tmp_path / f"v{version}", manifest={"version": version}, **kwargs
    )


def test_install_snapshots_the_package_under_the_data_dir(tmp_path, settings):
    source = _version(tmp_path, "1.0.0")
    version = install_path(source)
    assert version.path.is_relative_to(settings.DATA_DIR)
    assert tree_state(version.path) == tree_state(source)
    # The snapshot is independent of its source.
    (source / "SKILL.md").write_text("changed afterwards")
    assert (version.path / "SKILL.md").read_text() != "changed afterwards"


def test_versions_are_kept_side_by_side(tmp_path):
    """R-SK6: a run keeps its snapshot, so an update adds a version beside the old one."""
    first = install_path(_version(tmp_path, "1.0.0", body="# one"))
    second = install_path(_version(tmp_path, "1.1.0", body="# two"))
    assert first.path != second.path
    assert "# one" in (first.path / "SKILL.md").read_text()
    assert "# two" in (second.path / "SKILL.md").read_text()
    from skills.selectors import current_version

    assert current_version("haiku-writer").version == "1.1.0"


@pytest.mark.parametrize("newer", ["1.0.0", "0.9.9", "1.0"])
def test_not_newer_is_refused_and_leaves_everything(tmp_path, settings, newer):
    install_path(_version(tmp_path, "1.0.0"))
    before = tree_state(settings.DATA_DIR)
    with pytest.raises(SkillPackageError) as info:
        install_path(_version(tmp_path, newer, body="# replacement"))
    assert info.value.code == "SKILL_VERSION_NOT_NEWER"
    after = tree_state(settings.DATA_DIR)
    assert {k: v for k, v in after.items() if not k.startswith("tmp")} == {
        k: v for k, v in before.items() if not k.startswith("tmp")
    }


def test_prerelease_ordering(tmp_path):
    install_path(_version(tmp_path, "2.0.0rc1"))
    assert install_path(_version(tmp_path, "2.0.0")).version == "2.0.0"


def test_refused_zip_leaves_no_staging_behind(tmp_path, settings):
    with pytest.raises(ApplicationError) as info:  # an ArchiveError, of the one coded family
        install_zip(io.BytesIO(make_zip({"haiku-writer/SKILL.md": "x", "haiku-writer/.env": "A=1"})))
    assert info.value.code == "ARCHIVE_UNSAFE_ENTRY"
    staging = settings.DATA_DIR / "tmp"
    assert not staging.exists() or list(staging.iterdir()) == []
    assert (
        not (settings.DATA_DIR / "skill-snapshots").exists()
        or list((settings.DATA_DIR / "skill-snapshots").rglob("*")) == []
    )


def test_install_zip_from_path(tmp_path):
    archive = tmp_path / "haiku.zip"
    archive.write_bytes(zip_folder(_version(tmp_path, "3.0.0"), top="haiku-writer"))
    assert install_path(archive).version == "3.0.0"


def test_sync_installs_new_folders_and_skips_known_versions(tmp_path):
    root = tmp_path / "skills-dir"
    root.mkdir()
    shutil.copytree(BUNDLED_SKILLS / "haiku-writer", root / "haiku-writer")
    shutil.copytree(BUNDLED_SKILLS / "word-count", root / "word-count")
    assert sorted(sync_skill_directory(root)) == ["haiku-writer 1.0.0", "word-count 1.0.0"]
    assert sync_skill_directory(root) == []  # nothing new the second time
    runner = json.loads((root / "word-count" / "assets" / "runner.json").read_text())
    runner["version"] = "1.0.1"
    (root / "word-count" / "assets" / "runner.json").write_text(json.dumps(runner))
    assert sync_skill_directory(root) == ["word-count 1.0.1"]


def test_sync_loads_a_legacy_folder_as_auto_with_a_warning(tmp_path, api):
    """R-SK4: a skill already on disk without execution_modes loads as ["auto"] with a deprecation warning."""
    root = tmp_path / "skills-dir"
    root.mkdir()
    clone_skill(BUNDLED_SKILLS / "haiku-writer", root, skill_id="old-haiku", drop=("execution_modes",))
    assert sync_skill_directory(root) == ["old-haiku 1.0.0"]
    from skills.selectors import current_version

    version = current_version("old-haiku")
    assert version.execution_modes == ["auto"]
    assert "SKILL_EXECUTION_MODES_DEFAULTED" in [w["code"] for w in version.warnings]
    assert api.get("/v1/skills/old-haiku").json()["execution_modes"] == ["auto"]


def test_sync_skips_broken_and_hidden_folders(tmp_path):
    root = tmp_path / "skills-dir"
    root.mkdir()
    (root / "broken").mkdir()
    (root / "broken" / "SKILL.md").write_text("no front matter")
    shutil.copytree(BUNDLED_SKILLS / "haiku-writer", root / ".hidden-copy")
    (root / "stray-file.txt").write_text("x")
    shutil.copytree(BUNDLED_SKILLS / "trip-planner", root / "trip-planner")
    assert sync_skill_directory(root) == ["trip-planner 1.0.0"]


def test_load_skills_command_installs_the_bundled_set(settings, tmp_path):
    settings.SKILLRUNNER_SKILLS_DIR = tmp_path / "none"
    out = io.StringIO()
    call_command("load_skills", stdout=out)
    installed = sorted(line.split()[1] for line in out.getvalue().splitlines() if line.startswith("installed"))
    assert installed == sorted(p.name for p in BUNDLED_SKILLS.iterdir() if p.is_dir())
    out = io.StringIO()
    call_command("load_skills", stdout=out)
    assert out.getvalue() == ""
