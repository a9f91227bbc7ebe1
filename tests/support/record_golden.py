"""Record golden stdout/stderr of the real CLIs run against the scripted model server.

    .venv/bin/python -m tests.support.record_golden            # all engines
    .venv/bin/python -m tests.support.record_golden codex      # one engine

Writes ``tests/golden/<engine>/<scenario>.stdout`` and ``.stderr`` (plus ``.stdin`` for the
resident Claude session) and
``tests/golden/manifest.json`` describing every recording: argv, script, prompts, exit code.
The temporary directory the run used is replaced by ``<TMP>`` in all outputs so re-recording only
changes ids, timestamps and durations. Each scenario checks its own outcome first, so a broken
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
    run_cli,
)
from tests.support.scripted_model_server import ScriptedModelServer

GOLDEN_DIR = REPO_ROOT / "tests" / "golden"
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
        return text.replace(str(self.tmp), "<TMP>")

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


# --- codex ------------------------------------------------------------------------------------


def thread_id(result: CliRun) -> str:
    return next(e["thread_id"] for e in result.json_lines() if e.get("type") == "thread.started")


def record_codex(ctx: Ctx) -> None:
    fresh(ctx, TEXT_SCRIPT)
    r = run(ctx, codex_argv("hello there"))
    check(r.returncode == 0, "codex plain", r)
    ctx.save("plain", r, TEXT_SCRIPT, ["hello there"])

    script = tool_script("codex")
    fresh(ctx, script)
    r = run(ctx, codex_argv("please write the file"))
    check(r.returncode == 0 and (ctx.cwd / "out.txt").exists(), "codex tool call", r)
    ctx.save("tool_call", r, script, ["please write the file"])

    fresh(ctx, RESUME_SCRIPT)
    r1 = run(ctx, codex_argv("first message"))
    check(r1.returncode == 0, "codex resume turn 1", r1)
    tid = thread_id(r1)
    r2 = run(ctx, codex_argv("second message", resume=tid))
    check(r2.returncode == 0 and "turns=2" in r2.stdout, "codex resume turn 2", r2)
    ctx.save("resume_turn1", r1, RESUME_SCRIPT, ["first message"])
    ctx.save("resume_turn2", r2, RESUME_SCRIPT, ["second message"], note=f"resume of {tid}")

    fresh(ctx, ERROR_SCRIPT)
    r = run(ctx, codex_argv("this will fail"))
    check(r.returncode != 0 and '"turn.failed"' in r.stdout, "codex turn.failed", r)
    ctx.save(
        "turn_failed_500",
        r,
        ERROR_SCRIPT,
        ["this will fail"],
        note="model answered HTTP 500; request_max_retries=0, stream_max_retries=0",
    )


# --- gemini -----------------------------------------------------------------------------------


def session_id(result: CliRun) -> str:
    return next(e["session_id"] for e in result.json_lines() if e.get("type") == "init")


def record_gemini(ctx: Ctx) -> None:
    """Gemini with ``--output-format stream-json``, as the adapter runs it (SPEC §7)."""
    fresh(ctx, TEXT_SCRIPT)
    r = run(ctx, gemini_argv("hello there", output_format="stream-json"))
    check(r.returncode == 0, "gemini plain", r)
    ctx.save("plain", r, TEXT_SCRIPT, ["hello there"])

    script = tool_script("gemini")
    fresh(ctx, script)
    r = run(ctx, gemini_argv("please write the file", output_format="stream-json"))
    check(r.returncode == 0 and (ctx.cwd / "out.txt").exists(), "gemini tool call", r)
    ctx.save("tool_call", r, script, ["please write the file"])

    fresh(ctx, RESUME_SCRIPT)
    r1 = run(ctx, gemini_argv("first message", output_format="stream-json"))
    check(r1.returncode == 0, "gemini resume turn 1", r1)
    sid = session_id(r1)
    r2 = run(
        ctx, gemini_argv("second message", resume=sid, output_format="stream-json")
    )  # same cwd: resume is cwd-scoped
    check(r2.returncode == 0 and "turns=2" in r2.stdout, "gemini resume turn 2", r2)
    ctx.save("resume_turn1", r1, RESUME_SCRIPT, ["first message"])
    ctx.save("resume_turn2", r2, RESUME_SCRIPT, ["second message"], note=f"--resume {sid} from the same cwd")

    fresh(ctx, ERROR_SCRIPT)
    r = run(ctx, gemini_argv("this will fail", output_format="stream-json"))
    check(r.returncode != 0 and '"status":"error"' in r.stdout, "gemini error", r)
    ctx.save(
        "error_500",
        r,
        ERROR_SCRIPT,
        ["this will fail"],
        note="HTTP 500, general.maxAttempts=1: the error result event is on stdout, non-zero exit",
    )


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
