"""Record golden stdout/stderr of the real CLIs run against the scripted model server.

    .venv/bin/python -m tests.support.record_golden            # all engines
    .venv/bin/python -m tests.support.record_golden codex      # one engine

Writes ``tests/engines/golden/<engine>/<scenario>.stdout`` and ``.stderr`` (plus ``.stdin`` for the
resident Claude session) and
``tests/engines/golden/manifest.json`` describing every recording: argv, script, prompts, exit code.
The temporary directory the run used is replaced by ``<TMP>`` and the checkout by ``<REPO>`` in
all outputs, so re-recording only changes ids, timestamps and durations. Each scenario checks its own outcome first, so a broken
run is never written as golden. API keys are dummies (``test-key``).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tests.support.engine_env import (
    BIN_DIR,
    ENGINES,
    REPO_ROOT,
    CliRun,
    ResidentCli,
    claude_argv,
    codex_argv,
    engine_binary,
    engine_env,
    gemini_argv,
    opencode_argv,
    qwen_argv,
    run_cli,
)
from tests.support.scripted_model_server import ScriptedModelServer

GOLDEN_DIR = REPO_ROOT / "tests" / "engines" / "golden"
TIMEOUT = 60.0

TEXT_SCRIPT = [{"text": "PLAIN_REPLY to: {user_text}"}]
RESUME_SCRIPT = [{"text": "REPLY turns={user_turns} last={user_text}"}]
ERROR_SCRIPT = [{"http_error": 500}]


def tool_script(engine: str) -> list[dict[str, str]]:
    """A reasoning summary and a shell tool call, then the answer (R-AC1 activity sources)."""
    return [
        {"reasoning": "I will write the file first.", "shell": f"echo hi-from-{engine} > out.txt && cat out.txt"},
        {"text": "TOOL_RESULT_SEEN: {tool_output}"},
    ]


@dataclass
class Ctx:
    engine: str
    server: ScriptedModelServer
    tmp: Path
    cwd: Path
    env: dict[str, str]
    manifest: list[dict[str, Any]]

    def clean(self, text: str) -> str:
        return text.replace(str(self.tmp), "<TMP>").replace(str(REPO_ROOT), "<REPO>")

    def save(
        self,
        scenario: str,
        run: CliRun,
        script: Any,
        prompts: list[str],
        stdin: str | None = None,
        note: str = "",
    ) -> None:
        out_dir = GOLDEN_DIR / self.engine
        out_dir.mkdir(parents=True, exist_ok=True)
        files = {f"{scenario}.stdout": self.clean(run.stdout), f"{scenario}.stderr": self.clean(run.stderr)}
        if stdin is not None:
            files[f"{scenario}.stdin"] = stdin
        for name, content in files.items():
            (out_dir / name).write_text(content, encoding="utf-8")
        self.manifest.append(
            {
                "engine": self.engine,
                "scenario": scenario,
                "files": sorted(f"{self.engine}/{n}" for n in files),
                "argv": [self.clean(a.replace(str(BIN_DIR) + "/", "")) for a in run.argv],
                "prompts": prompts,
                "script": script,
                "returncode": run.returncode,
                "note": note,
            }
        )
        print(f"  {self.engine}/{scenario}: rc={run.returncode} {run.duration:.2f}s", flush=True)


def check(condition: bool, what: str, run: CliRun | None = None) -> None:
    if not condition:
        detail = "" if run is None else f"\nrc={run.returncode}\n{run.stdout[-2000:]}\n{run.stderr[-2000:]}"
        raise SystemExit(f"golden scenario failed: {what}{detail}")


def fresh(ctx: Ctx, script: Any) -> None:
    """New script, cleared request log, empty cwd (one home per engine is fine: ids differ)."""
    ctx.server.set_script(script)
    ctx.server.clear_requests()
    shutil.rmtree(ctx.cwd, ignore_errors=True)
    ctx.cwd.mkdir(parents=True)


def run(ctx: Ctx, argv: list[str], stdin: str | None = None) -> CliRun:
    result = run_cli(argv, ctx.env, ctx.cwd, timeout=TIMEOUT, stdin=stdin)
    check(not result.timed_out, f"{argv[0]} timed out", result)
    return result


# --- the resumable CLIs: codex, gemini, qwen ---------------------------------------------------

Argv = Callable[[str, str | None], list[str]]


@dataclass
class ErrorScenario:
    """How a CLI's failed turn is recorded: the model's HTTP error and what stdout must show."""

    name: str
    script: list[dict[str, Any]]
    shows: str
    note: str


def record_resumable(ctx: Ctx, argv: Argv, session_of: Callable[[CliRun], str], error: ErrorScenario) -> None:
    """A plain turn, a tool call, a first turn and its resume (from the same cwd: Gemini's and
    Qwen Code's resume is cwd-scoped), and a failed turn."""
    engine = ctx.engine
    fresh(ctx, TEXT_SCRIPT)
    r = run(ctx, argv("hello there", None))
    check(r.returncode == 0, f"{engine} plain", r)
    ctx.save("plain", r, TEXT_SCRIPT, ["hello there"])

    script = tool_script(engine)
    fresh(ctx, script)
    r = run(ctx, argv("please write the file", None))
    check(r.returncode == 0 and (ctx.cwd / "out.txt").exists(), f"{engine} tool call", r)
    ctx.save("tool_call", r, script, ["please write the file"])

    fresh(ctx, RESUME_SCRIPT)
    r1 = run(ctx, argv("first message", None))
    check(r1.returncode == 0, f"{engine} resume turn 1", r1)
    session = session_of(r1)
    r2 = run(ctx, argv("second message", session))
    check(r2.returncode == 0 and "turns=2" in r2.stdout, f"{engine} resume turn 2", r2)
    ctx.save("resume_turn1", r1, RESUME_SCRIPT, ["first message"])
    ctx.save("resume_turn2", r2, RESUME_SCRIPT, ["second message"], note=f"resume of {session} from the same cwd")

    fresh(ctx, error.script)
    r = run(ctx, argv("this will fail", None))
    check(r.returncode != 0 and error.shows in r.stdout, f"{engine} {error.name}", r)
    ctx.save(error.name, r, error.script, ["this will fail"], note=error.note)


def record_codex(ctx: Ctx) -> None:
    def thread_id(result: CliRun) -> str:
        return next(e["thread_id"] for e in result.json_lines() if e.get("type") == "thread.started")

    note = "model answered HTTP 500; request_max_retries=0, stream_max_retries=0"
    error = ErrorScenario("turn_failed_500", ERROR_SCRIPT, '"turn.failed"', note)
    record_resumable(ctx, lambda prompt, session: codex_argv(prompt, resume=session), thread_id, error)


def record_gemini(ctx: Ctx) -> None:
    """Gemini with ``--output-format stream-json``, as the adapter runs it (SPEC §7)."""

    def session_id(result: CliRun) -> str:
        return next(e["session_id"] for e in result.json_lines() if e.get("type") == "init")

    note = "HTTP 500, general.maxAttempts=1: the error result event is on stdout, non-zero exit"
    error = ErrorScenario("error_500", ERROR_SCRIPT, '"status":"error"', note)
    argv: Argv = lambda prompt, session: gemini_argv(prompt, resume=session, output_format="stream-json")  # noqa: E731
    record_resumable(ctx, argv, session_id, error)


def record_qwen(ctx: Ctx) -> None:
    """Qwen Code with ``--output-format stream-json``, as the adapter runs it."""

    def session_id(result: CliRun) -> str:  # Claude Code's stream-json, which Qwen Code prints too
        return next(e["session_id"] for e in result.json_lines() if e.get("subtype") == "init")

    script = [{"http_error": 400, "message": "scripted bad request"}]
    note = "HTTP 400, not retried (a 5xx is retried 7 times with backoff): result is_error=true, exit 1"
    error = ErrorScenario("error_400", script, '"is_error":true', note)
    record_resumable(ctx, lambda prompt, session: qwen_argv(prompt, resume=session), session_id, error)


# --- claude -----------------------------------------------------------------------------------


def record_claude(ctx: Ctx) -> None:
    script = tool_script("claude")
    fresh(ctx, script)
    r = run(ctx, claude_argv("please write the file"))
    check(r.returncode == 0 and (ctx.cwd / "out.txt").exists(), "claude tool call", r)
    ctx.save("tool_call", r, script, ["please write the file"])

    fresh(ctx, RESUME_SCRIPT)
    prompts = ["first message", "second message"]
    is_result: Callable[[dict], bool] = lambda ev: ev.get("type") == "result"  # noqa: E731
    stdin_lines = []
    cli = ResidentCli(claude_argv(), ctx.env, ctx.cwd).start()
    try:
        for prompt in prompts:
            line = {"type": "user", "message": {"role": "user", "content": [{"type": "text", "text": prompt}]}}
            stdin_lines.append(json.dumps(line))
            cli.send(line)
            cli.read_until(is_result, timeout=TIMEOUT)
        rc = cli.close(timeout=30)
    finally:
        cli.close(timeout=5)
    check(rc == 0 and "turns=2" in cli.stdout, "claude resident session")
    resident = CliRun(cli.argv, rc, cli.stdout, cli.stderr, 0.0, False)
    ctx.save(
        "resident_two_turns",
        resident,
        RESUME_SCRIPT,
        prompts,
        stdin="\n".join(stdin_lines) + "\n",
        note="one resident process; each .stdin line written after the previous result event; "
        "stdin closed at the end -> exit 0",
    )

    fresh(ctx, ERROR_SCRIPT)
    r = run(ctx, claude_argv("this will fail"))
    check(r.returncode != 0, "claude error", r)
    ctx.save(
        "error_500",
        r,
        ERROR_SCRIPT,
        ["this will fail"],
        note="HTTP 500 with CLAUDE_CODE_MAX_RETRIES=0: synthetic assistant message + result is_error=true, exit 1",
    )


# --- opencode ---------------------------------------------------------------------------------


def opencode_session(result: CliRun) -> str:
    return next(e["sessionID"] for e in result.json_lines() if e.get("type") == "step_start")


# The recorded failure of each: OpenCode retries a 5xx 5 times with backoff whatever it is told,
# Kilo as often as KILO_SESSION_RETRY_LIMIT says (1 in the test environment).
OPENCODE_FAILURES = {
    "opencode": (
        "error_400",
        400,
        "HTTP 400 (not retried; a 500 is retried 5 times with backoff): an error event, exit 1",
    ),
    "kilo": ("error_500", 500, "HTTP 500 with KILO_SESSION_RETRY_LIMIT=1: one retry, an error event, exit 1"),
}


def record_opencode(ctx: Ctx) -> None:
    """``opencode run --format json`` (or ``kilo run``), the prompt on stdin, the activity plugin
    in its config."""
    engine = ctx.engine
    fresh(ctx, TEXT_SCRIPT)
    r = run(ctx, opencode_argv(engine=engine), stdin="hello there")
    check(r.returncode == 0 and "to: hello there" in r.stdout, f"{engine} plain", r)
    ctx.save("plain", r, TEXT_SCRIPT, ["hello there"], note="prompt on stdin")

    script = tool_script(engine)
    fresh(ctx, script)
    r = run(ctx, opencode_argv(engine=engine), stdin="please write the file")
    check(r.returncode == 0 and (ctx.cwd / "out.txt").exists(), f"{engine} tool call", r)
    ctx.save("tool_call", r, script, ["please write the file"], note="skillrunner_tool_start: the activity plugin")

    fresh(ctx, RESUME_SCRIPT)
    r1 = run(ctx, opencode_argv(engine=engine), stdin="first message")
    check(r1.returncode == 0, f"{engine} resume turn 1", r1)
    sid = opencode_session(r1)
    r2 = run(ctx, opencode_argv(resume=sid, engine=engine), stdin="second message")
    check(r2.returncode == 0 and "turns=2" in r2.stdout, f"{engine} resume turn 2", r2)
    ctx.save("resume_turn1", r1, RESUME_SCRIPT, ["first message"])
    ctx.save("resume_turn2", r2, RESUME_SCRIPT, ["second message"], note=f"--session {sid} from the same cwd")

    scenario, status, note = OPENCODE_FAILURES[engine]
    script = [{"http_error": status}]
    fresh(ctx, script)
    r = run(ctx, opencode_argv(engine=engine), stdin="this will fail")
    check(r.returncode != 0 and '"type":"error"' in r.stdout, f"{engine} error", r)
    ctx.save(scenario, r, script, ["this will fail"], note=note)


RECORDERS = {
    "codex": record_codex,
    "gemini": record_gemini,
    "claude": record_claude,
    "qwen": record_qwen,
    "opencode": record_opencode,
    "kilo": record_opencode,
}


def cli_version(engine: str, env: dict[str, str], cwd: Path) -> str:
    out = subprocess.run(
        [str(engine_binary(engine)), "--version"],
        env=env,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return out.stdout.strip().splitlines()[-1] if out.stdout.strip() else "?"


def main(argv: list[str]) -> int:
    engines = argv or list(ENGINES)
    manifest_path = GOLDEN_DIR / "manifest.json"
    old = json.loads(manifest_path.read_text()) if manifest_path.exists() else {"recordings": []}
    kept = [m for m in old.get("recordings", []) if m["engine"] not in engines]
    versions = dict(old.get("versions", {}))
    recordings: list[dict[str, Any]] = []
    for engine in engines:
        if not engine_binary(engine).exists():
            raise SystemExit(f"{engine} is not installed; run `make engines`")
        shutil.rmtree(GOLDEN_DIR / engine, ignore_errors=True)
        with ScriptedModelServer() as srv, tempfile.TemporaryDirectory(prefix="golden-") as tmp:
            tmp_path = Path(tmp)
            env = engine_env(engine, srv.url, tmp_path / "home")
            ctx = Ctx(engine, srv, tmp_path, tmp_path / "work", env, recordings)
            ctx.cwd.mkdir()
            versions[engine] = cli_version(engine, env, ctx.cwd)
            print(f"{engine} {versions[engine]}", flush=True)
            RECORDERS[engine](ctx)
    order = {e: i for i, e in enumerate(ENGINES)}
    all_recordings = sorted(kept + recordings, key=lambda m: order.get(m["engine"], 99))
    manifest = {
        "recorded_at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "how": "python -m tests.support.record_golden; see that module's docstring",
        "versions": versions,
        "recordings": all_recordings,
    }
    manifest_path.write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
