"""The agent sandbox (SPEC §11, R-SB1–R-SB6, R-SB10): every engine turn runs inside bubblewrap.

``Sandbox.open`` builds one engine process's confinement from its turn; ``engines.process``
wraps the command with it, so adapters never see it. What the agent gets:

* File system (R-SB2): a fresh root holding read-only ``/usr`` (plus the usual top-level
  links), the CA certificates and resolver/host files, the CLI's install and the interpreters
  it needs; the run directory and the engine home writable at their host paths; a private
  ``/tmp``. Nothing else of the host exists: not the data directory, not other runs, not the
  server user's home, not the project checkout.
* Processes (R-SB3): own PID, IPC and UTS namespaces, a new session, no capabilities, killed
  with its parent. When the service runs as root the engine runs as an unprivileged uid of its
  own (derived from the run directory): RLIMIT_NPROC does not apply to root, and a uid per run
  keeps one run's fork bomb from starving another's. The run dir and home are handed to that
  uid before each spawn; the service (root) still reads and writes everything.
* Limits (R-SB4): ``prlimit`` sets RLIMIT_DATA/NPROC/FSIZE/NOFILE inside the sandbox; the
  supervising loop polls the sandbox's processes and ends the turn when all of them together
  pass the memory or process limit; the run directory's size is checked when the turn ends.
* Network (R-SB5, R-SB8): in both modes the engine's model calls go through the provider relay
  (``engines.relay``), in the service, which alone holds the operator's key: the engine is given
  a placeholder. ``open`` shares the host network, and the relay listens on a loopback port
  (the placeholder, random per sandbox, is what lets a call through); ``provider`` gives the
  sandbox its own network namespace whose only way out is ``socat`` forwarding a loopback port
  to the relay's Unix socket.
* System calls and environment (R-SB10): bwrap loads ``engines.seccomp``'s filter before the
  sandbox's first command; the engine's PATH names only what the sandbox shows.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import secrets
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from dataclasses import replace
from pathlib import Path
from urllib.parse import urlsplit

from .provider_api import ProviderApi
from .relay import ProviderRelay, RelayLedger
from .seccomp import SeccompUnavailable, program
from .types import EngineConfig, SandboxSettings, TurnRequest

BWRAP = "bwrap"
# Top-level names a distribution may keep as links into /usr (merged /usr) or as directories.
_SYSTEM_ROOTS = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
# The few /etc entries CLIs and skill scripts need: TLS roots, name resolution, time zone,
# the dynamic loader cache and the alternatives links some /usr/bin commands point through.
_ETC_ENTRIES = (
    "ssl",
    "ca-certificates",
    "ca-certificates.conf",
    "pki",
    "resolv.conf",
    "hosts",
    "host.conf",
    "nsswitch.conf",
    "gai.conf",
    "localtime",
    "timezone",
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "alternatives",
    "mime.types",
)
# Engine processes of a root service run as UID_BASE + (hash of the run dir) % UID_SPAN.
UID_BASE = 1_800_000_000
UID_SPAN = 100_000_000
PROVIDER_SOCKET = "/run/skillrunner/provider.sock"
PROVIDER_PORT = 18080  # inside the sandbox's own network namespace, so it can clash with nothing
# The system's command folders, as the engine's PATH names them when they exist (all are under
# /usr or its top-level links, which the sandbox shows).
_SYSTEM_PATH = ("/usr/local/bin", "/usr/bin", "/bin", "/usr/local/sbin", "/usr/sbin", "/sbin")
_CHECK_TTL_SECONDS = 60.0
# The process/memory poll: a turn's first second is left alone (the rlimits are the hard caps;
# the poll only ends a turn that stays over), then twice a second.
_FIRST_POLL_SECONDS = 1.0
_POLL_SECONDS = 0.5
_MB = 1024 * 1024


class SandboxUnavailable(Exception):
    """bwrap (or a tool the chosen mode needs) is missing or does not work on this host."""


_check_lock = threading.Lock()
_CheckKey = tuple[str, bool]
_check_cache: dict[_CheckKey, tuple[float, str | None]] = {}
_rechecking: set[_CheckKey] = set()  # keys a thread of this process is checking again
_checks_forgotten = 0  # how many times forget_checks ran: a check started before one is not recorded


def sandbox_problem(settings: SandboxSettings) -> str | None:
    """Why engine turns cannot be sandboxed here, or None when they can (R-SB6). Cached briefly.

    Actually starts a minimal sandbox: an installed but unusable bwrap (no user namespaces, a
    seccomp policy of the container) must be reported here, not discovered by each turn. That
    costs a bwrap start (8 ms), which no turn waits for once a check has passed: when the answer
    is due again, it still stands while a thread checks again. A failed check due again is made
    before it is answered, so a host fixed meanwhile is seen by the next turn.
    """
    if settings.mode == "off":
        return None
    key = (settings.network, os.geteuid() == 0)
    with _check_lock:
        if key in _check_cache:
            checked_at, problem = _check_cache[key]
            if time.monotonic() - checked_at < _CHECK_TTL_SECONDS or key in _rechecking:
                return problem
            if problem is None:
                _rechecking.add(key)
                threading.Thread(target=_check, args=(key, settings), name="sandbox-check", daemon=True).start()
                return None
    return _check(key, settings)


def _check(key: _CheckKey, settings: SandboxSettings) -> str | None:
    forgotten_before = _checks_forgotten
    problem = _probe_tools(settings)
    with _check_lock:
        if _checks_forgotten == forgotten_before:
            _check_cache[key] = (time.monotonic(), problem)
            _rechecking.discard(key)
    return problem


def _reset_in_child() -> None:
    # A forked process has no check thread of its parent's, nor a lock one of them held.
    global _check_lock
    _check_lock = threading.Lock()
    _rechecking.clear()


os.register_at_fork(after_in_child=_reset_in_child)


def forget_checks() -> None:
    """Drop the cached availability checks (after the host changed, and in tests), and the
    answers of checks still running: they may have probed the host as it was."""
    global _checks_forgotten
    with _check_lock:
        _check_cache.clear()
        _rechecking.clear()
        _checks_forgotten += 1


def _probe_tools(settings: SandboxSettings) -> str | None:
    advice = "install it (Debian/Ubuntu: apt-get install bubblewrap socat util-linux) or set SKILLRUNNER_SANDBOX=off"
    needed = [BWRAP, "prlimit"] + (["setpriv"] if os.geteuid() == 0 else [])
    if settings.network == "provider":
        needed.append("socat")
    for tool in needed:
        if shutil.which(tool) is None:
            return f"the agent sandbox needs {tool!r}, which is not installed: {advice} (unconfined agents)"
    try:
        seccomp_fd = memory_file("skillrunner-seccomp", program())
    except SeccompUnavailable as exc:
        return (
            f"{exc}; the agent sandbox needs libseccomp and the Python package pyseccomp: install them "
            "(Debian/Ubuntu: apt-get install libseccomp2; pip install pyseccomp) or set SKILLRUNNER_SANDBOX=off"
        )
    argv = [BWRAP, *_isolation_args(settings), *_system_args(), "--seccomp", str(seccomp_fd), "--", "/bin/true"]
    try:
        done = subprocess.run(argv, capture_output=True, timeout=10, start_new_session=True, pass_fds=[seccomp_fd])
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bubblewrap (bwrap) could not be started: {exc}; {advice}"
    finally:
        os.close(seccomp_fd)
    if done.returncode != 0:
        detail = done.stderr.decode("utf-8", "replace").strip()[-300:]
        return f"bubblewrap (bwrap) does not work on this host ({detail or f'exit {done.returncode}'}); {advice}"
    return None


def _isolation_args(settings: SandboxSettings) -> list[str]:
    # PID (R-SB3) and IPC (the host's SysV shared memory) namespaces; no UTS or cgroup one: the
    # agent cannot change the host name without capabilities, and each namespace costs start-up.
    args = ["--die-with-parent", "--new-session", "--unshare-pid", "--unshare-ipc"]
    if settings.network == "provider":
        args.append("--unshare-net")
    if os.geteuid() == 0:
        # Privileged bwrap keeps the capabilities it is told to; setpriv needs these three to
        # switch to the run's uid, and the switch itself drops them (R-SB3: none are left).
        args += ["--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
        args += ["--cap-add", "CAP_SETPCAP"]
    else:
        args += ["--unshare-user", "--cap-drop", "ALL"]
    return args


def _system_args() -> list[str]:
    """Read-only system: /usr, the top-level links into it, the needed /etc entries, /proc, /dev."""
    args = ["--ro-bind", "/usr", "/usr"]
    for name in _SYSTEM_ROOTS:
        path = Path("/") / name
        if path.is_symlink():
            args += ["--symlink", os.readlink(path), str(path)]
        elif path.is_dir():
            args += ["--ro-bind", str(path), str(path)]
    args += ["--perms", "0755", "--dir", "/etc"]  # bwrap would create it 0700, unreadable to the agent
    for name in _ETC_ENTRIES:
        args += ["--ro-bind-try", f"/etc/{name}", f"/etc/{name}"]
    return args + ["--proc", "/proc", "--dev", "/dev"]


def sandbox_uid(run_dir: Path) -> int:
    """The unprivileged uid a root service runs this run's engine as; stable across its turns."""
    digest = hashlib.sha256(str(run_dir).encode()).digest()
    return UID_BASE + int.from_bytes(digest[:8], "big") % UID_SPAN


