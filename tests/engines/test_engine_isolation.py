"""How the engine process is started (R-EN5, R-EN4, R-EN1, §7): run dir as cwd, stdin closed, its own
process group, HOME/CODEX_HOME under the data dir, and an allow-listed environment that never
carries the server's secrets."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from runs.models import Run
from tests.support.jobs import create_job, haiku_step

pytestmark = pytest.mark.django_db(transaction=True)

SERVER_SECRETS = {
    "SECRET_KEY": "server-secret-key-must-not-leak",
    "DATABASE_URL": "postgres://skill:hunter2@db.internal:5432/skills",
    "REDIS_URL": "redis://:hunter2@cache.internal:6379/0",
    "AWS_SECRET_ACCESS_KEY": "aws-secret-must-not-leak",
    "OPENAI_API_KEY": "sk-server-own-key-must-not-leak-0000",
    "GITHUB_TOKEN": "ghp_must_not_leak",
    "SKILLRUNNER_CODEX_API_KEY": "env-var-not-the-setting",
}


@pytest.fixture
def env_run(api, install_skill, probing_codex, monkeypatch):
    """A finished run whose engine dumped its environment; returns (run, env, spawn record)."""
    from runs.models import Run

    for key, value in SERVER_SECRETS.items():
        monkeypatch.setenv(key, value)
    install_skill("haiku-writer")
    probing_codex.fake.script(haiku_step(echo_env="engine-env.json"))  # in the run dir, its cwd
    rid = create_job(api)["request_id"]
    run = Run.objects.get(pk=rid)
    assert run.status == "succeeded", run.error
    [spawn] = probing_codex.spawns()
    return run, json.loads((run.run_dir / "engine-env.json").read_text()), spawn


def test_engine_runs_in_the_run_directory(env_run):
    run, _, spawn = env_run
    assert Path(spawn["cwd"]).resolve() == run.run_dir.resolve()


def test_engine_stdin_is_closed(env_run):
    _, _, spawn = env_run
    assert spawn["stdin"] == "/dev/null"


def test_engine_has_its_own_process_group_and_session(env_run, settings):
    """Its own session; in the sandbox (R-SB3) that session is led by the sandbox's init (pid 1
    of its PID namespace) rather than by the engine itself."""
    _, _, spawn = env_run
    leader = 1 if settings.SKILLRUNNER_SANDBOX == "bwrap" else spawn["pid"]
    assert spawn["pgid"] == spawn["sid"] == leader
    assert spawn["pgid"] != os.getpgrp()


def test_engine_home_is_under_the_data_dir(env_run, settings):
    _, env, _ = env_run
    data_dir = Path(settings.DATA_DIR).resolve()
    for key in ("HOME", "CODEX_HOME"):
        assert key in env, key
        assert Path(env[key]).resolve().is_relative_to(data_dir), (key, env[key])
    real_home = os.path.expanduser("~")
    assert Path(env["HOME"]).resolve() != Path(real_home).resolve()
    assert not Path(env["CODEX_HOME"]).resolve().is_relative_to(Path(real_home).resolve() / ".codex")


def test_server_secrets_never_reach_the_engine(env_run):
    _, env, _ = env_run
    leaked = {key for key in SERVER_SECRETS if key in env}
    assert leaked == set(), leaked
    values = set(SERVER_SECRETS.values())
    assert not [k for k, v in env.items() if v in values], "a secret value reached the engine under another name"
    assert "DJANGO_SETTINGS_MODULE" not in env


def test_engine_environment_is_an_allow_list(env_run, monkeypatch):
    """Only a few harmless server variables pass; everything else is the engine's own."""
    _, env, _ = env_run
    allowed_server = {"PATH", "LANG", "LC_ALL", "TZ", "TERM", "LC_CTYPE"}
    engine_own = {
        "HOME",
        "CODEX_HOME",
        "TMPDIR",
        "NO_COLOR",
        "OPENAI_API_KEY",
        "CODEX_API_KEY",
        "SKILLRUNNER_PROVIDER_API_KEY",
        "PWD",
        "SHLVL",
        "_",
    }
    unexpected = set(env) - allowed_server - engine_own
    assert unexpected == set(), unexpected


