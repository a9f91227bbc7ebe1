"""Engine homes, environments and probes (R-EN4, R-EN5, R-EN8)."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest

from engines.registry import ENGINE_NAMES, get_adapter
from tests.engines.fakes import fake_codex, make_config, make_request, write_script


@pytest.mark.parametrize("engine", ENGINE_NAMES)
def test_environment_is_an_allow_list(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, engine: str) -> None:
    monkeypatch.setenv("SECRET_KEY", "server-secret")
    monkeypatch.setenv("DATABASE_URL", "postgres://u:p@db/x")
    monkeypatch.setenv("OPENAI_API_KEY", "server-openai-key")
    monkeypatch.setenv("TZ", "Europe/Paris")
    config = make_config(
        tmp_path,
        engine,
        api_key="engine-key",
        base_url="http://127.0.0.1:9",
        extra_env={"HTTPS_PROXY": "http://proxy:3128"},
    )
    env = get_adapter(engine).environment(config)
    assert "SECRET_KEY" not in env and "DATABASE_URL" not in env
    assert env.get("OPENAI_API_KEY") != "server-openai-key"
    assert env["TZ"] == "Europe/Paris" and env["PATH"]
    assert env["HTTPS_PROXY"] == "http://proxy:3128"  # operator-configured extras pass through
    assert env["HOME"] == str(config.home / "home")  # never the server user's home
    assert env["TMPDIR"] == str(config.home / "tmp")
    assert "engine-key" in env.values() or engine == "iflow"


def test_extra_env_cannot_break_the_home_isolation(tmp_path: Path) -> None:
    config = make_config(tmp_path, "codex", extra_env={"HOME": "/root", "CODEX_HOME": "/root/.codex"})
    env = get_adapter("codex").environment(config)
    assert env["HOME"] == str(config.home / "home") and env["CODEX_HOME"] == str(config.home)


def test_codex_home_has_a_custom_responses_provider(tmp_path: Path) -> None:
    adapter = get_adapter("codex")
    config = make_config(tmp_path, "codex", api_key="k-1", base_url="http://127.0.0.1:18001/v1")
    adapter.prepare_home(config)
    adapter.prepare_home(config)  # idempotent
    toml = tomllib.loads((config.home / "config.toml").read_text())
    provider = toml["model_providers"][toml["model_provider"]]
    assert provider["base_url"] == "http://127.0.0.1:18001/v1"
    assert provider["wire_api"] == "responses"
    assert provider["request_max_retries"] <= 2 and provider["stream_max_retries"] <= 2
    env = adapter.environment(config)
    assert env[provider["env_key"]] == "k-1"
    assert env["CODEX_HOME"] == str(config.home)


def test_codex_home_without_base_url_uses_the_builtin_provider(tmp_path: Path) -> None:
    adapter = get_adapter("codex")
    config = make_config(tmp_path, "codex", api_key="k-2")
    adapter.prepare_home(config)
    assert "model_provider" not in tomllib.loads((config.home / "config.toml").read_text())
    assert adapter.environment(config)["OPENAI_API_KEY"] == "k-2"


def test_gemini_home_settings_switch_folder_trust_off(tmp_path: Path) -> None:
    adapter = get_adapter("gemini")
    config = make_config(tmp_path, "gemini", api_key="g-key", base_url="http://127.0.0.1:18003")
    adapter.prepare_home(config)
    settings = json.loads((config.home / ".gemini" / "settings.json").read_text())
    assert settings["security"]["auth"]["selectedType"] == "gemini-api-key"
    assert settings["security"]["folderTrust"]["enabled"] is False
    assert settings["general"]["enableAutoUpdate"] is False and settings["general"]["maxAttempts"] <= 3
    assert settings["telemetry"]["enabled"] is False and settings["privacy"]["usageStatisticsEnabled"] is False
    env = adapter.environment(config)
    assert env["GEMINI_CLI_HOME"] == str(config.home)
    assert env["GEMINI_API_KEY"] == "g-key" and env["GOOGLE_GEMINI_BASE_URL"] == "http://127.0.0.1:18003"


def test_iflow_home_settings_carry_key_and_endpoint(tmp_path: Path) -> None:
    adapter = get_adapter("iflow")
    config = make_config(
        tmp_path, "iflow", api_key="i-key", base_url="https://example.test/v1", default_model="glm-4.6"
    )
    adapter.prepare_home(config)
    settings = json.loads((config.home / "home" / ".iflow" / "settings.json").read_text())
    assert settings["apiKey"] == "i-key" and settings["baseUrl"] == "https://example.test/v1"
    assert settings["modelName"] == "glm-4.6"


# The OpenCode family: (config folder and file name, variable prefix, plugin package, skill folder).
OPENCODE_FAMILY = {
    "opencode": ("opencode", "OPENCODE", "@opencode-ai/plugin", ".opencode"),
    "kilo": ("kilo", "KILO", "@kilocode/plugin", ".kilo"),
}


@pytest.mark.parametrize("engine", sorted(OPENCODE_FAMILY))
def test_opencode_home_points_one_openai_compatible_provider_at_the_endpoint(tmp_path: Path, engine: str) -> None:
    """R-EN8: the provider entry names the endpoint and reads the key from the environment (never
    written to disk); the CLI's folders are in the home; nothing is fetched or loaded from the
    run directory; the activity plugin is in place and the plugin package counts as installed."""
    app, prefix, plugin, skill_root = OPENCODE_FAMILY[engine]
    adapter = get_adapter(engine)
    config = make_config(
        tmp_path, engine, api_key="o-key", base_url="http://127.0.0.1:18005/v1", extra_env={"XDG_CONFIG_HOME": "/x"}
    )
    adapter.prepare_turn(make_request(tmp_path, model="m-1"), config)
    adapter.prepare_turn(make_request(tmp_path, model="m-1"), config)  # idempotent
    folder = config.home / "config" / app
    written = json.loads((folder / f"{app}.json").read_text())
    provider = written["provider"]["skillrunner"]
    assert provider["npm"] == "@ai-sdk/openai-compatible"
    assert provider["options"] == {
        "baseURL": "http://127.0.0.1:18005/v1",
        "apiKey": "{env:SKILLRUNNER_PROVIDER_API_KEY}",
    }
    assert list(provider["models"]) == ["m-1"] and written["model"] == "skillrunner/m-1"
    assert written["enabled_providers"] == ["skillrunner"]
    assert written["skills"]["paths"] == [str((tmp_path / "run" / skill_root / "skills").resolve())]
    assert "o-key" not in (folder / f"{app}.json").read_text()
    assert "skillrunner_tool_start" in (folder / "plugins" / "skillrunner-activity.js").read_text()
    assert (folder / "node_modules").is_dir()
    assert json.loads((folder / "package-lock.json").read_text())["packages"][""]["dependencies"] == {plugin: "*"}
    env = adapter.environment(config)
    assert env["SKILLRUNNER_PROVIDER_API_KEY"] == "o-key"
    assert env["XDG_CONFIG_HOME"] == str(config.home / "config")  # the home's, whatever the operator set
    assert env["XDG_DATA_HOME"] == str(config.home / "data")
    for switch in ("PROJECT_CONFIG", "EXTERNAL_SKILLS", "AUTOUPDATE", "MODELS_FETCH", "SHARE", "LSP_DOWNLOAD"):
        assert env[f"{prefix}_DISABLE_{switch}"] == "1", switch


def test_kilo_leaves_its_own_services_off(tmp_path: Path) -> None:
    """Telemetry, its background daemon, session upload, presence and code indexing; few retries."""
    env = get_adapter("kilo").environment(make_config(tmp_path, "kilo"))
    assert env["KILO_TELEMETRY_LEVEL"] == "off" and env["KILO_NO_DAEMON"] == "1"
    for switch in ("SESSION_INGEST", "PRESENCE", "CODEBASE_INDEXING"):
        assert env[f"KILO_DISABLE_{switch}"] == "1", switch
    assert int(env["KILO_SESSION_RETRY_LIMIT"]) <= 2


@pytest.mark.parametrize("engine", sorted(OPENCODE_FAMILY))
def test_opencode_without_base_url_talks_to_openai(tmp_path: Path, engine: str) -> None:
    app = OPENCODE_FAMILY[engine][0]
    adapter = get_adapter(engine)
    config = make_config(tmp_path, engine)
    adapter.prepare_turn(make_request(tmp_path), config)
    written = json.loads((config.home / "config" / app / f"{app}.json").read_text())
    assert written["provider"]["skillrunner"]["options"]["baseURL"] == "https://api.openai.com/v1"
    assert adapter.default_provider_url == "https://api.openai.com/v1"  # the one host `provider` mode lets through
    assert "SKILLRUNNER_PROVIDER_API_KEY" not in adapter.environment(config)


def test_detect_version_is_cached_per_binary(tmp_path: Path) -> None:
    calls = tmp_path / "calls"
    binary = write_script(tmp_path / "gemini", f'echo "$*" >> {calls}\necho "Some banner"\necho "0.61.0"\n')
    adapter, config = get_adapter("gemini"), make_config(tmp_path, binary)
    assert adapter.detect_version(config) == "0.61.0"
    assert adapter.detect_version(config) == "0.61.0"
    assert calls.read_text().splitlines() == ["--version"]


def test_detect_version_formats(tmp_path: Path) -> None:
    assert get_adapter("codex").detect_version(make_config(tmp_path, fake_codex(tmp_path))) == "0.169.0"
    claude = write_script(tmp_path / "claude", 'echo "2.1.332 (Claude Code)"\n')
    assert get_adapter("claude").detect_version(make_config(tmp_path, claude)) == "2.1.332"


def test_detect_version_of_a_missing_or_broken_binary(tmp_path: Path) -> None:
    assert get_adapter("iflow").detect_version(make_config(tmp_path, tmp_path / "iflow")) is None
    broken = write_script(tmp_path / "broken", "echo 1.2.3; exit 1\n")
    assert get_adapter("iflow").detect_version(make_config(tmp_path, broken)) is None


def test_binary_is_looked_up_on_path_by_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_script(tmp_path / "my-gemini", 'echo "9.9.9"\n')
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    assert get_adapter("gemini").detect_version(make_config(tmp_path, "my-gemini")) == "9.9.9"


def test_models_list_includes_the_default_model(tmp_path: Path) -> None:
    models = get_adapter("codex").models(make_config(tmp_path, "codex", default_model="my-model"))
    assert models[0] == {
        "id": "my-model",
        "display_name": "my-model",
        "is_default": True,
        # Upstream's fields (R-UP7): whose model, its bare name, the efforts a run may ask for.
        "provider_id": "openai",
        "model": "my-model",
        "deprecated": False,
        "supported_effort": ["minimal", "low", "medium", "high"],
    }
    assert all(not m["is_default"] for m in models[1:]) and len(models) > 1
    for engine in ENGINE_NAMES:
        assert get_adapter(engine).models(make_config(tmp_path, engine))