def _hand_over(root: Path, uid: int) -> None:
    """Give a tree to the sandbox uid. Links are changed themselves, never followed."""
    if not root.exists():
        return
    os.lchown(root, uid, uid)
    for parent, dirs, files in os.walk(root):
        for name in dirs + files:
            try:
                os.lchown(os.path.join(parent, name), uid, uid)
            except FileNotFoundError:
                pass


def _install_roots(executable: str) -> list[Path]:
    """What must be readable to run ``executable``: its whole node_modules tree when it is an
    npm-installed CLI (its launcher starts sibling packages' binaries), else its directory."""
    roots = []
    for path in (Path(os.path.abspath(executable)), Path(os.path.realpath(executable))):
        modules = [parent for parent in path.parents if parent.name == "node_modules"]
        roots.append(modules[-1] if modules else path.parent)
    return roots


def _interpreter_roots(path_value: str) -> list[Path]:
    """Installations of node and python outside /usr (e.g. /opt/node) the CLIs' shebangs reach.

    Never one inside the server user's home (pyenv, nvm): that home stays hidden, so the engine's
    PATH falls through to the system interpreters there.
    """
    roots = []
    for name in ("node", "python3"):
        found = shutil.which(name, path=path_value)
        if found:
            real = Path(os.path.realpath(found))
            if not real.is_relative_to("/usr") and not real.is_relative_to(Path.home()):
                roots.append(real.parent.parent)  # <prefix>/bin/<name> -> <prefix>
    return roots


