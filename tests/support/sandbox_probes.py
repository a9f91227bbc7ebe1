"""What the sandbox tests attack with (SPEC §11): a victim run, tight limits, HTTP and syscall probes."""

from __future__ import annotations

import json
import shlex
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from engines import sandbox, seccomp
from tests.support.jobs import haiku_step

VICTIM_SECRET = "victim-secret-7f3a9c"
SERVER_SECRET_KEY = "server-secret-key-e41d0b"


@dataclass
class Victim:
    """Alice's finished run, with an upload and a session transcript another run must not reach."""

    run_dir: Path
    home: Path
    data_dir: Path


@pytest.fixture
def fresh_seccomp_program():
    """The process's cached seccomp program forgotten before and after the test."""
    seccomp.program.cache_clear()
    sandbox.forget_checks()
    yield
    seccomp.program.cache_clear()
    sandbox.forget_checks()


@pytest.fixture
def tight_limits(settings):
    """Limits low enough that a test reaches them in a second, high enough for the fake engine."""
    settings.SKILLRUNNER_SANDBOX_MEMORY_MB = 256
    settings.SKILLRUNNER_SANDBOX_MAX_PROCESSES = 64
    settings.SKILLRUNNER_SANDBOX_MAX_FILE_MB = 8
    settings.SKILLRUNNER_SANDBOX_RUN_DIR_MB = 24
    settings.SKILLRUNNER_MAX_CONCURRENT_TURNS = 8
    settings.SKILLRUNNER_USER_MAX_RUNNING = 8  # one user's runs side by side


@pytest.fixture
def victim(api, install_skill, fake_codex, manual_dispatch, settings) -> Victim:
    from runs.models import Run

    install_skill("haiku-writer")
    fake_codex.script(haiku_step())
    request_id = api.post("/v1/jobs", _body("victim"), format="json").json()["request_id"]
    manual_dispatch.run_inline(request_id)
    run = Run.objects.get(pk=request_id)
    assert run.status == "succeeded", run.error
    home = Path(settings.DATA_DIR) / "engine-homes" / "codex" / str(run.pk)
    (run.run_dir / "uploads").mkdir(exist_ok=True)
    (run.run_dir / "uploads" / "secret.txt").write_text(VICTIM_SECRET)
    (home / "sessions").mkdir(parents=True, exist_ok=True)
    (home / "sessions" / "transcript.jsonl").write_text(json.dumps({"text": VICTIM_SECRET}))
    (Path(settings.DATA_DIR) / "secret_key").write_text(SERVER_SECRET_KEY)
    return Victim(run.run_dir, home, Path(settings.DATA_DIR))


def _body(topic: str) -> dict:
    return {"skill_id": "haiku-writer", "engine": "codex", "input": {"topic": topic}}


def start(client, manual_dispatch, topic: str) -> str:
    """Create a run whose prompt carries ``topic`` (the fake picks its script by it) and run its
    turn in a worker thread."""
    response = client.post("/v1/jobs", _body(topic), format="json")
    assert response.status_code == 200, response.content
    request_id = response.json()["request_id"]
    manual_dispatch.run_in_thread(request_id)
    return request_id


def finish(client, request_id: str, timeout: float = 60) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = client.get(f"/v1/jobs/{request_id}").json()
        if status["status"] in ("succeeded", "failed", "canceled"):
            return status
        time.sleep(0.1)
    raise AssertionError(f"run {request_id} did not finish in {timeout} s")


def command_results(run_dir: Path) -> dict[str, dict]:
    """What the fake engine's ``commands`` step left in the run directory, by command."""
    return {entry["command"]: entry for entry in json.loads((run_dir / "commands.json").read_text())}


# An HTTP request from inside the sandbox with Python's urllib: a bare Debian machine has no curl
# (and a missing curl would make every "unreachable" probe pass). As `curl -sS`: the response body
# on stdout and exit 0 for any HTTP response, exit 1 when none comes.
_HTTP_PROBE = """
import sys, urllib.error, urllib.request
url, body, key = sys.argv[1:4]
headers = {"Content-Type": "application/json", **({"Authorization": "Bearer " + key} if key else {})}
try:
    response = urllib.request.urlopen(urllib.request.Request(url, body.encode() or None, headers), timeout=5)
except urllib.error.HTTPError as refused:
    response = refused
except OSError as failed:
    sys.exit(f"no response from {url}: {failed}")  # exit status 1
print(response.read().decode(errors="replace"))
"""
SANDBOX_PYTHON = "/usr/bin/python3" if Path("/usr/bin/python3").exists() else sys.executable


