"""R-OU1: collecting the files a final answer declares, by value, by manifest and by x-filename (R-SB7)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from runs.artifacts import collect_artifacts
from skills.packages import artifacts_of

SCHEMA = {
    "type": "object",
    "properties": {
        "report": {"type": "string", "x-type": "artifact", "x-role": "report"},
        "chart": {"type": ["string", "null"], "x-type": "file", "x-role": "chart"},
        "bundle": {"type": ["string", "null"], "x-type": "artifact-manifest", "x-role": "bundle"},
        "legacy": {"type": "string", "x-type": "artifact", "x-filename": "legacy.txt"},
    },
    "required": ["report"],
}
SPECS = artifacts_of({}, SCHEMA)


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    root = tmp_path / "run"
    (root / "artifacts").mkdir(parents=True)
    return root


def _write(root: Path, relative: str, text: str = "x") -> Path:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_specs_read_every_artifact_form():
    by_property = {spec["property"]: spec for spec in SPECS}
    assert by_property["report"] == {
        "role": "report",
        "filename": None,
        "required": True,
        "property": "report",
        "kind": "file",
    }
    assert by_property["chart"]["kind"] == "file" and not by_property["chart"]["required"]
    assert by_property["bundle"]["kind"] == "manifest"
    assert by_property["legacy"]["filename"] == "legacy.txt"


def test_relative_and_absolute_paths_are_moved_in_and_rewritten(run_dir: Path):
    """R-OU1: a file elsewhere in the run is moved into artifacts/, keeping its name."""
    _write(run_dir, "out/report.md", "# report")
    chart = _write(run_dir, "work/chart.svg", "<svg/>")
    result = collect_artifacts({"report": "out/report.md", "chart": str(chart)}, SPECS, run_dir)
    assert result.error is None
    assert result.data == {"report": "artifacts/report.md", "chart": "artifacts/chart.svg"}
    assert (run_dir / "artifacts" / "report.md").read_text() == "# report"
    assert not (run_dir / "out" / "report.md").exists()


def test_a_file_already_in_artifacts_stays_where_it_is(run_dir: Path):
    _write(run_dir, "artifacts/sub/report.md")
    result = collect_artifacts({"report": "./artifacts/sub/report.md"}, SPECS, run_dir)
    assert result.error is None and result.data["report"] == "artifacts/sub/report.md"


def test_a_name_clash_gets_a_numeric_suffix(run_dir: Path):
    _write(run_dir, "artifacts/report.md", "earlier")
    _write(run_dir, "a/report.md", "new")
    result = collect_artifacts({"report": "a/report.md"}, SPECS, run_dir)
    assert result.data["report"] == "artifacts/report-1.md"
    assert (run_dir / "artifacts" / "report.md").read_text() == "earlier"
    assert (run_dir / "artifacts" / "report-1.md").read_text() == "new"


def test_a_missing_required_file_names_the_property_and_the_path(run_dir: Path):
    result = collect_artifacts({"report": "out/nowhere.md"}, SPECS, run_dir)
    assert result.error["code"] == "ARTIFACT_MISSING"
    assert "report" in result.error["message"] and "out/nowhere.md" in result.error["message"]


def test_an_optional_artifact_may_be_null(run_dir: Path):
    _write(run_dir, "report.md")
    result = collect_artifacts({"report": "report.md", "chart": None, "bundle": None}, SPECS, run_dir)
    assert result.error is None and result.warnings == []
    assert result.data == {"report": "artifacts/report.md", "chart": None, "bundle": None}


@pytest.mark.parametrize("where", ["outside", "link", "parent"])
def test_paths_outside_the_run_or_through_links_are_missing(run_dir: Path, tmp_path: Path, where: str):
    """R-SB7: never outside the run, never through a link; the file outside is left untouched."""
    secret = _write(tmp_path, "secret.txt", "SECRET")
    if where == "outside":
        value = str(secret)
    elif where == "link":
        os.symlink(secret, run_dir / "report.md")
        value = "report.md"
    else:
        value = "../secret.txt"
    result = collect_artifacts({"report": value}, SPECS, run_dir)
    assert result.error["code"] == "ARTIFACT_MISSING"
    assert secret.read_text() == "SECRET"
    assert not any(p.is_file() for p in (run_dir / "artifacts").iterdir())


def test_a_linked_directory_on_the_way_is_refused(run_dir: Path, tmp_path: Path):
    _write(tmp_path, "elsewhere/report.md", "SECRET")
    os.symlink(tmp_path / "elsewhere", run_dir / "out")
    result = collect_artifacts({"report": "out/report.md"}, SPECS, run_dir)
    assert result.error["code"] == "ARTIFACT_MISSING"
    assert (tmp_path / "elsewhere" / "report.md").exists()


def test_a_manifest_collects_its_files_and_itself_rewritten(run_dir: Path):
    """R-OU1: artifact-manifest {label: path}: every file collected, the manifest too, values rewritten."""
    _write(run_dir, "report.md")
    _write(run_dir, "figures/a.png", "A")
    _write(run_dir, "figures/b.png", "B")
    _write(run_dir, "manifest.json", json.dumps({"first": "figures/a.png", "second": str(run_dir / "figures/b.png")}))
    result = collect_artifacts({"report": "report.md", "bundle": "manifest.json"}, SPECS, run_dir)
    assert result.error is None
    assert result.data["bundle"] == "artifacts/manifest.json"
    manifest = json.loads((run_dir / "artifacts" / "manifest.json").read_text())
    assert manifest == {"first": "artifacts/a.png", "second": "artifacts/b.png"}
    assert (run_dir / "artifacts" / "b.png").read_text() == "B"
    assert not (run_dir / "manifest.json").exists()


def test_a_required_manifest_with_a_missing_entry_fails(run_dir: Path):
    schema = {**SCHEMA, "required": ["bundle"]}
    _write(run_dir, "manifest.json", json.dumps({"gone": "figures/none.png"}))
    result = collect_artifacts({"bundle": "manifest.json"}, artifacts_of({}, schema), run_dir)
    assert result.error["code"] == "ARTIFACT_MISSING"
    assert "bundle[gone]" in result.error["message"] and "figures/none.png" in result.error["message"]


def test_x_filename_still_works(run_dir: Path):
    """Older packages: artifacts/<x-filename>, moved there from where the field points."""
    _write(run_dir, "report.md")
    _write(run_dir, "tmp/legacy-output.txt", "old")
    result = collect_artifacts({"report": "report.md", "legacy": "tmp/legacy-output.txt"}, SPECS, run_dir)
    assert result.error is None
    assert (run_dir / "artifacts" / "legacy.txt").read_text() == "old"


def test_checking_without_applying_changes_nothing(run_dir: Path):
    """The pure form the completion gates use: the same verdict, no file moved or written."""
    _write(run_dir, "out/report.md")
    _write(run_dir, "manifest.json", json.dumps({"a": "out/report.md"}))
    before = sorted(p.relative_to(run_dir).as_posix() for p in run_dir.rglob("*"))
    data = {"report": "out/report.md", "bundle": "manifest.json"}
    assert collect_artifacts(data, SPECS, run_dir, apply=False).error is None
    assert collect_artifacts({"report": "out/none.md"}, SPECS, run_dir, apply=False).error["code"] == "ARTIFACT_MISSING"
    assert sorted(p.relative_to(run_dir).as_posix() for p in run_dir.rglob("*")) == before