def _tree_usage(root: Path) -> tuple[int, int]:
    """(total bytes, largest file) of the regular files under ``root``, links not followed."""
    total = largest = 0
    for parent, _dirs, files in os.walk(root):
        for name in files:
            try:
                info = os.lstat(os.path.join(parent, name))
            except OSError:
                continue
            total += info.st_size
            largest = max(largest, info.st_size)
    return total, largest


def _process_tree(root_pid: int) -> list[tuple[int, int]]:
    """(threads, resident bytes) of ``root_pid`` and all its descendants, from /proc."""
    parents: dict[int, int] = {}
    usage: dict[int, tuple[int, int]] = {}
    page = os.sysconf("SC_PAGE_SIZE")
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", encoding="utf-8", errors="replace") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents[int(name)] = int(fields[1])
        usage[int(name)] = (int(fields[17]), int(fields[21]) * page)
    children: dict[int, list[int]] = {}
    for pid, ppid in parents.items():
        children.setdefault(ppid, []).append(pid)
    found, stack = [], [root_pid]
    while stack:
        pid = stack.pop()
        if pid in usage:
            found.append(usage[pid])
        stack.extend(children.get(pid, []))
    return found


def memory_file(name: str, data: bytes) -> int:
    """A file in memory holding `data` at offset 0, for bwrap's options that read a descriptor to
    its end (--seccomp, --ro-bind-data: each bwrap needs its own). Nothing is written to a disk,
    where each file made and removed per turn cost the worker kernel time (issue #43). The caller
    closes it once bwrap has started."""
    fd = os.memfd_create(name, os.MFD_CLOEXEC)
    os.write(fd, data)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


STATE_PREFIX = "skillrunner-sandbox-"
STATE_LOCK = "held"


