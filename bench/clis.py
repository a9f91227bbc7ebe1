"""One turn of each real engine CLI, unconfined and in bubblewrap, against the scripted model.

The pinned CLIs (engines/cli, `make engines`) run through their adapters exactly as a run's turn
runs them: the skill copy, the engine home and its config files, the command line, the sandbox.
The model is tests/support/scripted_model_server.py, offline: one shell call, then the answer.
Each figure is the wall time of `adapter.run_turn`, so it holds the CLI's own start-up and
shutdown and two model round trips on loopback: what a turn of that engine costs besides the
model's thinking. The engines are those tests/support/engine_env.py knows how to point at it.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from engines.registry import get_adapter
from engines.sandbox import sandbox_problem
from engines.types import EngineConfig, SandboxSettings, SkillMaterial, TurnRequest
from tests.support.engine_env import ENGINES, SERVICE_MODELS, SERVICE_URL_PATHS, engine_binary
from tests.support.scripted_model_server import ScriptedModelServer

from .engine import QuietControl

MODES = ("unconfined", "bwrap")
SCRIPT = [{"shell": "echo bench > artifacts/bench.txt"}, {"text": '{"written": "artifacts/bench.txt"}'}]
TURN_TIMEOUT = 120.0
SKILL_FILE = "---\nname: cli-bench\ndescription: Writes one file.\n---\nWrite artifacts/bench.txt.\n"


def measure(workdir: Path, samples: int) -> dict[str, Any]:
    """{engine: {"version", "unconfined": [seconds], "bwrap": [seconds]}}, or {engine: {"error"}}
    for an engine whose CLI is missing or whose turn failed. The modes alternate, so both see
    the same machine load."""
    problem = sandbox_problem(SandboxSettings())
    skill = workdir / "skill"
    skill.mkdir(parents=True, exist_ok=True)
    (skill / "SKILL.md").write_text(SKILL_FILE)
    results: dict[str, Any] = {}
    with ScriptedModelServer(SCRIPT) as server:
        for engine in ENGINES:
            binary = engine_binary(engine)
            if problem:  # said before any turn runs: a real CLI turn takes seconds
                results[engine] = {"error": f"no sandbox here: {problem}"}
                continue
            if not binary.exists():
                results[engine] = {"error": f"not installed at {binary} (make engines)"}
                continue
            try:
                results[engine] = _engine_turns(engine, binary, server.url, skill, workdir, samples)
            except _TurnFailed as failed:
                results[engine] = {"error": str(failed)}
    return results


class _TurnFailed(Exception):
    pass


def _engine_turns(
    engine: str, binary: Path, server_url: str, skill: Path, workdir: Path, samples: int
) -> dict[str, Any]:
    adapter = get_adapter(engine)
    figures: dict[str, Any] = {mode: [] for mode in MODES}
    for index in range(samples):
        for mode in MODES:
            run_dir = workdir / "data" / "runs" / f"{engine}-{mode}-{index}"
            run_dir.mkdir(parents=True)
            config = EngineConfig(
                binary=str(binary),
                home=workdir / "data" / "engine-homes" / engine / f"{mode}-{index}",
                base_url=server_url + SERVICE_URL_PATHS.get(engine, ""),
                api_key="bench-key",
                default_model=SERVICE_MODELS[engine] or None,
                sandbox=SandboxSettings(mode="bwrap" if mode == "bwrap" else "off"),
            )
            config.home.mkdir(parents=True)
            request = TurnRequest(
                run_dir, "Write the bench file.", "auto", SkillMaterial("cli-bench", skill), TURN_TIMEOUT
            )
            began = time.perf_counter()
            result = adapter.run_turn(request, config, QuietControl())
            elapsed = time.perf_counter() - began
            if result.outcome != "final" or not (run_dir / "artifacts" / "bench.txt").exists():
                raise _TurnFailed(f"{mode} turn failed: {result.failure_reason} {result.failure_message}")
            figures[mode].append(elapsed)
    figures["version"] = adapter.detect_version(config)
    return figures
