"""Runtime patches, skill materialisation and prompts (R-PA1..R-PA5, R-EN5, R-EN6;
seed: 运行时补丁 MUST 与执行模式一致)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from engines.patching import ARTIFACT_MARKER, MODE_MARKER, artifact_patch, mode_patch, patch_skill_file
from engines.prompt import first_turn_prompt, reply_prompt
from engines.protocol import FIELD_TYPES, KINDS, parse_interaction
from engines.registry import get_adapter
from engines.types import ArtifactSpec
from tests.engines.fakes import make_request, make_skill

ARTIFACTS = (ArtifactSpec("report", "report.md"), ArtifactSpec("data", "data.json", required=False))
PAYLOAD_VOCABULARY = re.compile(r"\b(kind|prompt|options|ui_hints)\b", re.IGNORECASE)
ASKING_PROHIBITION = re.compile(
    r"(do not|don't|never|must not|mustn't|cannot|can't|not allowed to|forbidden to)\s+(\w+\s+){0,3}(ask|question)",
    re.IGNORECASE,
)


def _patched(tmp_path: Path, mode: str, name: str = "SKILL.md") -> tuple[str, Path]:
    skill = tmp_path / name
    skill.write_text("# Skill\n\nSave the output to ./out/report.md\n", encoding="utf-8")
    run_dir = tmp_path / "run"
    patch_skill_file(skill, run_dir, mode, ARTIFACTS)  # type: ignore[arg-type]
    return skill.read_text(encoding="utf-8"), run_dir


@pytest.mark.parametrize("mode", ["auto", "interactive"])
def test_artifact_redirect_patch_applies_in_both_modes(tmp_path: Path, mode: str) -> None:
    text, run_dir = _patched(tmp_path, mode)
    artifacts_dir = f"{run_dir.resolve()}/artifacts/"
    artifact_part, mode_part = text.split(MODE_MARKER)
    assert text.count(ARTIFACT_MARKER) == 1 and text.count(MODE_MARKER) == 1
    assert text.index(ARTIFACT_MARKER) < text.index(MODE_MARKER)  # fixed order (R-PA1)
    assert f"`{artifacts_dir}`" in artifact_part
    assert f"{artifacts_dir}report.md" in artifact_part and f"{artifacts_dir}data.json" in artifact_part
    assert "overrides every other output location" in artifact_part
    assert str(run_dir.resolve()) not in mode_part  # the path appears only in the artifact part (R-PA5)
    assert text.startswith("# Skill\n")  # the skill's own text is kept


def test_artifact_patch_is_identical_in_both_modes(tmp_path: Path) -> None:
    def artifact_part(text: str) -> str:
        return text[text.index(ARTIFACT_MARKER) : text.index(MODE_MARKER)]

    auto, _ = _patched(tmp_path, "auto", "auto.md")
    interactive, _ = _patched(tmp_path, "interactive", "interactive.md")
    assert artifact_part(auto) == artifact_part(interactive)
    assert mode_patch("auto") in auto and mode_patch("interactive") in interactive


def test_artifact_patch_without_declared_artifacts_still_redirects(tmp_path: Path) -> None:
    text = artifact_patch(tmp_path, [])
    assert f"{tmp_path.resolve()}/artifacts/" in text
    assert "names no fixed output files" in text


def test_auto_mode_patch_keeps_no_asking_constraint() -> None:
    text = " ".join(mode_patch("auto").split())
    assert "Never ask the user anything" in text
    assert "decide by yourself" in text
    assert not PAYLOAD_VOCABULARY.search(text)  # R-PA3


def test_interactive_mode_patch_allows_asking_and_describes_the_envelope() -> None:
    text = mode_patch("interactive")
    assert "You may ask the user" in " ".join(text.split())
    block = re.search(r"```json\n(.*?)\n```", text, re.DOTALL).group(1)  # type: ignore[union-attr]
    examples = [json.loads(line)["ask_user"] for line in block.splitlines()]
    assert all(set(example) >= {"interaction_id", "kind", "prompt"} for example in examples)
    assert "optional" in text.lower()
    assert '"__SKILL_DONE__": true' in text and "only" in text


def test_interactive_mode_patch_shows_every_kind_with_an_example_the_parser_takes_whole() -> None:
    text = mode_patch("interactive")
    block = re.search(r"```json\n(.*?)\n```", text, re.DOTALL).group(1)  # type: ignore[union-attr]
    asked = []
    for line in block.splitlines():
        interaction, degraded = parse_interaction(json.loads(line)["ask_user"])
        assert interaction is not None and degraded == "", line
        asked.append(interaction.kind)
    assert asked == list(KINDS)
    for kind in KINDS:
        assert f"- `{kind}`:" in text
    for field_type in FIELD_TYPES:
        assert f"`{field_type}`" in text


def test_interactive_mode_patch_has_no_prohibition_on_asking(tmp_path: Path) -> None:
    text, _ = _patched(tmp_path, "interactive")
    patch = text[text.index(ARTIFACT_MARKER) :]
    assert not ASKING_PROHIBITION.search(patch)
    assert ASKING_PROHIBITION.search(mode_patch("auto"))  # the detector does catch the auto wording


@pytest.mark.parametrize("mode", ["auto", "interactive"])
def test_repatching_is_a_no_op(tmp_path: Path, mode: str) -> None:
    text, run_dir = _patched(tmp_path, mode)
    patch_skill_file(tmp_path / "SKILL.md", run_dir, mode, ARTIFACTS)  # type: ignore[arg-type]
    assert (tmp_path / "SKILL.md").read_text(encoding="utf-8") == text


def test_unknown_mode_is_refused() -> None:
    with pytest.raises(ValueError):
        mode_patch("batch")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "engine,root", [("codex", ".codex"), ("gemini", ".gemini"), ("iflow", ".iflow"), ("claude", ".claude")]
)
def test_materialize_skill_copies_into_the_engine_skill_folder_once(tmp_path: Path, engine: str, root: str) -> None:
    skill = make_skill(tmp_path, ARTIFACTS)
    request = make_request(tmp_path, "interactive", skill=skill)
    adapter = get_adapter(engine)
    target = adapter.materialize_skill(request)
    assert target == request.run_dir.resolve() / root / "skills" / "demo-skill"
    assert (target / "assets" / "runner.json").exists()
    assert (request.run_dir / "artifacts").is_dir()
    patched = (target / "SKILL.md").read_text(encoding="utf-8")
    assert patched.count(ARTIFACT_MARKER) == 1
    assert ARTIFACT_MARKER not in (skill.source_dir / "SKILL.md").read_text(
        encoding="utf-8"
    )  # never the installed skill
    (target / "scratch.txt").write_text("kept", encoding="utf-8")
    assert adapter.materialize_skill(request) == target  # a resume turn: nothing copied or patched again
    assert (target / "SKILL.md").read_text(encoding="utf-8") == patched
    assert (target / "scratch.txt").read_text(encoding="utf-8") == "kept"


def test_first_turn_prompt_lists_skill_inputs_parameters_and_directories(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    skill_dir = get_adapter("codex").skill_dir(run_dir, "demo-skill")
    prompt = first_turn_prompt(
        "demo-skill",
        "Demo Skill",
        {"topic": "tea", "count": 3},
        {"language": "fr", "strict": True},
        {"source": tmp_path / "uploads" / "a.pdf"},
        run_dir,
        skill_dir=skill_dir,
    )
    assert "`demo-skill` (Demo Skill)" in prompt
    assert f"{skill_dir}/SKILL.md" in prompt
    assert '- `topic`: "tea"' in prompt and "- `count`: 3" in prompt
    assert f"- `source` (file): {(tmp_path / 'uploads' / 'a.pdf').resolve()}" in prompt
    assert '- `language`: "fr"' in prompt and "- `strict`: true" in prompt
    assert f"Run directory (your working directory): {run_dir.resolve()}" in prompt
    assert f"{run_dir.resolve()}/artifacts" in prompt


def test_first_turn_prompt_without_inputs(tmp_path: Path) -> None:
    prompt = first_turn_prompt("s", "s", {}, {}, {}, tmp_path)
    assert prompt.count("(none)") == 2
    assert "SKILL.md" not in prompt


@pytest.mark.parametrize(
    "response,prompt",
    [
        ("Use French.", "Use French."),
        ({"choice": "fr", "n": 1}, '{"choice":"fr","n":1}'),
        (["a", "é"], '["a","é"]'),
        (3, "3"),
        ({"text": "Use French."}, "Use French."),  # upstream's clients send typed text so
        ({"text": "fr", "choice": 1}, '{"text":"fr","choice":1}'),
        ({"text": 7}, '{"text":7}'),
    ],
)
def test_reply_prompt_is_the_reply_itself(response: object, prompt: str) -> None:
    assert reply_prompt(response) == prompt


def test_prompts_replace_lone_surrogates_so_any_cli_can_receive_them(tmp_path: Path) -> None:
    prompt = first_turn_prompt("s", "s", {"topic": "sea \ud800"}, {}, {}, tmp_path)
    assert '"sea \ufffd"' in prompt
    prompt.encode("utf-8")  # would raise on a lone surrogate
    assert reply_prompt("ok \udfff") == "ok \ufffd"
    assert reply_prompt({"a": "\ud83d"}) == '{"a":"\ufffd"}'
    assert reply_prompt("emoji 😀 stays") == "emoji 😀 stays"


def test_materialize_skill_never_writes_through_links_the_agent_left(tmp_path: Path) -> None:
    """R-SB7: a later turn never writes into the agent's copy, which may now be a link anywhere;
    a linked skill folder is not copied into either."""
    skill = make_skill(tmp_path, ARTIFACTS)
    request = make_request(tmp_path, "auto", skill=skill)
    adapter = get_adapter("codex")
    target = adapter.materialize_skill(request)
    victim = tmp_path / "victim.pth"
    victim.write_text("untouched", encoding="utf-8")
    (target / "SKILL.md").unlink()
    (target / "SKILL.md").symlink_to(victim)
    adapter.materialize_skill(request)
    assert victim.read_text(encoding="utf-8") == "untouched"

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    shutil.rmtree(target.parent)
    target.parent.symlink_to(elsewhere, target_is_directory=True)
    adapter.materialize_skill(request)
    assert list(elsewhere.iterdir()) == []


def test_engine_config_files_are_never_written_through_links(tmp_path: Path) -> None:
    """R-SB7: the agent can write its engine home; a link at the config file or at the old,
    guessable staging name never makes the service write into the link's target."""
    import os
    import threading

    from engines.base import write_if_changed

    victim = tmp_path / "victim.sqlite3"
    victim.write_text("untouched", encoding="utf-8")
    config = tmp_path / "home" / "config.toml"
    config.parent.mkdir()
    (config.parent / f".config.toml.{os.getpid()}.{threading.get_ident()}.tmp").symlink_to(victim)
    config.symlink_to(victim)
    write_if_changed(config, "model = 'x'\n", config.parent)
    assert victim.read_text(encoding="utf-8") == "untouched"
    assert not config.is_symlink() and config.read_text(encoding="utf-8") == "model = 'x'\n"