def test_configured_engine_key_stays_with_the_relay(api, install_skill, fake_codex, configure_engine):
    """R-EN8, R-SB8: the engine holds a placeholder for the key the operator configured; only the
    provider relay adds the key (tests/real_engines/test_red_team_real_engines.py: what the provider gets)."""
    configure_engine("codex", api_key="operator-configured-codex-key-42")
    install_skill("haiku-writer")
    fake_codex.script(haiku_step(echo_env="env.json"))  # in the run dir, where a sandboxed engine may write
    run_dir = Run.objects.get(pk=create_job(api)["request_id"]).run_dir
    env = json.loads((run_dir / "env.json").read_text())
    assert "operator-configured-codex-key-42" not in json.dumps(env)
    assert env["SKILLRUNNER_PROVIDER_API_KEY"].startswith("skillrunner-placeholder-")


def test_configured_engine_key_is_passed_without_the_sandbox(
    api, install_skill, fake_codex, configure_engine, settings
):
    """R-EN5/R-EN8: with the sandbox (and so the relay) switched off, the key goes to codex itself."""
    settings.SKILLRUNNER_SANDBOX = "off"
    configure_engine("codex", api_key="operator-configured-codex-key-42")
    install_skill("haiku-writer")
    fake_codex.script(haiku_step(echo_env="env.json"))
    run_dir = Run.objects.get(pk=create_job(api)["request_id"]).run_dir
    env = json.loads((run_dir / "env.json").read_text())
    assert "operator-configured-codex-key-42" in env.values()


def test_provider_endpoint_goes_to_the_codex_home_config(api, install_skill, fake_codex, configure_engine):
    """R-EN8, R-SB8: the base URL becomes a model_providers entry in the engine's own config.toml,
    as the provider relay's loopback address with the provider's path; the key stays with the relay."""
    configure_engine("codex", api_key="provider-key-99", base_url="http://127.0.0.1:9/v1")
    install_skill("haiku-writer")
    fake_codex.script(haiku_step(echo_env="env.json"))  # in the run dir, where a sandboxed engine may write
    run_dir = Run.objects.get(pk=create_job(api)["request_id"]).run_dir
    env = json.loads((run_dir / "env.json").read_text())
    config = (Path(env["CODEX_HOME"]) / "config.toml").read_text()
    relay = re.search(r'base_url = "http://127\.0\.0\.1:(\d+)/v1"', config)
    assert relay is not None and relay.group(1) != "9", config
    assert 'wire_api = "responses"' in config
    assert "provider-key-99" not in config and "provider-key-99" not in json.dumps(env)
    assert env["SKILLRUNNER_PROVIDER_API_KEY"].startswith("skillrunner-placeholder-")


def test_codex_command_line(api, install_skill, fake_codex, settings):
    """§7 + R-EN1: `codex exec --skip-git-repo-check --json <auto-flag> [-m M] <prompt>` as an argv list."""
    settings.SKILLRUNNER_ALLOW_ANY_MODEL = True  # a model the catalogue does not list (R-UP9)
    install_skill("haiku-writer")
    fake_codex.script(haiku_step())
    create_job(api, model="gpt-test-model")
    [invocation] = fake_codex.invocations()
    argv = invocation["argv"]
    assert argv[:3] == ["exec", "--skip-git-repo-check", "--json"]
    assert "--yolo" in argv or "--full-auto" in argv
    assert argv[argv.index("-m") + 1] == "gpt-test-model"
    assert "resume" not in argv
    assert argv[-1] == invocation["prompt"]
    assert "haiku-writer" in argv[-1]


def test_run_local_skill_copy_is_where_codex_finds_it(env_run):
    """R-EN5 + R-PA1/R-PA2: the patched copy lives in <run>/.codex/skills/<id>/ and points at artifacts/."""
    run, _, _ = env_run
    copy = run.run_dir / ".codex" / "skills" / "haiku-writer" / "SKILL.md"
    text = copy.read_text()
    assert str((run.run_dir / "artifacts").resolve()) in text
    assert text.startswith((run.skill_version.path / "SKILL.md").read_text().rstrip()[:40])


def test_engine_binary_is_configurable(api, install_skill, fake_codex, settings):
    """R-EN4: SKILLRUNNER_CODEX_BIN may name any executable (here the scripted stand-in)."""
    install_skill("haiku-writer")
    fake_codex.script(haiku_step())
    assert settings.SKILLRUNNER_ENGINES["codex"]["binary"] == str(fake_codex.binary)
    create_job(api)
    assert len(fake_codex.invocations()) == 1
