"""A scripted stand-in for `codex exec --json`, for fast orchestration tests and benchmarks.

It prints the same JSONL event shapes as Codex 0.169 (see tests/engines/golden/codex) and follows a
script instead of a model. Real-engine tests use the real CLI; this only speeds up the rest.

Script (JSON file): {"turns": [step, ...]}; the n-th turn of a thread plays step n (the last
step repeats). {"by_prompt": {substring: [step, ...]}} picks the steps of the first substring the
prompt contains instead (concurrent runs doing different things). A step may hold:
  message   the agent's final message text
  files     {relative path: content} written in the run directory before answering
  links     {relative path: target} symlinks made after the files, replacing what was there
  sleep     seconds to wait before answering (hard-timeout and cancel tests)
  exit      exit code (default 0)
  fail      emit turn.failed with this message (exit 1)
  stderr    text written to stderr
  no_thread omit thread.started (no session id)
  echo_env  write the environment to this file (isolation tests)
  reasoning a reasoning item's text, printed first
  tools     number of shell tool calls to print (item.started + item.completed each)
  flood_mb  megabytes of plain noise lines to print (output volume tests)
  wait_for  a file path: after the tool calls, a last tool call runs until it exists (at most 30 s)
  usage     the turn.completed usage object (default input 1, output 1)
  shell     a /bin/sh command run in the run directory with the engine's environment, after the
            files are written (what a tool call of the agent would do)
  shell_as  the command line reported for that call, as Codex reports one (`/bin/bash -lc "…"`,
            quoted for a shell); default: the command itself
"{cwd}" in a message, a file's content or a shell command stands for the run directory, so an
answer can name files by absolute path.
  commands  shell commands run in the run directory (sandbox red-team tests); each one's exit
            code and output go to commands.json there, in order
Each invocation is appended to invocations.jsonl in the engine home ($CODEX_HOME) when there is
one, else beside the script; thread state lives there too. Inside the agent sandbox the engine
can write nothing else, exactly like the real CLI.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

COMMAND_TIMEOUT = 60


def _emit(event: dict) -> None:
    sys.stdout.write(json.dumps(event) + "\n")
    sys.stdout.flush()


def _parse(argv: list[str]) -> tuple[str | None, str]:
    """(thread id to resume or None, prompt) from `exec [flags] [-m M] [resume ID] PROMPT`."""
    args = argv[1:]
    thread = None
    positional = []
    skip = False
    for arg in args:
        if skip:
            skip = False
            continue
        if arg in ("-m", "--model", "-c"):
            skip = True
        elif not arg.startswith("-") or arg.startswith(" -"):
            positional.append(arg)
    if positional[:1] == ["resume"]:
        thread, positional = positional[1], positional[2:]
    return thread, (positional[0] if positional else "")


def _activity(step: dict) -> None:
    """Live activity for the R-AC1/R-AC2 tests: reasoning, tool calls, noise, a wait point."""
    if step.get("reasoning"):
        _emit({"type": "item.completed", "item": {"id": "rs", "type": "reasoning", "text": step["reasoning"]}})
    for index in range(int(step.get("tools", 0))):
        item = {"id": f"cmd_{index}", "type": "command_execution", "command": f"echo step {index}"}
        _emit({"type": "item.started", "item": {**item, "aggregated_output": "", "status": "in_progress"}})
        done = {**item, "aggregated_output": f"step {index}\n", "exit_code": 0, "status": "completed"}
        _emit({"type": "item.completed", "item": done})
    line = ("noise " * 200)[:1023] + "\n"
    for _ in range(int(float(step.get("flood_mb", 0)) * 1024)):
        sys.stdout.write(line)
    sys.stdout.flush()
    if step.get("wait_for"):
        item = {"id": "cmd_wait", "type": "command_execution", "command": "wait for the release file"}
        _emit({"type": "item.started", "item": {**item, "aggregated_output": "", "status": "in_progress"}})
        deadline = time.monotonic() + 30
        while not os.path.exists(step["wait_for"]) and time.monotonic() < deadline:
            time.sleep(0.01)
        done = {**item, "aggregated_output": "released\n", "exit_code": 0, "status": "completed"}
        _emit({"type": "item.completed", "item": done})


VERSION = "codex-cli 0.0.0-fake"
HELP = "Usage: codex exec [OPTIONS] [PROMPT]\n  --yolo  run without approvals\n  --json  JSONL events"


def main(script_path: str, argv: list[str]) -> int:
    if argv[:1] == ["--version"]:
        print(VERSION)
        return 0
    if "--help" in argv:
        print(HELP)
        return 0
    script_file = Path(script_path)
    script = json.loads(script_file.read_text())
    thread, prompt = _parse(argv)
    state = Path(os.environ.get("CODEX_HOME") or script_file.parent)
    threads = state / "threads"
    threads.mkdir(parents=True, exist_ok=True)
    thread_id = thread or str(uuid.uuid4())
    turn_log = threads / thread_id
    turn_index = len(turn_log.read_text().splitlines()) if turn_log.exists() else 0
    with open(turn_log, "a") as log:
        log.write(json.dumps(prompt) + "\n")
    with open(state / "invocations.jsonl", "a") as log:
        log.write(
            json.dumps(
                {
                    "time": time.time(),
                    "argv": argv,
                    "cwd": os.getcwd(),
                    "pid": os.getpid(),
                    "thread": thread_id,
                    "turn": turn_index,
                    "prompt": prompt,
                }
            )
            + "\n"
        )
    turns = script.get("turns") or []
    for needle, steps in (script.get("by_prompt") or {}).items():
        if needle in prompt:
            turns = steps
            break
    step = turns[min(turn_index, len(turns) - 1)]

    if step.get("echo_env"):
        Path(step["echo_env"]).write_text(json.dumps(dict(os.environ)))
    if not step.get("no_thread"):
        _emit({"type": "thread.started", "thread_id": thread_id})
    _emit({"type": "turn.started"})
    if step.get("stderr"):
        sys.stderr.write(step["stderr"])
    cwd = os.getcwd()
    for relative, content in (step.get("files") or {}).items():
        target = Path(relative)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content.replace("{cwd}", cwd))
        _emit(
            {
                "type": "item.completed",
                "item": {
                    "id": "item_0",
                    "type": "command_execution",
                    "command": f"write {relative}",
                    "aggregated_output": "",
                    "exit_code": 0,
                    "status": "completed",
                },
            }
        )
    for relative, target in (step.get("links") or {}).items():
        link = Path(relative)
        if link.is_dir() and not link.is_symlink():
            shutil.rmtree(link)
        elif link.is_symlink() or link.exists():
            link.unlink()
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(target)
    if step.get("shell"):
        command = step["shell"].replace("{cwd}", cwd)
        done = subprocess.run(["/bin/sh", "-c", command], capture_output=True, text=True, timeout=60)
        _emit(
            {
                "type": "item.completed",
                "item": {
                    "id": "item_shell",
                    "type": "command_execution",
                    "command": step.get("shell_as") or command,
                    "aggregated_output": done.stdout + done.stderr,
                    "exit_code": done.returncode,
                    "status": "completed",
                },
            }
        )
    _activity(step)
    if step.get("commands"):
        _run_commands(step["commands"])
    if step.get("sleep"):
        time.sleep(float(step["sleep"]))
    if step.get("fail"):
        _emit({"type": "turn.failed", "error": {"message": step["fail"]}})
        return 1
    if "message" in step:
        text = step["message"].replace("{cwd}", cwd)
        _emit({"type": "item.completed", "item": {"id": "item_1", "type": "agent_message", "text": text}})
    _emit({"type": "turn.completed", "usage": step.get("usage") or {"input_tokens": 1, "output_tokens": 1}})
    return int(step.get("exit", 0))


def _run_commands(commands: list[str]) -> None:
    results = []
    for command in commands:
        try:
            done = subprocess.run(
                ["/bin/sh", "-c", command], capture_output=True, text=True, errors="replace", timeout=COMMAND_TIMEOUT
            )
            results.append({"command": command, "exit": done.returncode, "out": done.stdout + done.stderr})
        except (OSError, subprocess.TimeoutExpired) as exc:
            results.append({"command": command, "exit": None, "out": str(exc)})
    Path("commands.json").write_text(json.dumps(results))


class FakeCodex:
    """A `codex` executable in `root` that plays this module's script file (for tests).

    ``root`` holds the launcher, a copy of this module and the script: all the sandbox shows
    the engine of its install (read-only). ``data_dir`` is where the service keeps engine
    homes, where a sandboxed fake logs its invocations.
    """

    def __init__(self, root: Path, data_dir: Path | None = None):
        self.root = root
        self.data_dir = data_dir
        self.script_file = root / "script.json"
        self.binary = root / "codex"
        module = root / "fake_codex.py"
        # Modes set outright: the sandboxed engine runs as an unprivileged uid of its own, and a test
        # that imported skillrunner.asgi runs with the service's umask 077 from then on.
        root.chmod(0o755)
        shutil.copyfile(Path(__file__), module)
        module.chmod(0o644)
        # The system python when there is one: a sandboxed engine sees /usr, not the venv's home.
        # The service asks every new binary for its version and help (engines.base probe): the
        # shell answers those as main() would, without starting Python (40 ms a test).
        self.binary.write_text(
            "#!/bin/sh\n"
            f'[ "$1" = --version ] && {{ echo {shlex.quote(VERSION)}; exit 0; }}\n'
            f'for arg; do [ "$arg" = --help ] && {{ printf "%s\\n" {shlex.quote(HELP)}; exit 0; }}; done\n'
            f'PY=/usr/bin/python3\n[ -x "$PY" ] || PY="{sys.executable}"\n'
            f'exec "$PY" -I "{module}" "{self.script_file}" "$@"\n'
        )
        self.binary.chmod(0o755)

    def script(self, *turns: dict, by_prompt: dict[str, list[dict]] | None = None) -> None:
        self.script_file.write_text(json.dumps({"turns": list(turns), "by_prompt": by_prompt or {}}))
        self.script_file.chmod(0o644)

    def invocations(self) -> list[dict]:
        """Every invocation so far, oldest first, wherever the engine homes were."""
        logs = [self.root / "invocations.jsonl"]
        if self.data_dir is not None:
            logs += sorted((self.data_dir / "engine-homes" / "codex").glob("*/invocations.jsonl"))
        found = []
        for log in logs:
            try:
                found += [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
            except OSError:
                continue
        return sorted(found, key=lambda entry: entry.get("time", 0))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2:]))
