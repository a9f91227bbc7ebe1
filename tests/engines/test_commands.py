"""Command lines per engine × mode × turn kind (SPEC §7, seed: Adapter CLI 命令构造 MUST 与执行模式一致)."""

from __future__ import annotations

from pathlib import Path

import pytest

import engines.base
from engines.claude import user_message
from engines.codex import BYPASS, FULL_AUTO, YOLO, choose_auto_flag
from engines.registry import ADAPTERS, ENGINE_NAMES, get_adapter
from tests.engines.fakes import fake_codex, make_config, make_request, write_script

REAL_CODEX = Path(__file__).resolve().parents[2] / "engines" / "cli" / "node_modules" / ".bin" / "codex"

# B = the configured binary, M = the model, S = the session handle, P = the prompt.
# None: claude has no resume command, the reply is the next stdin message of the resident process.
ARGV_TABLE: dict[tuple[str, str], list[str] | None] = {
    ("codex", "first"): ["B", "exec", "--skip-git-repo-check", "--json", "--yolo", "-m", "M", "P"],
    ("codex", "resume"): ["B", "exec", "--skip-git-repo-check", "--json", "--yolo", "-m", "M", "resume", "S", "P"],
    ("gemini", "first"): ["B", "--yolo", "--output-format", "stream-json", "-m", "M", "-p", "P"],
    ("gemini", "resume"): ["B", "--resume", "S", "--yolo", "--output-format", "stream-json", "-m", "M", "-p", "P"],
    ("iflow", "first"): ["B", "--yolo", "--thinking", "-m", "M", "-p", "P"],
    ("iflow", "resume"): ["B", "--resume", "S", "--yolo", "--thinking", "-p", "P"],
    ("claude", "first"): [
        "B",
        "-p",
        "--input-format",
        "stream-json",
        "--output-format",
        "stream-json",
        "--verbose",
        "--dangerously-skip-permissions",
        "--model",
        "M",
    ],
    ("claude", "resume"): None,
    ("qwen", "first"): ["B", "--yolo", "--output-format", "stream-json", "-m", "M", "-p", "P"],
    ("qwen", "resume"): ["B", "--resume", "S", "--yolo", "--output-format", "stream-json", "-m", "M", "-p", "P"],
    # The prompt goes on stdin (below); a first turn is titled after its skill.
    ("opencode", "first"): ["B", "run", "--format", "json", "--auto", "--thinking", "--title", "demo-skill"]
    + ["-m", "skillrunner/M"],
    ("opencode", "resume"): ["B", "run", "--format", "json", "--auto", "--thinking", "--session", "S"]
    + ["-m", "skillrunner/M"],
    ("kilo", "first"): ["B", "run", "--format", "json", "--auto", "--thinking", "--title", "demo-skill"]
    + ["-m", "skillrunner/M"],
    ("kilo", "resume"): ["B", "run", "--format", "json", "--auto", "--thinking", "--session", "S"]
    + ["-m", "skillrunner/M"],
}
PROMPT_ON_STDIN = {"opencode", "kilo"}


def _binary(engine: str, tmp_path: Path) -> Path:
    return fake_codex(tmp_path) if engine == "codex" else tmp_path / engine


@pytest.mark.parametrize("mode", ["auto", "interactive"])
@pytest.mark.parametrize("engine,turn", sorted(ARGV_TABLE))
def test_command_table_engine_mode_turn(tmp_path: Path, engine: str, turn: str, mode: str) -> None:
    adapter = get_adapter(engine)
    binary = _binary(engine, tmp_path)
    config = make_config(tmp_path, binary)
    request = make_request(tmp_path, mode, "P", model="M", session="S" if turn == "resume" else None)  # type: ignore[arg-type]
    expected = ARGV_TABLE[(engine, turn)]
    if expected is None:
        with pytest.raises(ValueError):
            adapter.command(request, config)
        assert user_message("P") == {
            "type": "user",
            "message": {"role": "user", "content": [{"type": "text", "text": "P"}]},
        }
        return
    assert adapter.command(request, config) == [str(binary), *expected[1:]]
    assert adapter.stdin_prompt(request) == ("P" if engine in PROMPT_ON_STDIN else None)


def test_every_registered_engine_is_in_the_table() -> None:
    assert {engine for engine, _ in ARGV_TABLE} == set(ENGINE_NAMES) == set(ADAPTERS)


def test_gemini_auto_mode_command_has_yolo(tmp_path: Path) -> None:
    argv = get_adapter("gemini").command(make_request(tmp_path, "auto"), make_config(tmp_path, "gemini"))
    assert "--yolo" in argv


