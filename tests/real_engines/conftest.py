"""Fixtures for the real-engine tests: a fresh scripted model server and temp homes per test."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.interactive.helpers import kill_all, processes_in
from tests.support.engine_env import engine_binary, engine_env
from tests.support.scripted_model_server import KIND_UNKNOWN, ScriptedModelServer

# Models the scripted server serves without extra side calls (see tests/support/engine_env.py).
SERVICE_MODELS = {"codex": "gpt-5.5", "gemini": "gemini-2.5-flash", "claude": ""}


def require_engine(engine: str) -> Path:
    """The pinned CLI binary; a missing one FAILS the test (``make test`` installs them)."""
    binary = engine_binary(engine)
    if not binary.exists():
        pytest.fail(
            f"{engine} CLI not installed at {binary}; run `make engines` (npm ci in engines/cli)",
            pytrace=False,
        )
    return binary


@dataclass
class Sandbox:
    """One isolated place to run a CLI: its home (config, sessions) and its working directory."""

    engine: str
    server: ScriptedModelServer
    home: Path
    cwd: Path
    env: dict[str, str]


@pytest.fixture
def model_server():
    with ScriptedModelServer() as srv:
        yield srv
    unknown = [f"{r.method} {r.path}" for r in srv.requests if r.kind == KIND_UNKNOWN]
    assert not unknown, f"the CLI called endpoints the scripted server does not serve: {unknown}"


@pytest.fixture
def make_sandbox(tmp_path, model_server):
    def make(engine: str) -> Sandbox:
        require_engine(engine)
        home = tmp_path / f"{engine}-home"
        cwd = tmp_path / f"{engine}-work"
        cwd.mkdir(parents=True, exist_ok=True)
        env = engine_env(engine, model_server.url, home)
        return Sandbox(engine, model_server, home, cwd, env)

    return make


@pytest.fixture
def real_engine(settings, model_server):
    """Points one engine of the service at the scripted model server, as an operator would."""

    def configure(engine: str) -> None:
        engines = {name: dict(conf) for name, conf in settings.SKILLRUNNER_ENGINES.items()}
        engines[engine].update(
            binary=str(require_engine(engine)),
            base_url=model_server.url + ("/v1" if engine == "codex" else ""),
            api_key="test-key-not-secret",
            model=SERVICE_MODELS[engine],
        )
        settings.SKILLRUNNER_ENGINES = engines
        settings.SKILLRUNNER_KILL_GRACE_SECONDS = 1.0

    yield configure
    runs = Path(settings.DATA_DIR) / "runs"
    if runs.is_dir():  # whatever a test asserted, no engine process outlives it
        for run_dir in runs.iterdir():
            kill_all(processes_in(run_dir))
