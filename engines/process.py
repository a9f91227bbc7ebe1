"""Running engine processes: spawn, supervise, kill (R-EN5, R-LC11, R-LC12).

Every engine process runs in its own session (hence its own process group), with an argv list
(never a shell string), a curated environment and stdout/stderr drained by threads so a chatty
CLI can never block on a full pipe. Nothing here knows which engine it is running.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import select
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import IO, Any

from .sandbox import Sandbox, SandboxUnavailable
from .types import (
    FAILURE_ABORTED,
    FAILURE_BUDGET,
    FAILURE_SANDBOX_LIMIT,
    FAILURE_SPAWN,
    FAILURE_TIMEOUT,
    TurnControl,
    json_object,
)

POLL_SECONDS = 0.1
DEFAULT_GRACE_SECONDS = 5.0
# Per stream; engine output past this is cut in the middle, keeping its start (session ids are
# printed first) and its end (the final message is printed last).
MAX_STREAM_BYTES = 4 * 1024 * 1024
# Longest stdout line handed to a line reader (R-AC1); longer lines stay in the output only.
MAX_LINE_BYTES = 1024 * 1024
# After the engine itself exited, how long leftover children may keep the pipes open.
_LINGER_SECONDS = 1.0
_ABANDON_SECONDS = 2.0


logger = logging.getLogger(__name__)

LineHook = Callable[[bytes], None]
OutputHook = Callable[[bytes], None]


class SpawnError(Exception):
    """The engine binary could not be started (missing, not executable, bad cwd)."""


@dataclass
class ProcessResult:
    stdout: str
    stderr: str
    exit_code: int | None
    failure_reason: str | None = None  # FAILURE_TIMEOUT | FAILURE_ABORTED | FAILURE_SPAWN | …
    message: str = ""
    pid: int | None = None
    details: dict[str, Any] = field(default_factory=dict)


class CappedBuffer:
    """Thread-safe byte sink keeping the head and the tail of a stream within a fixed budget."""

    def __init__(self, limit: int = MAX_STREAM_BYTES) -> None:
        self._head_limit = limit // 2
        self._tail_limit = limit - self._head_limit
        self._head = bytearray()
        self._tail = bytearray()
        self._dropped = 0
        self._lock = threading.Lock()

    def write(self, data: bytes) -> None:
        with self._lock:
            room = self._head_limit - len(self._head)
            if room > 0:
                self._head += data[:room]
                data = data[room:]
            if not data:
                return
            self._tail += data
            excess = len(self._tail) - self._tail_limit
            if excess > 0:
                del self._tail[:excess]
                self._dropped += excess

    def take(self) -> str:
        """Return everything collected so far as text and start afresh."""
        with self._lock:
            middle = f"\n[... {self._dropped} bytes omitted ...]\n".encode() if self._dropped else b""
            text = bytes(self._head + middle + self._tail).decode("utf-8", errors="replace")
            self._head, self._tail, self._dropped = bytearray(), bytearray(), 0
            return text


class LineSplitter:
    """Cuts a byte stream into lines for a line reader while the process runs (R-AC1).

    Lines longer than MAX_LINE_BYTES are skipped rather than held in memory whole; a failing
    reader is logged and never stops the draining of the pipe.
    """

    def __init__(self, on_line: LineHook) -> None:
        self._on_line = on_line
        self._partial = bytearray()
        self._overflow = False

    def feed(self, chunk: bytes) -> None:
        *complete, rest = chunk.split(b"\n")
        for piece in complete:
            self._add(piece)
            if not self._overflow:
                self._deliver(bytes(self._partial))
            self._partial.clear()
            self._overflow = False
        self._add(rest)

    def close(self) -> None:
        if self._partial and not self._overflow:
            self._deliver(bytes(self._partial))
        self._partial.clear()

    def _add(self, piece: bytes) -> None:
        if self._overflow:
            return
        if len(self._partial) + len(piece) > MAX_LINE_BYTES:
            self._overflow = True
            self._partial.clear()
        else:
            self._partial += piece

    def _deliver(self, line: bytes) -> None:
        try:
            self._on_line(line)
        except Exception:  # a reader bug must not block the engine on a full pipe
            logger.exception("engine output line reader failed")


class Tee:
    """A CappedBuffer that also hands every byte to ``forward`` (the complete raw output, R-AC2).

    ``forward`` may be swapped between turns (a resident process); a failing one is logged and
    dropped, never allowed to stop the draining of the pipe.
    """

    def __init__(self, buffer: CappedBuffer, forward: OutputHook | None = None) -> None:
        self.buffer = buffer
        self.forward = forward

    def write(self, data: bytes) -> None:
        self.buffer.write(data)
        forward = self.forward
        if forward is not None:
            try:
                forward(data)
            except Exception:
                logger.exception("engine output hook failed; the rest of this turn's raw output is not kept")
                self.forward = None

    def take(self) -> str:
        return self.buffer.take()


def _drain(stream: IO[bytes], sink: Tee | None, on_line: LineHook | None) -> None:
    splitter = LineSplitter(on_line) if sink is not None and on_line is not None else None
    try:
        if sink is None:
            assert on_line is not None
            for line in stream:
                on_line(line)
        else:
            for chunk in iter(lambda: stream.read1(65536), b""):  # type: ignore[attr-defined]
                sink.write(chunk)
                if splitter is not None:
                    splitter.feed(chunk)
    except (OSError, ValueError):
        pass  # the pipe was closed under us while killing the process
    finally:
        if splitter is not None:
            splitter.close()
        stream.close()


def _start_reader(stream: IO[bytes], sink: Tee | None, on_line: LineHook | None = None) -> threading.Thread:
    thread = threading.Thread(target=_drain, args=(stream, sink, on_line), daemon=True)
    thread.start()
    return thread


def resolve_executable(binary: str, env: dict[str, str]) -> str:
    """Absolute path of the engine binary, looked up on the engine's own PATH (R-EN4).

    A path with a separator is taken relative to the server's cwd, not the run directory the
    engine is started in.
    """
    if os.sep in binary:
        path = os.path.abspath(binary)
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
        raise SpawnError(f"engine binary {binary!r} does not exist or is not executable")
    found = shutil.which(binary, path=env.get("PATH", os.defpath))
    if found is None:
        raise SpawnError(f"engine binary {binary!r} was not found on PATH")
    return found


def _stdin_file(text: str) -> IO[bytes]:
    """An unnamed file holding ``text``, to be a process's stdin: the process reads it whole at its
    own pace, and nothing can block on a pipe the engine has not read yet."""
    handle = tempfile.TemporaryFile()
    handle.write(text.encode("utf-8"))
    handle.seek(0)
    return handle


def spawn(
    argv: list[str],
    cwd: Path,
    env: dict[str, str],
    *,
    stdin_pipe: bool = False,
    stdin_text: str | None = None,
    sandbox: Sandbox | None = None,
) -> subprocess.Popen[bytes]:
    """Start ``argv`` in a new session; stdin is closed unless the caller keeps a resident process
    (``stdin_pipe``) or hands the engine its prompt there (``stdin_text``, then end of file).

    With a ``sandbox`` the command runs confined (R-SB1): the process started, whose pid the
    orchestrator records and whose group a kill targets, is then bwrap itself, and the engine
    inside dies with it.
    """
    if not argv:
        raise SpawnError("empty command")
    executable = resolve_executable(argv[0], env)
    if sandbox is not None:
        host_env = env
        try:
            argv, env = sandbox.command(executable, argv[1:], env)
        except (OSError, SandboxUnavailable) as exc:
            raise SpawnError(f"could not prepare the sandbox: {exc}") from exc
        executable = resolve_executable(argv[0], host_env)  # bwrap is the service's, on its own PATH
    stdin: int | IO[bytes] = subprocess.PIPE if stdin_pipe else subprocess.DEVNULL
    try:
        if stdin_text is not None:
            stdin = _stdin_file(stdin_text)
        proc = subprocess.Popen(
            argv,
            executable=executable,
            cwd=cwd,
            env=env,
            stdin=stdin,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            close_fds=True,
            pass_fds=sandbox.inherited_fds if sandbox is not None else (),
        )
    except OSError as exc:
        raise SpawnError(f"could not start {argv[0]!r}: {exc}") from exc
    finally:
        if not isinstance(stdin, int):
            stdin.close()  # the child holds its own copy
    if sandbox is not None:
        sandbox.attach(proc.pid)
    return proc


class _SandboxWatch:
    """A TurnControl that also ends the turn when the sandbox's processes pass a limit (R-SB4)
    or its relay refuses a call for the budget (R-SB9)."""

    def __init__(self, control: TurnControl, sandbox: Sandbox) -> None:
        self._control = control
        self._sandbox = sandbox

    def on_spawn(self, pid: int) -> None:
        self._control.on_spawn(pid)

    def should_abort(self) -> bool:
        return self._sandbox.over_limit() or self._control.should_abort()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._control, name)  # every other hook (on_activity, on_output…) as is


def _watched(control: TurnControl, sandbox: Sandbox | None) -> TurnControl:
    return control if sandbox is None else _SandboxWatch(control, sandbox)


def _settle(result: ProcessResult, sandbox: Sandbox | None) -> ProcessResult:
    """A turn that spent its budget or broke a sandbox limit failed for that reason, whatever
    else happened."""
    if sandbox is None:
        return result
    budget = sandbox.ledger.exceeded
    exceeded = sandbox.check_turn_end()
    if budget is not None:
        result.failure_reason = FAILURE_BUDGET
        result.message = budget.message
        result.details = budget.details()
    elif exceeded:
        result.failure_reason = FAILURE_SANDBOX_LIMIT
        result.message = f"the turn exceeded the sandbox's {exceeded} limit"
    return result


def pid_alive(pid: int | None) -> bool:
    """Whether a process with this pid exists on this machine (one of another user's counts)."""
    if not pid or pid < 0:  # 0 and negative pids name process groups to os.kill
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@dataclass(frozen=True)
class _Proc:
    ppid: int
    pgid: int
    zombie: bool


def _process_table() -> dict[int, _Proc] | None:
    """Every process from /proc (Linux), or None where there is no /proc."""
    try:
        entries = [name for name in os.listdir("/proc") if name.isdigit()]
    except OSError:
        return None
    table = {}
    for name in entries:
        try:
            with open(f"/proc/{name}/stat", encoding="utf-8", errors="replace") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()  # the command name may hold spaces
        except OSError:
            continue  # exited while we looked
        table[int(name)] = _Proc(ppid=int(fields[1]), pgid=int(fields[2]), zombie=fields[0] in ("Z", "X"))
    return table


def _escaped_descendants(pgids: Collection[int]) -> set[int]:
    """Descendants of the groups' processes that moved to another group or session.

    CLIs start tool commands detached (Gemini's shell tool does), so killing the group alone
    would leave those running. They are found by parentage, which holds while their parents live.
    """
    table = _process_table() or {}
    members = {pid for pid, proc in table.items() if proc.pgid in pgids}
    return _below(table, members) - members


def kill_tree(pid: int) -> None:
    """SIGKILL a process and every process below it, in whatever group or session (the last
    resort for a process that did not stop: nothing it started outlives it)."""
    for target in {pid, *_below(_process_table() or {}, {pid})}:
        try:
            os.kill(target, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def _below(table: dict[int, _Proc], roots: set[int]) -> set[int]:
    """The descendants of `roots` by parentage."""
    children: dict[int, list[int]] = {}
    for pid, proc in table.items():
        children.setdefault(proc.ppid, []).append(pid)
    found: set[int] = set()
    stack = [child for pid in roots for child in children.get(pid, [])]
    while stack:
        pid = stack.pop()
        if pid not in found:
            found.add(pid)
            stack.extend(children.get(pid, []))
    return found


def _anything_alive(pgids: Collection[int], pids: set[int]) -> bool:
    table = _process_table()
    if table is None:
        return any(_group_exists(pgid) for pgid in pgids)
    return any(not proc.zombie and (proc.pgid in pgids or pid in pids) for pid, proc in table.items())


def _group_exists(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def _signal_all(pgids: Collection[int], pids: set[int], sig: signal.Signals) -> None:
    for target, send in [*((pgid, os.killpg) for pgid in pgids), *((pid, os.kill) for pid in pids)]:
        try:
            send(target, sig)
        except (ProcessLookupError, PermissionError):
            pass


def kill_process_group(
    pgid: int, grace: float = DEFAULT_GRACE_SECONDS, leader: subprocess.Popen[bytes] | None = None
) -> None:
    """SIGTERM the whole group (and its detached descendants), give it ``grace`` seconds, then
    SIGKILL what is left (R-LC12).

    Usable for orphan cleanup too (R-LC13): with no ``leader`` it only needs the group id the
    orchestrator recorded from ``TurnControl.on_spawn`` (the leader's pid, since every engine
    starts a new session).
    """
    kill_process_groups({pgid}, grace, leader)


def kill_process_groups(
    pgids: Collection[int], grace: float = DEFAULT_GRACE_SECONDS, leader: subprocess.Popen[bytes] | None = None
) -> None:
    """kill_process_group for several groups at once, in one grace period: a stopping worker
    ends all its turns' engines within ``grace``, not ``grace`` for each in turn."""
    if not pgids:
        return
    escaped = _escaped_descendants(pgids)
    _signal_all(pgids, escaped, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        if leader is not None:
            leader.poll()  # reap the leader, or its zombie keeps the group "alive"
        if not _anything_alive(pgids, escaped):
            break
        time.sleep(0.05)
    _signal_all(pgids, escaped | _escaped_descendants(pgids), signal.SIGKILL)
    if leader is not None:
        try:
            leader.wait(timeout=grace + 1)
        except subprocess.TimeoutExpired:
            pass


def supervise(
    proc: subprocess.Popen[bytes],
    control: TurnControl,
    hard_timeout: float,
    grace: float,
    finished: Callable[[], bool] | None = None,
) -> str | None:
    """Wait until the process exits (or ``finished()`` says the turn is over).

    Polls ``control.should_abort()`` every ``POLL_SECONDS``; on abort or after ``hard_timeout``
    seconds the whole group is killed and FAILURE_ABORTED / FAILURE_TIMEOUT returned.
    """
    deadline = time.monotonic() + hard_timeout
    with _ExitWatch(proc) as exited:
        while True:
            if finished is not None and finished():
                return None
            if exited(POLL_SECONDS):
                return None  # exited; whether the turn was complete is the caller's question
            if control.should_abort():
                kill_process_group(proc.pid, grace, proc)
                return FAILURE_ABORTED
            if time.monotonic() >= deadline:
                kill_process_group(proc.pid, grace, proc)
                return FAILURE_TIMEOUT


class _ExitWatch:
    """``exited(timeout)``: whether ``proc`` ended within ``timeout`` (and is reaped).

    The kernel wakes the wait through a pidfd the moment the process exits; ``Popen.wait`` with
    a timeout would instead sleep in growing steps of up to 50 ms, which every turn would pay.
    """

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.proc = proc
        self.poller: select.poll | None = None
        self.pidfd = -1

    def __enter__(self) -> Callable[[float], bool]:
        try:
            self.pidfd = os.pidfd_open(self.proc.pid)
        except (AttributeError, OSError):
            return self._wait  # no pidfds (kernel < 5.3) or already reaped: Popen's own wait
        self.poller = select.poll()
        self.poller.register(self.pidfd, select.POLLIN)
        return self._watch

    def __exit__(self, *exc_info: object) -> None:
        if self.pidfd >= 0:
            os.close(self.pidfd)

    def _watch(self, timeout: float) -> bool:
        assert self.poller is not None
        if not self.poller.poll(timeout * 1000):
            return False
        self.proc.wait()  # readable: it has exited, so this returns at once
        return True

    def _wait(self, timeout: float) -> bool:
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return False
        return True


def _describe(failure: str | None, hard_timeout: float) -> str:
    if failure == FAILURE_TIMEOUT:
        return f"the engine did not finish its turn within {hard_timeout:g} s and was killed"
    if failure == FAILURE_ABORTED:
        return "the engine was stopped on request"
    return ""


def _finish_readers(proc: subprocess.Popen[bytes], readers: list[threading.Thread]) -> None:
    """Read to EOF; children that outlive the engine and hold its pipes are killed (turn is over)."""
    deadline = time.monotonic() + _LINGER_SECONDS
    for thread in readers:
        thread.join(max(0.0, deadline - time.monotonic()))
    if any(thread.is_alive() for thread in readers):
        kill_process_group(proc.pid, _LINGER_SECONDS, proc)
        # A holder we could not find (reparented away from the group) must not hang the worker:
        # the daemon reader is abandoned and the output read so far is what the turn returns.
        deadline = time.monotonic() + _ABANDON_SECONDS
        for thread in readers:
            thread.join(max(0.0, deadline - time.monotonic()))


def run_process(
    argv: list[str],
    *,
    cwd: Path,
    env: dict[str, str],
    control: TurnControl,
    hard_timeout: float,
    grace: float = DEFAULT_GRACE_SECONDS,
    on_line: LineHook | None = None,
    sandbox: Sandbox | None = None,
    stdin_text: str | None = None,
) -> ProcessResult:
    """Run one engine process to completion, with stdin closed (or holding ``stdin_text``);
    ``on_line`` sees each stdout line as it is printed (on the reader thread), while the output
    is collected as before."""
    try:
        proc = spawn(argv, cwd, env, stdin_text=stdin_text, sandbox=sandbox)
    except SpawnError as exc:
        return ProcessResult("", "", None, FAILURE_SPAWN, str(exc))
    out = Tee(CappedBuffer(), partial(control.on_output, "stdout"))
    err = Tee(CappedBuffer(), partial(control.on_output, "stderr"))
    assert proc.stdout is not None and proc.stderr is not None
    readers = [_start_reader(proc.stdout, out, on_line), _start_reader(proc.stderr, err)]
    control.on_spawn(proc.pid)
    failure = supervise(proc, _watched(control, sandbox), hard_timeout, grace)
    _finish_readers(proc, readers)
    result = ProcessResult(out.take(), err.take(), proc.returncode, failure, _describe(failure, hard_timeout), proc.pid)
    return _settle(result, sandbox)


class ResidentProcess:
    """An engine process that stays alive between turns, fed JSON lines on stdin (sticky_process).

    stdout lines are queued by a reader thread; ``exchange`` writes one message and collects
    stdout lines until ``is_last(event)`` recognises the event that ends the turn. The turn's
    ``on_line`` reader sees each line on the reader thread as soon as it is printed (R-AC1).
    """

    def __init__(self, proc: subprocess.Popen[bytes], grace: float, sandbox: Sandbox | None = None) -> None:
        self.proc = proc
        self.grace = grace
        self.sandbox = sandbox
        self._lines: queue.Queue[bytes] = queue.Queue()
        self._stderr = Tee(CappedBuffer())
        self._line_hook: LineHook | None = None
        assert proc.stdout is not None and proc.stderr is not None
        self._readers = [
            _start_reader(proc.stdout, None, self._on_stdout_line),
            _start_reader(proc.stderr, self._stderr),
        ]

    @property
    def pid(self) -> int:
        return self.proc.pid

    def _on_stdout_line(self, line: bytes) -> None:
        self._lines.put(line)
        hook = self._line_hook
        if hook is not None and len(line) <= MAX_LINE_BYTES:
            try:
                hook(line.rstrip(b"\n"))
            except Exception:  # a reader bug must not stop the turn's output
                logger.exception("engine output line reader failed")

    def is_alive(self) -> bool:
        return self.proc.poll() is None

    def exchange(
        self,
        message: dict[str, object],
        control: TurnControl,
        hard_timeout: float,
        is_last: Callable[[dict[str, object]], bool],
        on_line: LineHook | None = None,
    ) -> ProcessResult:
        """Send one stdin message and read stdout until the turn's last event."""
        out = Tee(CappedBuffer(), partial(control.on_output, "stdout"))
        self._stderr.forward = partial(control.on_output, "stderr")
        self._line_hook = on_line
        done = threading.Event()

        def pump() -> bool:
            # Runs on the supervising thread: move queued lines into this turn's output.
            while not done.is_set():
                try:
                    line = self._lines.get_nowait()
                except queue.Empty:
                    return False
                out.write(line)
                event = json_object(line)
                if event is not None and is_last(event):
                    done.set()
            return True

        try:
            assert self.proc.stdin is not None
            self.proc.stdin.write(json.dumps(message, ensure_ascii=False).encode() + b"\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, ValueError, OSError):
            pass  # the process is gone; reported below from its exit code
        failure = supervise(self.proc, _watched(control, self.sandbox), hard_timeout, self.grace, finished=pump)
        if not done.is_set() and self.proc.poll() is not None:
            _finish_readers(self.proc, self._readers)
            pump()
        self._line_hook = None
        self._stderr.forward = None
        result = ProcessResult(
            out.take(), self._stderr.take(), self.proc.returncode, failure, _describe(failure, hard_timeout), self.pid
        )
        return _settle(result, self.sandbox)

    def close(self) -> None:
        """End the process politely (EOF on stdin), then by force after the grace period."""
        if self.proc.stdin is not None:
            try:
                self.proc.stdin.close()
            except OSError:
                pass
        try:
            self.proc.wait(timeout=self.grace)
        except subprocess.TimeoutExpired:
            pass
        kill_process_group(self.pid, self.grace if self.proc.poll() is None else 0.0, self.proc)
        _finish_readers(self.proc, self._readers)
        if self.sandbox is not None:
            self.sandbox.close()


def run_quick(argv: list[str], *, cwd: Path, env: dict[str, str], timeout: float = 15.0) -> tuple[int | None, str]:
    """Run a short probe (``--version``, ``--help``); returns (exit code, stdout + stderr).

    Raises SpawnError when the binary is missing; a probe that hangs is killed with its group
    and reported with exit code None.
    """
    proc = spawn(argv, cwd, env)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_process_group(proc.pid, 0.5, proc)
        out, err = proc.communicate()
        return None, (out + err).decode("utf-8", errors="replace")
    return proc.returncode, (out + err).decode("utf-8", errors="replace")