def http_probe(url: str, body: str = "", bearer_variable: str = "") -> str:
    """A shell command requesting `url` (a POST when there is a body), with the bearer token the
    environment variable `bearer_variable` holds inside the sandbox, if one is named."""
    key = f'"${bearer_variable}"' if bearer_variable else "''"
    return " ".join([SANDBOX_PYTHON, "-c", shlex.quote(_HTTP_PROBE), shlex.quote(url), shlex.quote(body), key])


# System calls the seccomp filter denies (R-SB10), each made once with Python's ctypes from inside
# the sandbox, and ordinary work that must still succeed. Each call is one an unprivileged process
# could make without the filter, or fails there with another errno than EPERM (mount: the caps).
_SYSCALL_PROBE = """
import ctypes, errno, os, socket, subprocess, sys, threading, time
libc = ctypes.CDLL(None, use_errno=True)
NR = {numbers}
CLONE_NEWUSER, SIGCHLD = 0x10000000, 17

def in_child(call):
    # Runs `call` against a child that sleeps, which is then reaped.
    child = os.fork()
    if child == 0:
        time.sleep(10)
        os._exit(0)
    try:
        return call(child)
    finally:
        os.kill(child, 9)
        os.waitpid(child, 0)

def clone_newuser():
    pid = libc.syscall(NR["clone"], CLONE_NEWUSER | SIGCHLD, 0, 0, 0, 0)
    if pid == 0:
        os._exit(0)
    if pid > 0:
        os.waitpid(pid, 0)
    return pid

def ordinary():
    assert in_child(lambda pid: pid) > 0
    thread = threading.Thread(target=time.sleep, args=(0.01,))
    thread.start()
    thread.join()
    assert subprocess.run(["true"]).returncode == 0
    with open("probe-written.txt", "w") as handle:
        handle.write("written")
    left, right = socket.socketpair()
    left.sendall(b"x")
    assert right.recv(1) == b"x"
    socket.socket().bind(("127.0.0.1", 0))
    return 0

perf_attr = ctypes.create_string_buffer((1).to_bytes(4, "little") + (128).to_bytes(4, "little"), 128)  # software
bpf_attr = ctypes.create_string_buffer(128)
CALLS = {{
    "unshare": lambda: libc.unshare(CLONE_NEWUSER),
    "clone": clone_newuser,
    "mount": lambda: libc.mount(b"none", b"/tmp", b"tmpfs", 0, None),
    "ptrace": lambda: in_child(lambda pid: libc.ptrace(16, pid, None, None)),  # PTRACE_ATTACH
    "keyctl": lambda: libc.syscall(NR["keyctl"], 0, -3, 1),  # the session keyring's id
    "bpf": lambda: libc.syscall(NR["bpf"], 0, bpf_attr, 128),  # BPF_MAP_CREATE
    "perf_event_open": lambda: libc.syscall(NR["perf_event_open"], perf_attr, 0, -1, -1, 0),
    "userfaultfd": lambda: libc.syscall(NR["userfaultfd"], 1),  # UFFD_USER_MODE_ONLY
    "ordinary": ordinary,
}}
failed = False
for name in sys.argv[1:]:
    ctypes.set_errno(0)
    result = CALLS[name]()
    code = ctypes.get_errno()
    print(f"{{name}}:" + ("OK" if result >= 0 else errno.errorcode.get(code, str(code))))
    failed = failed or result < 0
sys.exit(1 if failed else 0)
"""
DENIED_SYSCALLS = ("unshare", "clone", "mount", "ptrace", "keyctl", "bpf", "perf_event_open", "userfaultfd")


def syscall_probe(*names: str) -> str:
    """A shell command making the named calls of _SYSCALL_PROBE inside the sandbox: it prints
    `<name>:OK` or `<name>:<errno>` for each and exits 0 only when all of them succeeded."""
    import pyseccomp

    numbers = {name: pyseccomp.resolve_syscall(pyseccomp.Arch.NATIVE, name) for name in DENIED_SYSCALLS}
    program = _SYSCALL_PROBE.format(numbers=numbers)
    return " ".join([SANDBOX_PYTHON, "-c", shlex.quote(program), *names])
