"""A sandbox keeps its passwd, group and provider socket in a state directory of the system's
temporary folder. close() removes it; a worker killed mid-turn never calls close(), so the next
worker's start removes what no running process holds (engines.sandbox.remove_orphaned_state)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from engines import sandbox
from engines.provider_api import OPENAI_RESPONSES
from engines.types import EngineConfig, SkillMaterial, TurnRequest

UNUSED_PROVIDER = "http://127.0.0.1:9"  # the relay starts; nothing here calls it
OPEN_A_SANDBOX = """
import sys, time
from pathlib import Path
from engines.provider_api import OPENAI_RESPONSES
from engines.sandbox import Sandbox
from engines.types import EngineConfig, SkillMaterial, TurnRequest
root = Path(sys.argv[1])
request = TurnRequest(run_dir=root / "run", prompt="", mode="auto", skill=SkillMaterial("s", root), hard_timeout_seconds=1)
box = Sandbox.open(request, EngineConfig(binary="codex", home=root / "home"), "http://127.0.0.1:9", OPENAI_RESPONSES)
print(box._state, flush=True)
time.sleep(60)
"""


def _open_sandbox(tmp_path: Path) -> sandbox.Sandbox:
    request = TurnRequest(
        run_dir=tmp_path / "run", prompt="", mode="auto", skill=SkillMaterial("s", tmp_path), hard_timeout_seconds=1
    )
    box = sandbox.Sandbox.open(
        request, EngineConfig(binary="codex", home=tmp_path / "home"), UNUSED_PROVIDER, OPENAI_RESPONSES
    )
    assert box is not None
    return box


def test_the_state_of_a_killed_turn_goes_and_a_live_turns_stays(tmp_path):
    holder = subprocess.Popen(
        [sys.executable, "-c", OPEN_A_SANDBOX, str(tmp_path)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
        env={**os.environ, "TMPDIR": tempfile.gettempdir()},
    )
    try:
        killed_state = Path(holder.stdout.readline().strip())
        assert (killed_state / sandbox.STATE_LOCK).exists()
        live = _open_sandbox(tmp_path)
        sandbox.remove_orphaned_state()
        assert killed_state.exists() and live._state.exists()  # both held: neither removed
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=10)
        assert sandbox.remove_orphaned_state() >= 1
        assert not killed_state.exists()
        assert live._state.exists()
    finally:
        holder.kill()
        holder.wait(timeout=10)
        holder.stdout.close()
    live.close()
    assert not live._state.exists()
    live.close()  # a second close is harmless


def test_a_directory_without_its_lock_is_left_alone():
    """One being made right now has no lock file yet (it gets its name only once locked)."""
    making = Path(tempfile.mkdtemp(prefix=sandbox.STATE_PREFIX))
    try:
        sandbox.remove_orphaned_state()
        assert making.exists()
    finally:
        making.rmdir()
