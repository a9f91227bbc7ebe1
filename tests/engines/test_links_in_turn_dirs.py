"""R-SB7 on the engine side: preparing a turn never writes through links the agent left in its
run directory or its engine home (the service runs as root; the agent owns both trees). Links
in the run dir are left alone (never followed); links in the engine home are replaced."""

from __future__ import annotations

import pytest

from engines.registry import get_adapter
from engines.types import EngineConfig, SkillMaterial, TurnRequest


@pytest.mark.parametrize("engine", ["codex", "gemini", "iflow", "claude", "qwen", "opencode", "kilo"])
def test_turn_preparation_replaces_links_instead_of_following_them(engine, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    skill = tmp_path / "skill"
    skill.mkdir()
    (skill / "SKILL.md").write_text("---\nname: s\n---\nDo it.\n")
    run_dir, home = tmp_path / "data" / "runs" / "r", tmp_path / "data" / "engine-homes" / engine / "r"
    run_dir.mkdir(parents=True)
    home.mkdir(parents=True)
    adapter = get_adapter(engine)
    # What a hostile agent leaves behind after its first turn:
    (run_dir / "artifacts").symlink_to(outside)
    (run_dir / adapter.skill_root).symlink_to(outside)
    for name in ("home", "tmp", ".gemini", ".qwen", "config.toml", "config"):
        (home / name).symlink_to(outside / name if name == "config.toml" else outside)

    request = TurnRequest(run_dir, "go", "auto", SkillMaterial("s", skill), hard_timeout_seconds=5)
    config = EngineConfig(binary="/bin/true", home=home, base_url="http://127.0.0.1:9/v1", api_key="k")
    adapter.prepare_turn(request, config)

    assert list(outside.iterdir()) == [], "the service wrote through an agent's link"
    for path in [home / "home", home / "tmp"]:
        assert path.is_dir() and not path.is_symlink(), path