def test_gemini_interactive_mode_command_has_yolo(tmp_path: Path) -> None:
    argv = get_adapter("gemini").command(make_request(tmp_path, "interactive"), make_config(tmp_path, "gemini"))
    assert "--yolo" in argv


def test_iflow_auto_mode_command_has_yolo_and_thinking(tmp_path: Path) -> None:
    argv = get_adapter("iflow").command(make_request(tmp_path, "auto"), make_config(tmp_path, "iflow"))
    assert "--yolo" in argv and "--thinking" in argv


def test_iflow_interactive_mode_command_has_yolo_and_thinking(tmp_path: Path) -> None:
    argv = get_adapter("iflow").command(make_request(tmp_path, "interactive"), make_config(tmp_path, "iflow"))
    assert "--yolo" in argv and "--thinking" in argv


def test_codex_auto_mode_command_has_auto_flag(tmp_path: Path) -> None:
    argv = get_adapter("codex").command(make_request(tmp_path, "auto"), make_config(tmp_path, fake_codex(tmp_path)))
    assert {"--full-auto", "--yolo"} & set(argv)


def test_codex_interactive_mode_command_has_auto_flag(tmp_path: Path) -> None:
    argv = get_adapter("codex").command(
        make_request(tmp_path, "interactive"), make_config(tmp_path, fake_codex(tmp_path))
    )
    assert {"--full-auto", "--yolo"} & set(argv)


def test_interactive_resume_turn_commands_keep_auto_flags(tmp_path: Path) -> None:
    request = make_request(tmp_path, "interactive", session="sess-1")
    gemini = get_adapter("gemini").command(request, make_config(tmp_path, "gemini"))
    iflow = get_adapter("iflow").command(request, make_config(tmp_path, "iflow"))
    codex = get_adapter("codex").command(request, make_config(tmp_path, fake_codex(tmp_path)))
    assert "--yolo" in gemini
    assert "--yolo" in iflow and "--thinking" in iflow
    assert {"--full-auto", "--yolo"} & set(codex)
    assert ["resume", "sess-1"] == codex[-3:-1]


@pytest.mark.parametrize(
    "engine,flags",
    [
        ("gemini", ["--yolo"]),
        ("iflow", ["--yolo", "--thinking"]),
        ("claude", ["--dangerously-skip-permissions"]),
        ("qwen", ["--yolo"]),
        ("opencode", ["--auto"]),
        ("kilo", ["--auto"]),
    ],
)
def test_auto_flags_function_per_engine(tmp_path: Path, engine: str, flags: list[str]) -> None:
    assert get_adapter(engine).auto_flags(make_config(tmp_path, engine)) == flags


def test_codex_auto_flags_on_0169_like_cli_is_yolo(tmp_path: Path) -> None:
    assert get_adapter("codex").auto_flags(make_config(tmp_path, fake_codex(tmp_path))) == [YOLO]


def test_codex_auto_flag_probe_prefers_full_auto_when_listed(tmp_path: Path) -> None:
    binary = write_script(tmp_path / "codex", 'echo "  --full-auto   Low-friction sandboxed automatic execution"\n')
    assert choose_auto_flag(str(binary), {"PATH": "/usr/bin:/bin"}, tmp_path) == FULL_AUTO


def test_codex_auto_flag_probe_uses_listed_yolo(tmp_path: Path) -> None:
    binary = write_script(tmp_path / "codex", 'echo "  --yolo   Skip all prompts"\n')
    assert choose_auto_flag(str(binary), {"PATH": "/usr/bin:/bin"}, tmp_path) == YOLO


def test_codex_auto_flag_probe_falls_back_to_bypass_when_yolo_is_rejected(tmp_path: Path) -> None:
    binary = write_script(
        tmp_path / "codex",
        'case "$*" in "exec --help") echo "  --dangerously-bypass-approvals-and-sandbox";; *) exit 2;; esac\n',
    )
    assert choose_auto_flag(str(binary), {"PATH": "/usr/bin:/bin"}, tmp_path) == BYPASS


def test_codex_auto_flag_probe_runs_once_per_binary(tmp_path: Path) -> None:
    calls = tmp_path / "calls"
    binary = write_script(tmp_path / "codex", f'echo "$*" >> {calls}\n' + 'echo "  --yolo"\n')
    adapter, config = get_adapter("codex"), make_config(tmp_path, binary)
    assert adapter.auto_flags(config) == adapter.auto_flags(config) == [YOLO]
    assert calls.read_text().splitlines() == ["exec --help"]