def _locked_state_dir() -> tuple[Path, int]:
    """A private directory for a sandbox's provider socket, with a lock file
    its process holds until close() or its death (the kernel drops the lock with the process,
    even a SIGKILLed one). The lock is taken before the file gets the name a sweep looks for."""
    state = Path(tempfile.mkdtemp(prefix=STATE_PREFIX))
    held = os.open(state / f"{STATE_LOCK}.new", os.O_CREAT | os.O_WRONLY, 0o600)
    fcntl.flock(held, fcntl.LOCK_EX)
    os.rename(state / f"{STATE_LOCK}.new", state / STATE_LOCK)
    return state, held


def _bind_unix(listener: socket.socket, path: Path) -> None:
    """Binds `listener` to `path` through its folder's descriptor: a socket's path has at most 107
    bytes, which a long $TMPDIR (pytest's, a container's) passes."""
    handle = os.open(path.parent, os.O_PATH | os.O_DIRECTORY)
    try:
        listener.bind(f"/proc/self/fd/{handle}/{path.name}")
    finally:
        os.close(handle)


def remove_orphaned_state() -> int:
    """Removes the state directories no running process holds: those of turns whose worker was
    killed before it could close() them. Returns how many went."""
    removed = 0
    for state in Path(tempfile.gettempdir()).glob(f"{STATE_PREFIX}*"):
        try:
            lock = os.open(state / STATE_LOCK, os.O_RDONLY)
        except OSError:  # none yet (being made), or not a directory of ours
            continue
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            continue  # a turn in progress
        finally:
            os.close(lock)
        shutil.rmtree(state, ignore_errors=True)
        removed += 1
    return removed


