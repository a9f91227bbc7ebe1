"""The benchmark engine: a /bin/sh script that answers like `codex exec --json`, instantly.

It answers the adapter's probes (`--version`, `exec --help`), and for a turn prints the JSONL
events of Codex 0.169 (thread.started, turn.started, item.completed agent_message,
turn.completed). It appends `start <epoch>` and `exit <epoch>` lines to `.bench-times` in its
working directory, which is the run directory, so the benchmark reads each run's engine times
from `<data dir>/runs/<request_id>/.bench-times`. Two `date` forks per turn are all it costs.

Skills it plays: haiku-writer (auto: writes artifacts/haiku.md, answers the JSON; when the
prompt holds ``activity-bench`` it first prints ACTIVITY_LINES tool-start lines, each stamped
with the epoch time it was printed, for the stdout line -> websocket latency, R-AC3) and
trip-planner (interactive: the first turn asks and exits; a `resume <thread>` turn writes
artifacts/plan.md and answers with the done marker). The thread id is the run directory's name.
When a haiku-writer prompt holds ``crowd-bench`` (bench/crowd.py), the turn first makes a FIFO
CROWD_TRIGGER in the run directory and, for each line written to it, prints one tool-start line
naming that line (``crowd <line>``), until the line ``end``: run events made on demand.
"""

from __future__ import annotations

import os
import stat
import subprocess
import time
from pathlib import Path

TIMES_FILE = ".bench-times"
ACTIVITY_MARK = "activity-bench"
ACTIVITY_LINES = 20
ACTIVITY_GAP_SECONDS = 0.05
ACTIVITY_SETTLE_SECONDS = 0.5  # before the first line: the client's socket connects meanwhile
CROWD_MARK = "crowd-bench"
CROWD_TRIGGER = "crowd-trigger"

HAIKU_MESSAGE = '{\\"topic\\": \\"bench\\", \\"haiku\\": [\\"one\\", \\"two\\", \\"three\\"], \\"haiku_file\\": \\"artifacts/haiku.md\\"}'
ASK_MESSAGE = '{\\"ask_user\\": {\\"interaction_id\\": 1, \\"kind\\": \\"open_text\\", \\"prompt\\": \\"Where do you want to go, and in which season?\\"}}'
PLAN_MESSAGE = (
    '{\\"destination\\": \\"Lisbon\\", \\"days\\": [{\\"day\\": 1, \\"activities\\": [\\"walk\\"]}], '
    '\\"plan_file\\": \\"artifacts/plan.md\\", \\"__SKILL_DONE__\\": true}'
)

SCRIPT = f"""#!/bin/sh
# Skill Runner benchmark engine (bench/engine.py): `codex exec --json`, answered at once.
case "$1" in
  --version) echo "codex-cli 0.0.0-bench"; exit 0 ;;
esac
for arg in "$@"; do
  case "$arg" in
    --help) printf '%s\\n' "Usage: codex exec [OPTIONS] [PROMPT]" "  --yolo  run without approvals" "  --json  JSONL events"; exit 0 ;;
  esac
done
echo "start $(date +%s.%N)" >> {TIMES_FILE}
thread=""
previous=""
for arg in "$@"; do
  [ "$previous" = resume ] && thread="$arg"
  previous="$arg"
done
if [ -d .codex/skills/trip-planner ]; then
  if [ -z "$thread" ]; then
    printf '%s\\n' '{{"type":"thread.started","thread_id":"'"${{PWD##*/}}"'"}}' '{{"type":"turn.started"}}'
    printf '%s\\n' '{{"type":"item.completed","item":{{"id":"item_0","type":"agent_message","text":"{ASK_MESSAGE}"}}}}'
  else
    echo "# Lisbon" > artifacts/plan.md
    printf '%s\\n' '{{"type":"thread.started","thread_id":"'"$thread"'"}}' '{{"type":"turn.started"}}'
    printf '%s\\n' '{{"type":"item.completed","item":{{"id":"item_1","type":"agent_message","text":"{PLAN_MESSAGE}"}}}}'
  fi
else
  case "$*" in
    *{ACTIVITY_MARK}*)
      printf '%s\\n' '{{"type":"thread.started","thread_id":"'"${{PWD##*/}}"'"}}' '{{"type":"turn.started"}}'
      sleep {ACTIVITY_SETTLE_SECONDS}
      for i in $(seq 1 {ACTIVITY_LINES}); do
        printf '{{"type":"item.started","item":{{"id":"cmd_%s","type":"command_execution","command":"stamp %s","aggregated_output":"","status":"in_progress"}}}}\\n' "$i" "$(date +%s.%N)"
        sleep {ACTIVITY_GAP_SECONDS}
      done
      ;;
    *{CROWD_MARK}*)
      printf '%s\\n' '{{"type":"thread.started","thread_id":"'"${{PWD##*/}}"'"}}' '{{"type":"turn.started"}}'
      # Opened read-write: the FIFO never reports an end of file, and the bench's writes never block.
      mkfifo {CROWD_TRIGGER} && exec 3<> {CROWD_TRIGGER}
      while read -r line <&3 && [ "$line" != end ]; do
        printf '{{"type":"item.started","item":{{"id":"crowd_%s","type":"command_execution","command":"crowd %s","aggregated_output":"","status":"in_progress"}}}}\\n' "$line" "$line"
      done
      ;;
  esac
  printf '%s\\n' one two three > artifacts/haiku.md
  printf '%s\\n' '{{"type":"thread.started","thread_id":"'"${{PWD##*/}}"'"}}' '{{"type":"turn.started"}}'
  printf '%s\\n' '{{"type":"item.completed","item":{{"id":"item_0","type":"agent_message","text":"{HAIKU_MESSAGE}"}}}}'
fi
printf '%s\\n' '{{"type":"turn.completed","usage":{{"input_tokens":1,"output_tokens":1}}}}'
echo "exit $(date +%s.%N)" >> {TIMES_FILE}
exit 0
"""