def test_probe_answers_are_shared_by_the_processes_of_an_installation(tmp_path: Path, monkeypatch) -> None:
    """A worker process forked later finds the answer instead of spawning the CLI before its first
    turn; a changed binary is asked again, and a file that is not the answer for it is ignored."""
    calls = tmp_path / "calls"
    binary = write_script(tmp_path / "codex", f'echo "$*" >> {calls}\n' + 'echo "  --yolo"\n')
    adapter = get_adapter("codex")
    config = make_config(tmp_path, binary, probe_dir=tmp_path / "probes")
    assert adapter.auto_flags(config) == [YOLO]
    monkeypatch.setattr(engines.base, "_probe_cache", {})  # a process started afterwards
    assert adapter.auto_flags(config) == [YOLO]
    assert calls.read_text().splitlines() == ["exec --help"]

    (stored,) = (tmp_path / "probes").iterdir()
    stored.write_text('{"key": ["codex-auto-flag", "/elsewhere", 1, 1], "answer": "--planted"}')
    monkeypatch.setattr(engines.base, "_probe_cache", {})
    assert adapter.auto_flags(config) == [YOLO]
    assert calls.read_text().splitlines() == ["exec --help", "exec --help"]

    write_script(binary, f'echo "$*" >> {calls}\n' + 'echo "  --full-auto  low friction"\n')
    monkeypatch.setattr(engines.base, "_probe_cache", {})
    assert adapter.auto_flags(config) == [FULL_AUTO]


@pytest.mark.skipif(not REAL_CODEX.exists(), reason="codex CLI not installed (make engines)")
def test_codex_auto_flag_probe_on_installed_cli_picks_an_accepted_flag(tmp_path: Path) -> None:
    adapter = get_adapter("codex")
    config = make_config(tmp_path, REAL_CODEX)
    flag = choose_auto_flag(str(REAL_CODEX), adapter.environment(config), tmp_path)
    assert flag in (FULL_AUTO, YOLO)
    if adapter.detect_version(config) == "0.169.0":
        assert flag == YOLO  # 0.169 has no --full-auto; --yolo is its hidden alias of the bypass flag


def test_opencode_model_falls_back_to_the_first_listed_one(tmp_path: Path) -> None:
    """`-m` is always there: the provider entry the adapter writes declares that one model."""
    adapter = get_adapter("opencode")
    argv = adapter.command(make_request(tmp_path), make_config(tmp_path, "opencode"))
    assert argv[argv.index("-m") + 1] == f"skillrunner/{adapter.known_models[0]}"


def test_model_flag_only_when_a_model_is_known(tmp_path: Path) -> None:
    gemini = get_adapter("gemini")
    assert "-m" not in gemini.command(make_request(tmp_path), make_config(tmp_path, "gemini"))
    with_default = gemini.command(make_request(tmp_path), make_config(tmp_path, "gemini", default_model="g-default"))
    assert with_default[with_default.index("-m") + 1] == "g-default"
    request_wins = gemini.command(
        make_request(tmp_path, model="g-req"), make_config(tmp_path, "gemini", default_model="g-default")
    )
    assert request_wins[request_wins.index("-m") + 1] == "g-req"


def test_prompt_starting_with_a_dash_is_not_taken_for_a_flag(tmp_path: Path) -> None:
    argv = get_adapter("gemini").command(make_request(tmp_path, prompt="-5 degrees"), make_config(tmp_path, "gemini"))
    assert argv[-1] == " -5 degrees"


@pytest.mark.parametrize("prompt", ["/clear", "-5 degrees"])
def test_qwen_prompt_is_neither_a_flag_nor_a_slash_command(tmp_path: Path, prompt: str) -> None:
    """Qwen Code runs a `-p` value starting with "/" as its slash command (a reply "/clear" would
    empty the session): the leading space makes it text, as the CLI trims it."""
    argv = get_adapter("qwen").command(make_request(tmp_path, prompt=prompt), make_config(tmp_path, "qwen"))
    assert argv[-2:] == ["-p", " " + prompt]
    plain = get_adapter("qwen").command(make_request(tmp_path, prompt="a /path"), make_config(tmp_path, "qwen"))
    assert plain[-1] == "a /path"


def test_profiles_and_skill_roots() -> None:
    assert {name: a.interactive_profile for name, a in ADAPTERS.items()} == {
        "codex": "resumable",
        "gemini": "resumable",
        "iflow": "resumable",
        "claude": "sticky_process",
        "qwen": "resumable",
        "opencode": "resumable",
        "kilo": "resumable",
    }
    assert {name: a.skill_root for name, a in ADAPTERS.items()} == {
        "codex": ".codex",
        "gemini": ".gemini",
        "iflow": ".iflow",
        "claude": ".claude",
        "qwen": ".qwen",
        "opencode": ".opencode",
        "kilo": ".kilo",
    }


def test_get_adapter_unknown_engine_names_the_known_ones() -> None:
    with pytest.raises(KeyError, match="codex"):
        get_adapter("no-such-engine")
