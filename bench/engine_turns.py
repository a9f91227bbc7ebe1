"""One turn of each engine CLI installed here (`make engines`), unconfined and in the agent sandbox.

Each turn is what a run's first turn is: the adapter's own `run_turn` (skill copy, engine home,
command line, process, parsing) against the scripted model server, whose model calls the shell
tool once and then answers. A first, unmeasured turn of each CLI brings its files into the page
cache; then the two modes alternate, so both see the same machine load. Wall time from the call
to the result; the CLIs' start-up dominates it, which is the point: it is the price of a turn that
no part of the service can lower.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from engines.registry import ADAPTERS
from engines.types import EngineConfig, SandboxSettings, SkillMaterial, TurnRequest
from tests.support.engine_env import BIN_DIR, SERVICE_MODELS, service_base_url
from tests.support.scripted_model_server import ScriptedModelServer

MODES = ("unconfined", "bwrap")
SCRIPT = [{"shell": "echo bench > artifacts/bench.txt"}, {"text": json.dumps({"ok": True})}]
TURN_TIMEOUT = 300.0


class _Control:
    def on_spawn(self, pid: int) -> None:
        pass

    def on_activity(self, item: dict) -> None:
        pass

    def on_output(self, stream: str, chunk: bytes) -> None:
        pass

    def should_abort(self) -> bool:
        return False


def installed_engines() -> list[str]:
    """The registered engines whose pinned CLI is installed in engines/cli."""
    return [name for name in ADAPTERS if (BIN_DIR / name).exists()]


def _skill(root: Path) -> SkillMaterial:
    source = root / "skill" / "bench-turn"
    source.mkdir(parents=True, exist_ok=True)
    (source / "SKILL.md").write_text("---\nname: bench-turn\ndescription: One benchmark turn.\n---\n\nAnswer.\n")
    return SkillMaterial("bench-turn", source)


def measure(root: Path, samples: int) -> dict[str, Any]:
    """{engine: {"version", "unconfined": [s…], "bwrap": [s…]}} for each installed CLI."""
    results: dict[str, Any] = {}
    skill = _skill(root)
    with ScriptedModelServer(SCRIPT) as server:
        for engine in installed_engines():
            adapter = ADAPTERS[engine]
            timings: dict[str, Any] = {mode: [] for mode in MODES}
            for index in range(-1, samples):  # -1: the warm-up, not kept
                for mode in MODES[:1] if index < 0 else MODES:
                    name = f"{engine}-{mode}-{index + 1}"
                    config = EngineConfig(
                        binary=str(BIN_DIR / engine),
                        home=root / "data" / "engine-homes" / engine / name,
                        base_url=service_base_url(engine, server.url),
                        api_key="bench-key",
                        default_model=SERVICE_MODELS.get(engine) or None,
                        sandbox=SandboxSettings(mode="bwrap" if mode == "bwrap" else "off"),
                    )
                    run_dir = root / "data" / "runs" / name
                    run_dir.mkdir(parents=True)
                    request = TurnRequest(run_dir, "Run the benchmark turn.", "auto", skill, TURN_TIMEOUT)
                    began = time.perf_counter()
                    result = adapter.run_turn(request, config, _Control())
                    elapsed = time.perf_counter() - began
                    if result.outcome == "error" or not (run_dir / "artifacts" / "bench.txt").exists():
                        raise RuntimeError(
                            f"{engine} ({mode}) failed its bench turn: {result.failure_message or result.stderr[-500:]}"
                        )
                    if index >= 0:
                        timings[mode].append(elapsed)
            timings["version"] = adapter.detect_version(config)
            results[engine] = timings
            print(f"engine turn {engine}: {json.dumps(timings)}", flush=True)
    return results
