#!/usr/bin/python3 -IS
"""The outside benchmark's engine: a Python stand-in for `codex exec --json`.

`python -m bench` copies this file as `codex` into a directory of its own and writes
`codex.conf.json` beside it; the service starts it inside its sandbox with an allow-listed
environment, so the settings come from that file, not from the environment:

    {"log": ".bench-events.jsonl", "delay_ms": 0}

It costs what a small Python CLI costs (an isolated interpreter, no site packages). The clock is
read right after `import time`, so a turn's `start` line says when the script began to run. It
appends one JSON line at its start and one at its exit to the log, a path relative to its working
directory (the run directory, the one place the sandbox lets it write):
`{"ev": "start", "kind": "exec"|"resume", "t_proc": <epoch>, "pid": …}` and
`{"ev": "exit", "kind": …, "t": <epoch>, "cpu": <its own CPU seconds>}`.

It answers the codex adapter's probes (`--version`, `exec --help`) and plays the bundled
skills: haiku-writer writes artifacts/haiku.md and answers the output JSON; trip-planner asks
with an `ask_user` envelope on its first turn and, resumed (`exec … resume <thread> …`), writes
artifacts/plan.md and answers with the done marker. `delay_ms` is slept before the answer
(model time).
"""

import time

T_PROC = time.time()

import json  # noqa: E402  (after the start stamp, on purpose)
import os  # noqa: E402
import sys  # noqa: E402

HELP = "Usage: codex exec [OPTIONS] [PROMPT]\n  --yolo  run without approvals\n  --json  JSONL events\n"
HAIKU = {"topic": "bench", "haiku": ["one", "two", "three"], "haiku_file": "artifacts/haiku.md"}
ASK = {
    "ask_user": {"interaction_id": 1, "kind": "open_text", "prompt": "Where do you want to go, and in which season?"}
}
PLAN = {
    "destination": "Lisbon",
    "days": [{"day": 1, "activities": ["walk"]}],
    "plan_file": "artifacts/plan.md",
    "__SKILL_DONE__": True,
}


def settings() -> dict:
    path = os.path.join(os.path.dirname(os.path.realpath(__file__)), "codex.conf.json")
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return {}


def log(path: str, record: dict) -> None:
    if not path:
        return
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (json.dumps(record, separators=(",", ":")) + "\n").encode())
    finally:
        os.close(fd)


def emit(*events: dict) -> None:
    sys.stdout.write("".join(json.dumps(event) + "\n" for event in events))
    sys.stdout.flush()


def turn(argv: list[str]) -> int:
    conf = settings()
    log_path = conf.get("log", "")
    thread = argv[argv.index("resume") + 1] if "resume" in argv[:-1] else ""
    kind = "resume" if thread else "exec"
    log(log_path, {"ev": "start", "kind": kind, "t_proc": T_PROC, "pid": os.getpid()})
    thread = thread or os.path.basename(os.getcwd())
    if os.path.isdir(".codex/skills/trip-planner"):
        if kind == "exec":
            answer: dict = ASK
        else:
            with open("artifacts/plan.md", "w") as handle:
                handle.write("# Lisbon\n")
            answer = PLAN
    else:
        with open("artifacts/haiku.md", "w") as handle:
            handle.write("one\ntwo\nthree\n")
        answer = HAIKU
    emit({"type": "thread.started", "thread_id": thread}, {"type": "turn.started"})
    delay = float(conf.get("delay_ms") or 0)
    if delay > 0:
        time.sleep(delay / 1000)
    emit(
        {"type": "item.completed", "item": {"id": "item_0", "type": "agent_message", "text": json.dumps(answer)}},
        {"type": "turn.completed", "usage": {"input_tokens": 1, "output_tokens": 1}},
    )
    log(log_path, {"ev": "exit", "kind": kind, "t": time.time(), "cpu": time.process_time(), "pid": os.getpid()})
    return 0


def main(argv: list[str]) -> int:
    if argv[:1] == ["--version"]:
        sys.stdout.write("codex-cli 0.0.0-bench\n")
        return 0
    if "--help" in argv or not argv:
        sys.stdout.write(HELP)
        return 0
    return turn(argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
