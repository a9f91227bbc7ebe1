"""skills.packages.load_skill_dir: the package rules of R-SK1..R-SK4 and R-OU1, without a database."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from engines.registry import ENGINE_NAMES
from skills.packages import SkillPackageError, artifacts_of, load_skill_dir
from tests.conftest import BUNDLED_SKILLS, TEST_SKILLS

ALL_ENGINES = list(ENGINE_NAMES)


@pytest.fixture
def pkg(tmp_path):
    """A writable copy of haiku-writer; `edit(**runner)` changes runner.json (None deletes a key)."""

    class Package:
        root = tmp_path / "haiku-writer"

        def __init__(self):
            shutil.copytree(BUNDLED_SKILLS / "haiku-writer", self.root)

        def runner(self) -> dict:
            return json.loads((self.root / "assets" / "runner.json").read_text())

        def edit(self, **changes):
            runner = self.runner()
            for key, value in changes.items():
                if value is None:
                    runner.pop(key, None)
                else:
                    runner[key] = value
            (self.root / "assets" / "runner.json").write_text(json.dumps(runner))
            return self

        def write(self, relative: str, text: str):
            path = self.root / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            return self

        def load(self, **kwargs):
            return load_skill_dir(self.root, **kwargs)

    return Package()


def _code(callable_) -> str:
    with pytest.raises(SkillPackageError) as info:
        callable_()
    assert info.value.message
    return info.value.code


def test_valid_package(pkg):
    package = pkg.load()
    assert package.skill_id == "haiku-writer"
    assert package.version == "1.0.0"
    assert package.execution_modes == ["auto", "interactive"]
    assert package.effective_engines == ALL_ENGINES  # R-SK3: no allow-list means every engine
    assert package.engines == [] and package.unsupported_engines == []
    assert set(package.schemas) == {"input", "parameter", "output"}
    assert package.warnings == []
    assert package.max_attempt is None


@pytest.mark.parametrize("name", sorted(p.name for p in TEST_SKILLS.iterdir() if p.is_dir()))
def test_upstream_layout_packages_load(name):
    package = load_skill_dir(TEST_SKILLS / name)
    assert package.skill_id == name
    assert package.effective_engines


def test_identity_folder_must_match_id(pkg, tmp_path):
    other = tmp_path / "renamed"
    pkg.root.rename(other)
    assert _code(lambda: load_skill_dir(other)) == "SKILL_IDENTITY_MISMATCH"


def test_identity_front_matter_name_must_match(pkg):
    text = (pkg.root / "SKILL.md").read_text().replace("name: haiku-writer", "name: haiku")
    pkg.write("SKILL.md", text)
    assert _code(pkg.load) == "SKILL_IDENTITY_MISMATCH"


@pytest.mark.parametrize("missing", ["SKILL.md", "assets/runner.json"])
def test_required_files(pkg, missing):
    (pkg.root / missing).unlink()
    assert _code(pkg.load) == "SKILL_PACKAGE_INVALID"


@pytest.mark.parametrize(
    "text",
    [
        "# no front matter\n",
        "---\ndescription: x\n---\nbody\n",
        "---\nname: [a, b]\n---\n",
        "---\nname: : :\n  - x\n---\n",
    ],
)
def test_front_matter_needs_a_name(pkg, text):
    pkg.write("SKILL.md", text)
    assert _code(pkg.load) == "SKILL_PACKAGE_INVALID"


def test_runner_json_must_be_json_object(pkg):
    pkg.write("assets/runner.json", "{not json")
    assert _code(pkg.load) == "SKILL_MANIFEST_INVALID"
    pkg.write("assets/runner.json", "[1, 2]")
    assert _code(pkg.load) == "SKILL_MANIFEST_INVALID"


@pytest.mark.parametrize("version", [None, 1, "", "latest", "1.0.0-not valid"])
def test_version_is_required_and_parseable(pkg, version):
    runner = pkg.runner()
    if version is None:
        runner.pop("version")
    else:
        runner["version"] = version
    pkg.write("assets/runner.json", json.dumps(runner))
    assert _code(pkg.load) == "SKILL_MANIFEST_INVALID"


def test_missing_execution_modes_is_refused_for_install(pkg):
    """R-SK4: a package without execution_modes is rejected at install."""
    pkg.edit(execution_modes=None)
    assert _code(pkg.load) == "SKILL_EXECUTION_MODES_MISSING"


def test_missing_execution_modes_loads_as_auto_for_legacy_folders(pkg):
    """R-SK4: a skill already on disk without it loads as ["auto"] with a deprecation warning."""
    pkg.edit(execution_modes=None)
    package = pkg.load(legacy=True)
    assert package.execution_modes == ["auto"]
    assert [w["code"] for w in package.warnings] == ["SKILL_EXECUTION_MODES_DEFAULTED"]


@pytest.mark.parametrize("modes", [[], ["batch"], "auto", ["auto", 1], {"auto": True}])
def test_execution_modes_must_be_a_non_empty_list_of_known_modes(pkg, modes):
    pkg.edit(execution_modes=modes)
    assert _code(pkg.load) == "SKILL_MANIFEST_INVALID"


def test_duplicate_modes_are_collapsed(pkg):
    assert pkg.edit(execution_modes=["auto", "auto", "interactive"]).load().execution_modes == ["auto", "interactive"]


def test_effective_engines(pkg):
    """R-SK3: (engines or all) − unsupported_engines."""
    assert pkg.edit(engines=["codex", "gemini"]).load().effective_engines == ["codex", "gemini"]
    assert pkg.edit(engines=None, unsupported_engines=["gemini"]).load().effective_engines == [
        engine for engine in ALL_ENGINES if engine != "gemini"
    ]
    assert pkg.edit(engines=["codex", "iflow"], unsupported_engines=["gemini"]).load().effective_engines == [
        "codex",
        "iflow",
    ]


@pytest.mark.parametrize(
    "changes",
    [
        {"engines": ["codex"], "unsupported_engines": ["codex"]},  # overlap (R-SK2)
        {"unsupported_engines": ALL_ENGINES},  # nothing left (R-SK3)
        {"engines": ["no-such-engine"]},  # unknown engine
        {"engines": "codex"},
        {"unsupported_engines": [1]},
    ],
)
def test_bad_engine_lists(pkg, changes):
    pkg.edit(**changes)
    assert _code(pkg.load) == "SKILL_MANIFEST_INVALID"


@pytest.mark.parametrize(
    "value,ok", [(1, True), (4, True), (0, False), (-2, False), ("3", False), (True, False), (2.5, False)]
)
def test_max_attempt(pkg, value, ok):
    pkg.edit(max_attempt=value)
    if ok:
        assert pkg.load().max_attempt == value
    else:
        assert _code(pkg.load) == "SKILL_MANIFEST_INVALID"


def test_unknown_fields_are_kept(pkg):
    """R-SK2: unknown fields are kept and ignored."""
    package = pkg.edit(mcp={"required_servers": ["x"]}, engine_configs={"codex": "assets/c.toml"}).load()
    assert package.manifest["mcp"] == {"required_servers": ["x"]}


def test_output_schema_is_required(pkg):
    (pkg.root / "assets" / "output.schema.json").unlink()
    pkg.edit(schemas={"input": "assets/input.schema.json"})
    assert _code(pkg.load) == "SKILL_SCHEMA_INVALID"


def test_input_and_parameter_schemas_are_optional(pkg):
    (pkg.root / "assets" / "input.schema.json").unlink()
    (pkg.root / "assets" / "parameter.schema.json").unlink()
    pkg.edit(schemas={"output": "assets/output.schema.json"})
    package = pkg.load()
    assert package.schemas["input"]["type"] == "object"
    assert package.schemas["parameter"]["type"] == "object"


def test_declared_schema_path_falls_back_to_convention_with_a_warning(pkg):
    pkg.edit(
        schemas={
            "input": "assets/nope.json",
            "parameter": "assets/parameter.schema.json",
            "output": "assets/output.schema.json",
        }
    )
    package = pkg.load()
    assert package.schemas["input"]["properties"]["topic"]["type"] == "string"
    assert [w["code"] for w in package.warnings] == ["SKILL_SCHEMA_PATH_FALLBACK"]


def test_declared_schema_outside_the_package_is_never_read(pkg, tmp_path):
    (tmp_path / "evil.json").write_text(json.dumps({"type": "object", "properties": {"evil": {}}}))
    pkg.edit(schemas={"output": "../evil.json"})
    package = pkg.load()
    assert "evil" not in package.schemas["output"].get("properties", {})


@pytest.mark.parametrize(
    "schema",
    ['{"type": 12}', '{"type": "array", "items": {}}', "not json", "[]", '{"properties": {"a": {"type": "nonsense"}}}'],
)
def test_invalid_schemas(pkg, schema):
    pkg.write("assets/output.schema.json", schema)
    assert _code(pkg.load) == "SKILL_SCHEMA_INVALID"


def test_artifacts_come_from_output_schema_x_type(pkg):
    """R-OU1: x-type artifact + x-filename declares a file; required follows the schema's required."""
    package = pkg.load()
    assert package.artifacts == [
        {"role": "poem", "filename": "haiku.md", "required": True, "property": "haiku_file", "kind": "file"}
    ]