class QuietControl:
    """A TurnControl that lets the turn run to its end and keeps nothing of its output."""

    def on_spawn(self, pid: int) -> None:
        pass

    def on_activity(self, item: dict) -> None:
        pass

    def on_output(self, stream: str, chunk: bytes) -> None:
        pass

    def should_abort(self) -> bool:
        return False


def write_engine(directory: Path) -> Path:
    """Write the script as `<directory>/codex` (executable) and return its path."""
    directory.mkdir(parents=True, exist_ok=True)
    binary = directory / "codex"
    binary.write_text(SCRIPT)
    binary.chmod(binary.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return binary


def read_times(run_dir: Path) -> dict[str, list[float]]:
    """{"start": [...], "exit": [...]} in turn order, from a run directory's stamp file."""
    times: dict[str, list[float]] = {"start": [], "exit": []}
    path = run_dir / TIMES_FILE
    if not path.exists():
        return times
    for line in path.read_text().splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] in times:
            times[parts[0]].append(float(parts[1]))
    return times


def measure_floor(binary: Path, workdir: Path, samples: int) -> dict[str, list[float]]:
    """The floor: the same script spawned straight from Python, the way engines/process.py does
    it (new session, stdin closed, stdout/stderr piped), timed from Popen to exit observed."""
    spawn_to_start: list[float] = []
    spawn_to_exit: list[float] = []
    exit_to_reaped: list[float] = []
    for index in range(samples):
        run_dir = workdir / f"floor-{index}"
        (run_dir / "artifacts").mkdir(parents=True, exist_ok=True)
        argv = [str(binary), "exec", "--skip-git-repo-check", "--json", "--yolo", "write a haiku"]
        began = time.time()
        proc = subprocess.Popen(
            argv,
            cwd=run_dir,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        proc.communicate(timeout=30)
        ended = time.time()
        stamps = read_times(run_dir)
        spawn_to_start.append(stamps["start"][0] - began)
        spawn_to_exit.append(ended - began)
        exit_to_reaped.append(ended - stamps["exit"][0])
    return {"spawn_to_start": spawn_to_start, "spawn_to_exit": spawn_to_exit, "exit_to_reaped": exit_to_reaped}


def measure_sandbox_cost(binary: Path, workdir: Path, samples: int) -> dict[str, list[float]]:
    """The agent sandbox's price per turn (SPEC §11): the bench engine run through
    engines.process exactly as a turn runs it, unconfined and in bubblewrap, interleaved so
    both see the same machine load. Wall time from before the sandbox is built to the result."""
    from engines.process import run_process
    from engines.provider_api import OPENAI_RESPONSES
    from engines.sandbox import Sandbox, sandbox_problem
    from engines.types import EngineConfig, SandboxSettings, SkillMaterial, TurnRequest

    problem = sandbox_problem(SandboxSettings())  # also warms the cached availability check
    if problem:
        raise RuntimeError(problem)
    timings: dict[str, list[float]] = {"unconfined": [], "bwrap": []}
    argv = [str(binary), "exec", "--skip-git-repo-check", "--json", "--yolo", "write a haiku"]
    env = {"PATH": os.environ.get("PATH", os.defpath), "LANG": "C.UTF-8"}
    for index in range(samples):
        for mode in ("unconfined", "bwrap"):
            run_dir = workdir / "data" / "runs" / f"{mode}-{index}"
            (run_dir / "artifacts").mkdir(parents=True, exist_ok=True)
            request = TurnRequest(run_dir, "", "auto", SkillMaterial("bench", run_dir), hard_timeout_seconds=30)
            config = EngineConfig(
                binary=str(binary),
                home=workdir / "data" / "engine-homes" / "codex" / f"{mode}-{index}",
                sandbox=SandboxSettings(mode="bwrap" if mode == "bwrap" else "off"),
            )
            Path(config.home).mkdir(parents=True, exist_ok=True)
            began = time.perf_counter()
            sandbox = Sandbox.open(request, config, "http://127.0.0.1:9", OPENAI_RESPONSES)  # its relay: unused
            try:
                result = run_process(
                    argv, cwd=run_dir, env=env, control=QuietControl(), hard_timeout=30, sandbox=sandbox
                )
            finally:
                if sandbox is not None:
                    sandbox.close()
            timings[mode].append(time.perf_counter() - began)
            if result.exit_code != 0:
                raise RuntimeError(f"bench engine failed ({mode}): {result.stderr[-500:]}")
    return timings
