"""Fixtures for the real-engine tests: a fresh scripted model server and temp homes per test."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.engine_env import engine_env, require_engine
from tests.support.scripted_model_server import KIND_UNKNOWN, ScriptedModelServer


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