def test_artifacts_of_optional_property_and_runner_patterns():
    schema = {
        "type": "object",
        "properties": {
            "report": {"type": "string", "x-type": "artifact", "x-filename": "report.md"},
            "extra": {"type": "string", "x-type": "artifact", "x-filename": "extra.csv"},
            "plain": {"type": "string"},
        },
        "required": ["report"],
    }
    manifest = {
        "artifacts": [
            {"role": "log", "pattern": "run.log", "required": True},
            {"role": "any", "pattern": "*.png"},
        ]
    }
    found = {a["filename"]: a["required"] for a in artifacts_of(manifest, schema)}
    assert found == {"report.md": True, "extra.csv": False, "run.log": True}


@pytest.mark.parametrize("name", ["/tmp/escaped.md", "../haiku.md", "sub/haiku.md", "..", ".", "", "a\\b", "a\nb", 7])
def test_artifact_file_names_are_one_safe_component(pkg, name):
    """R-SB7: an x-filename that could point outside artifacts/ is refused at install."""
    schema = json.loads((pkg.root / "assets" / "output.schema.json").read_text())
    schema["properties"]["haiku_file"]["x-filename"] = name
    pkg.write("assets/output.schema.json", json.dumps(schema))
    assert _code(pkg.load) == "SKILL_SCHEMA_INVALID"


