"""A sandbox whose agent reaches only the provider keeps the relay's socket in a state directory
of the system's temporary folder. close() removes it; a worker killed mid-turn never calls close(),
so the next worker's start removes what no running process holds
(engines.sandbox.remove_orphaned_state). With the network open, a sandbox writes no file at all:
passwd, group and the seccomp program reach bwrap as descriptors of files in memory."""

from __future__ import annotations

import os
import signal
import socket
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from engines import sandbox
from engines.provider_api import OPENAI_RESPONSES
from engines.types import EngineConfig, SandboxSettings, SkillMaterial, TurnRequest

UNUSED_PROVIDER = "http://127.0.0.1:9"  # the relay starts; nothing here calls it
OPEN_A_SANDBOX = """
import sys, time
from pathlib import Path
from engines.provider_api import OPENAI_RESPONSES
from engines.sandbox import Sandbox
from engines.types import EngineConfig, SandboxSettings, SkillMaterial, TurnRequest
root = Path(sys.argv[1])
request = TurnRequest(run_dir=root / "run", prompt="", mode="auto", skill=SkillMaterial("s", root), hard_timeout_seconds=1)
config = EngineConfig(binary="codex", home=root / "home", sandbox=SandboxSettings(network="provider"))
box = Sandbox.open(request, config, "http://127.0.0.1:9", OPENAI_RESPONSES)
print(box._state, flush=True)
time.sleep(60)
"""


def _open_sandbox(tmp_path: Path, network: str = "provider") -> sandbox.Sandbox:
    request = TurnRequest(
        run_dir=tmp_path / "run", prompt="", mode="auto", skill=SkillMaterial("s", tmp_path), hard_timeout_seconds=1
    )
    config = EngineConfig(binary="codex", home=tmp_path / "home", sandbox=SandboxSettings(network=network))
    box = sandbox.Sandbox.open(request, config, UNUSED_PROVIDER, OPENAI_RESPONSES)
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


def test_an_open_network_sandbox_writes_no_state_and_passes_its_files_as_descriptors(tmp_path):
    (tmp_path / "run").mkdir()
    states_before = set(Path(tempfile.gettempdir()).glob(f"{sandbox.STATE_PREFIX}*"))
    box = _open_sandbox(tmp_path, network="open")
    try:
        argv, _ = box.command("/bin/true", [], {"PATH": os.defpath})
        assert set(Path(tempfile.gettempdir()).glob(f"{sandbox.STATE_PREFIX}*")) == states_before
        passed = {argv[index + 1]: argv[index + 2] for index, arg in enumerate(argv) if arg == "--ro-bind-data"}
        assert set(passed.values()) == {"/etc/passwd", "/etc/group"}
        fds = box.inherited_fds
        assert {int(fd) for fd in passed} | {int(argv[argv.index("--seccomp") + 1])} == set(fds)
        passwd = os.pread(int(next(fd for fd, path in passed.items() if path == "/etc/passwd")), 4096, 0)
        assert f"agent:x:{box.uid}:{box.uid}:agent:{tmp_path / 'home' / 'home'}:/bin/sh".encode() in passwd
        box.attach(os.getpid())  # bwrap started: the service's copies are closed
        for fd in fds:
            with pytest.raises(OSError):
                os.fstat(fd)
    finally:
        box.close()


def test_the_relay_socket_binds_under_a_temporary_folder_longer_than_a_socket_path(tmp_path, monkeypatch):
    """A socket's path has at most 107 bytes; a long $TMPDIR (pytest's own, a container's) must not
    fail every turn in provider mode."""
    long_tmp = tmp_path / ("t" * 100)
    long_tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(long_tmp))
    box = _open_sandbox(tmp_path)
    try:
        relay_socket = box._state / "provider.sock"
        assert len(str(relay_socket)) > 107
        assert stat.S_ISSOCK(relay_socket.stat().st_mode)
        folder = os.open(box._state, os.O_PATH | os.O_DIRECTORY)
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
                client.connect(f"/proc/self/fd/{folder}/provider.sock")  # the relay listens on it
        finally:
            os.close(folder)
    finally:
        box.close()
    assert not box._state.exists()
