"""Adding an engine is adding one module (SPEC §1, R-EN4): the registry finds every concrete
adapter of a module, and the rest of the service takes engine names and control files from it."""

from __future__ import annotations

import types
from pathlib import Path

import pytest

from engines import registry
from engines.base import EngineAdapter
from kernel import archives
from tests.engines import toy_engine
from tests.engines.fakes import FakeControl, make_config, make_request, write_script

TOY_CLI = """
import json, sys
args = sys.argv[1:]
session = args[args.index("--resume") + 1] if "--resume" in args else "toy-session-1"
prompt = args[args.index("-p") + 1]
print("starting")  # noise the adapter skips
print(json.dumps({"session": session, "message": json.dumps({"echo": prompt.strip(), "__SKILL_DONE__": True})}))
"""


def test_the_built_in_engines_are_found_in_listing_order():
    assert registry.ENGINE_NAMES == ("codex", "gemini", "iflow", "claude", "opencode", "qwen", "kilo")
    assert registry.discover("engines").keys() == registry.ADAPTERS.keys()


def test_control_names_come_from_the_adapters():
    """R-SK2: what configures a CLI is named by its adapter, and archives refuse exactly that."""
    assert registry.CONTROL_NAMES == {
        ".codex",
        ".gemini",
        ".iflow",
        ".claude",
        ".qwen",
        ".mcp.json",
        ".env",
        ".agents",
        ".opencode",
        ".kilo",
        ".kilocode",
    }
    assert archives.CONTROL_NAMES is registry.CONTROL_NAMES


def test_a_toy_engine_from_one_module_runs_a_turn(tmp_path: Path):
    (toy,) = registry.adapters_in(toy_engine)
    assert toy.name == "toy" and toy.control_names() == (".toy", ".toyrc")
    binary = write_script(tmp_path / "toy", TOY_CLI, interpreter="python")
    config = make_config(tmp_path, binary)
    request = make_request(tmp_path, mode="interactive", prompt="hello")

    result = toy.run_turn(request, config, FakeControl())

    assert result.failure_reason is None, result.failure_message
    assert result.command == [str(binary), "--yes", "-p", "hello"]
    assert result.outcome == "final" and result.done_marker_found
    assert result.final_data == {"echo": "hello"}
    assert result.session_handle == "toy-session-1"
    assert (request.run_dir / ".toy" / "skills" / "demo-skill" / "SKILL.md").is_file()  # the shared machinery ran


def test_an_adapter_missing_a_method_is_not_an_engine():
    module = types.ModuleType("half_engine")

    class Half(EngineAdapter):
        name = "half"
        skill_root = ".half"

    Half.__module__ = module.__name__
    module.Half = Half  # type: ignore[attr-defined]
    with pytest.raises(TypeError):
        Half()  # type: ignore[abstract]
    assert registry.adapters_in(module) == []
    assert registry.adapters_in(toy_engine)[0].name == "toy"  # not an engine merely by importing the base