@pytest.mark.parametrize("pattern", ["/etc/passwd", "../x", "out/../../x", "a\0b", "", None])
def test_runner_artifact_patterns_are_relative_without_parent_steps(pkg, pattern):
    """R-SB7: runner.json artifact patterns are relative and never climb out."""
    pkg.edit(artifacts=[{"role": "log", "pattern": pattern, "required": True}])
    assert _code(pkg.load) == "SKILL_MANIFEST_INVALID"


def test_artifacts_by_value_and_manifests_are_declared_too():
    """R-OU1: today's packages name no file: the value is the path; artifact-manifest lists files."""
    schema = {
        "type": "object",
        "properties": {
            "report": {"type": "string", "x-type": "artifact", "x-role": "report"},
            "data": {"type": ["string", "null"], "x-type": "file"},
            "figures": {"type": "string", "x-type": "artifact-manifest", "x-role": "figures"},
        },
        "required": ["report", "figures"],
    }
    declared = {(a["property"], a["filename"], a["required"], a["kind"]) for a in artifacts_of({}, schema)}
    assert declared == {
        ("report", None, True, "file"),
        ("data", None, False, "file"),
        ("figures", None, True, "manifest"),
    }


@pytest.mark.parametrize("dependencies", [["pypdf>=4", "six"], []])
def test_runtime_dependencies_are_requirements(pkg, dependencies):
    """R-SK7: runtime.dependencies is a list of package requirements from the index."""
    pkg.edit(runtime={"dependencies": dependencies})
    assert pkg.load().manifest["runtime"]["dependencies"] == dependencies


@pytest.mark.parametrize("dependencies", ["pypdf", [1], ["not a requirement!"], ["pkg @ https://example.test/pkg.whl"]])
def test_bad_runtime_dependencies_are_refused(pkg, dependencies):
    pkg.edit(runtime={"dependencies": dependencies})
    assert _code(pkg.load) == "SKILL_MANIFEST_INVALID"


def test_fingerprint_changes_with_content(pkg):
    first = pkg.load().fingerprint()
    assert pkg.load().fingerprint() == first
    pkg.write("references/note.md", "more")
    assert pkg.load().fingerprint() != first


def test_loading_changes_nothing_on_disk(pkg):
    from tests.support.jobs import tree_state

    before = tree_state(pkg.root)
    pkg.load()
    assert tree_state(Path(pkg.root)) == before