class Sandbox:
    """One engine process's confinement; ``close()`` once that process has ended."""

    def __init__(
        self, settings: SandboxSettings, request: TurnRequest, config: EngineConfig, provider_url: str, api: ProviderApi
    ):
        self.settings = settings
        self.run_dir = Path(os.path.abspath(request.run_dir))
        self.home = Path(os.path.abspath(config.home))
        self.request = request
        self.uid = sandbox_uid(self.run_dir) if os.geteuid() == 0 else os.getuid()
        self._state: Path | None = None  # provider mode: the relay's socket is a file
        self._held: int | None = None  # the lock on _state
        self._passed_fds: list[int] = []  # from command() until bwrap has started
        self._relay_socket: Path | None = None  # provider mode: bound into the sandbox
        self.ledger = request.relay_ledger or RelayLedger()
        self.relay: ProviderRelay | None = None
        try:
            self.relay, self.engine_config = self._start_relay(config, provider_url, api)
        except SandboxUnavailable:
            self.close()
            raise
        self._pid: int | None = None
        self._next_poll = 0.0
        self.exceeded: str | None = None  # the limit that ended the turn, in words

    @classmethod
    def open(
        cls, request: TurnRequest, config: EngineConfig, provider_url: str | None, api: ProviderApi
    ) -> Sandbox | None:
        """The sandbox for a turn, or None when the operator switched it off (R-SB6)."""
        settings = config.sandbox
        if settings.mode == "off":
            return None
        problem = sandbox_problem(settings)
        if problem:
            raise SandboxUnavailable(problem)
        return cls(settings, request, config, config.base_url or provider_url or "", api)

    # ---- network ------------------------------------------------------------------------------

    def _start_relay(
        self, config: EngineConfig, provider_url: str, api: ProviderApi
    ) -> tuple[ProviderRelay, EngineConfig]:
        upstream = urlsplit(provider_url)
        if upstream.scheme not in ("http", "https") or not upstream.hostname:
            raise SandboxUnavailable(
                f"the agent sandbox needs the provider's URL (http or https), got {provider_url!r}"
            )
        if self.settings.network == "provider":
            self._state, self._held = _locked_state_dir()
            self._relay_socket = self._state / "provider.sock"
            listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            _bind_unix(listener, self._relay_socket)
            os.chmod(self._relay_socket, 0o666)  # the sandbox's unprivileged uid connects to it
            port = PROVIDER_PORT  # socat's, inside the sandbox's own network namespace
        else:
            listener = socket.create_server(("127.0.0.1", 0))
            port = listener.getsockname()[1]
        listener.listen(64)
        placeholder = "skillrunner-placeholder-" + secrets.token_hex(16)
        relay = ProviderRelay(listener, provider_url, api, placeholder, config.api_key, self.ledger)
        inner_url = f"http://127.0.0.1:{port}{upstream.path.rstrip('/')}"
        return relay, replace(config, base_url=inner_url, api_key=placeholder)

    # ---- the command --------------------------------------------------------------------------

    def command(self, executable: str, args: list[str], env: dict[str, str]) -> tuple[list[str], dict[str, str]]:
        """The bwrap argv running ``executable args`` confined, and the environment to start it with."""
        env = dict(env)
        interpreters = _interpreter_roots(env.get("PATH", os.defpath))
        readable = [*_install_roots(executable), *interpreters]
        readable += [Path(os.path.abspath(path)) for path in self.request.readonly_paths]
        readable = list(dict.fromkeys(readable))
        for path in readable:
            if self.run_dir.is_relative_to(path) or self.home.is_relative_to(path):
                raise SandboxUnavailable(
                    f"{path} holds the service's data directory and cannot be shown to the agent: "
                    "install the engine CLI outside it"
                )
        if os.geteuid() == 0:
            _hand_over(self.run_dir, self.uid)
            _hand_over(self.home, self.uid)
            # bwrap enters the run dir (--chdir) as a root without CAP_DAC_OVERRIDE: it needs the
            # search bit, whatever umask made the folder (the data dir above stays private).
            os.chmod(self.run_dir, 0o711)
        env["PATH"] = self._path(executable, interpreters)
        try:
            seccomp = self._passed("skillrunner-seccomp", program())
        except SeccompUnavailable as exc:
            raise SandboxUnavailable(str(exc)) from exc
        argv = [BWRAP, *_isolation_args(self.settings), "--seccomp", seccomp]
        argv += [*_system_args(), *self._identity_args()]
        argv += ["--perms", "1777", "--size", str(self.settings.tmp_mb * _MB), "--tmpfs", "/tmp"]
        mounts = [(path, "--ro-bind") for path in readable] + [(self.run_dir, "--bind"), (self.home, "--bind")]
        for directory in self._parent_dirs([path for path, _ in mounts]):
            argv += ["--perms", "0755", "--dir", directory]
        for path, how in mounts:
            argv += [how, str(path), str(path)]
        if self._relay_socket is not None:
            argv += ["--perms", "0755", "--dir", "/run", "--perms", "0755", "--dir", str(Path(PROVIDER_SOCKET).parent)]
            argv += ["--bind", str(self._relay_socket), PROVIDER_SOCKET]
        argv += ["--chdir", str(self.run_dir), "--", *self._limits(), *self._drop_privileges()]
        if self._relay_socket is not None:
            # nodelay: socat passes the relay's writes on as they come (see ProviderRelay._accept).
            relay = f"TCP-LISTEN:{PROVIDER_PORT},bind=127.0.0.1,fork,reuseaddr,nodelay UNIX-CONNECT:{PROVIDER_SOCKET}"
            argv += ["/bin/sh", "-c", f'socat {relay} 2>/dev/null & exec "$@"', "sandbox"]
        return argv + [executable, *args], env

    @property
    def inherited_fds(self) -> tuple[int, ...]:
        """The descriptors bwrap must inherit: the seccomp program, passwd and group."""
        return tuple(self._passed_fds)

    def _passed(self, name: str, data: bytes) -> str:
        """`data` as a descriptor bwrap inherits, by its number in bwrap's argv."""
        fd = memory_file(name, data)
        self._passed_fds.append(fd)
        return str(fd)

    def _path(self, executable: str, interpreters: list[Path]) -> str:
        """The engine's PATH: the request's own entries, the bin folders of the CLI's install and of
        the interpreters shown to it, then the system's. None of the host's other entries (R-SB10)."""
        entries = [*map(str, self.request.path_prefix), os.path.dirname(os.path.abspath(executable))]
        entries += [str(root / "bin") for root in interpreters]
        entries += [path for path in _SYSTEM_PATH if os.path.isdir(path)]
        return os.pathsep.join(dict.fromkeys(entries))

    def _identity_args(self) -> list[str]:
        """/etc/passwd and /etc/group naming only root and the agent (CLIs look their user up)."""
        home = self.home / "home"
        passwd = f"root:x:0:0:root:/root:/usr/sbin/nologin\nagent:x:{self.uid}:{self.uid}:agent:{home}:/bin/sh\n"
        group = f"root:x:0:\nagent:x:{self.uid}:\n"
        return [
            *("--perms", "0644", "--ro-bind-data", self._passed("passwd", passwd.encode()), "/etc/passwd"),
            *("--perms", "0644", "--ro-bind-data", self._passed("group", group.encode()), "/etc/group"),
        ]

    @staticmethod
    def _parent_dirs(paths: list[Path]) -> list[str]:
        """Mount points' parents outside /usr, created world-traversable (bwrap would use 0700),
        outermost first. Worked out on strings: with Path objects it took 0.15 ms of every turn."""
        parents: set[str] = set()
        for path in paths:
            parent = os.path.dirname(str(path))
            while parent != "/" and parent not in parents:  # a parent known has its own parents too
                parents.add(parent)
                parent = os.path.dirname(parent)
        kept = (p for p in parents if p not in ("/usr", "/tmp") and not p.startswith("/usr/"))
        return sorted(kept, key=lambda p: (p.count("/"), p))

    def _limits(self) -> list[str]:
        s = self.settings
        return [
            "prlimit",
            f"--data={s.memory_mb * _MB}",
            f"--nproc={s.max_processes}",
            f"--fsize={s.max_file_mb * _MB}",
            f"--nofile={s.max_open_files}",
            "--core=0",
            "--",
        ]

    def _drop_privileges(self) -> list[str]:
        if os.geteuid() != 0:
            return []  # an unprivileged bwrap already runs as the service user with no capabilities
        return [
            "setpriv",
            f"--reuid={self.uid}",
            f"--regid={self.uid}",
            "--clear-groups",
            "--inh-caps=-all",
            "--bounding-set=-all",
            "--no-new-privs",
            "--",
        ]

    # ---- supervision --------------------------------------------------------------------------

    def attach(self, pid: int) -> None:
        """The bwrap process that was started with ``command()``."""
        self._pid = pid
        self._next_poll = time.monotonic() + _FIRST_POLL_SECONDS
        self._close_passed_fds()  # bwrap holds its own copies

    def _close_passed_fds(self) -> None:
        while self._passed_fds:
            os.close(self._passed_fds.pop())

    def over_limit(self) -> bool:
        """Polled while the turn runs: True (and ``exceeded`` set) once the sandbox's processes
        together pass the process or memory limit, so the caller kills the turn."""
        if self.exceeded is not None or self.ledger.exceeded is not None:
            return True
        now = time.monotonic()
        if self._pid is None or now < self._next_poll:
            return False
        self._next_poll = now + _POLL_SECONDS
        tree = _process_tree(self._pid)
        threads = sum(count for count, _ in tree)
        resident = sum(size for _, size in tree)
        if threads >= self.settings.max_processes:
            self.exceeded = f"processes (SKILLRUNNER_SANDBOX_MAX_PROCESSES={self.settings.max_processes})"
        elif resident > self.settings.memory_mb * _MB:
            self.exceeded = f"memory (SKILLRUNNER_SANDBOX_MEMORY_MB={self.settings.memory_mb})"
        return self.exceeded is not None

    def check_turn_end(self) -> str | None:
        """The limit the finished turn broke, if any: one seen while running, or the run directory's
        size, or a file cut off at the file-size limit (its writer got SIGXFSZ)."""
        if self.exceeded is None:
            total, largest = _tree_usage(self.run_dir)
            if total > self.settings.run_dir_mb * _MB:
                self.exceeded = f"run directory size (SKILLRUNNER_SANDBOX_RUN_DIR_MB={self.settings.run_dir_mb})"
            elif largest >= self.settings.max_file_mb * _MB:
                self.exceeded = f"file size (SKILLRUNNER_SANDBOX_MAX_FILE_MB={self.settings.max_file_mb})"
        return self.exceeded

    def close(self) -> None:
        self._close_passed_fds()
        if self.relay is not None:
            self.relay.close()
        if self._state is not None:
            shutil.rmtree(self._state, ignore_errors=True)
        if self._held is not None:  # closed once: its number may be another file's afterwards
            os.close(self._held)
            self._held = None
