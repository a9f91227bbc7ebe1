"""Red team with the scripted fake engine (SPEC §11): the agent runs shell commands that try to
break out of its sandbox, through the job API, while other runs go on beside it.

The many probes share a few runs to keep the suite lean; the real CLIs repeat the essential
ones in test_red_team_real_engines.py.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from django.db import connection

from tests.support.jobs import HAIKU_DATA, haiku_step, processes_in, wait_until
from tests.support.sandbox_probes import (
    DENIED_SYSCALLS,
    SERVER_SECRET_KEY,
    VICTIM_SECRET,
    command_results,
    finish,
    http_probe,
    start,
    syscall_probe,
)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(180)]

REPO = Path(__file__).resolve().parents[2]
SYSTEM_PATH = ("/usr/local/bin", "/usr/bin", "/bin", "/usr/local/sbin", "/usr/sbin", "/sbin")


def _database_probe() -> dict[str, str]:
    """Reading the SQLite file; PostgreSQL keeps no file in reach (its port: see the README)."""
    if connection.vendor != "sqlite":
        return {}
    return {"database": f"cat {connection.settings_dict['NAME']}"}


def test_agent_reaches_nothing_outside_its_run_while_another_run_succeeds(
    api, bob_api, victim, fake_codex, manual_dispatch, tight_limits
):
    """R-SB2, R-SB3, R-SB4: Bob's agent tries to read the database, the secret key, Alice's run
    directory, uploads and session transcript, the server user's home and the service's
    environment; to write outside its run; to signal the service; to allocate past the memory
    limit. Each attempt fails, Bob's run still succeeds, and Alice's run beside it too."""
    data, worker = victim.data_dir, os.getpid()
    reads = {
        **_database_probe(),
        "secret key": f"cat {data}/secret_key",
        "other run dir": f"ls {victim.run_dir}",
        "other run's upload": f"cat {victim.run_dir}/uploads/secret.txt",
        "other engine home": f"cat {victim.home}/sessions/transcript.jsonl",
        "server user's home": f"ls -a {Path.home()}",
        "project checkout": f"cat {REPO}/pyproject.toml",
        "service environment": f"cat /proc/{worker}/environ",
        "sandbox init environment": "cat /proc/1/environ",
    }
    writes = {
        "data dir": f"touch {data}/pwned",
        "other run dir": f"touch {victim.run_dir}/pwned",
        "system": "touch /usr/pwned",
        "project checkout": f"touch {REPO}/pwned",
    }
    signals = {"worker": f"kill -TERM {worker}", "any host pid": f"kill -0 {os.getppid()}"}
    memory = f"python3 -c 'bytearray({2 * 256 * 1024 * 1024})'"
    commands = [*reads.values(), *writes.values(), *signals.values(), memory, "id -u", "ls /proc"]
    fake_codex.script(haiku_step(), by_prompt={"attacker": [haiku_step(commands=commands)]})

    attacker = start(bob_api, manual_dispatch, "attacker")
    bystander = start(api, manual_dispatch, "bystander")

    assert finish(bob_api, attacker)["status"] == "succeeded"
    assert finish(api, bystander)["status"] == "succeeded"
    from runs.models import Run

    results = command_results(Run.objects.get(pk=attacker).run_dir)
    for what, command in {**reads, **writes, **signals}.items():
        outcome = results[command]
        assert outcome["exit"] != 0, (what, outcome)
        assert VICTIM_SECRET not in outcome["out"] and SERVER_SECRET_KEY not in outcome["out"], (what, outcome)
    assert "MemoryError" in results[memory]["out"]
    for target in (data / "pwned", victim.run_dir / "pwned", Path("/usr/pwned"), REPO / "pwned"):
        assert not target.exists(), target
    # An unprivileged uid of its own, and a PID namespace holding nothing but the sandbox.
    assert results["id -u"]["out"].strip() != "0"
    pids = [int(name) for name in results["ls /proc"]["out"].split() if name.isdigit()]
    assert max(pids) < 50, pids


def test_seccomp_denies_what_agents_never_need_and_no_host_path_reaches_the_engine(
    api, install_skill, fake_codex, manual_dispatch, monkeypatch, tmp_path
):
    """R-SB10: new namespaces (unshare, clone), mount, ptrace, keyctl, bpf, perf events and
    userfaultfd fail with EPERM inside the sandbox (all but mount would work, or fail otherwise,
    without the filter), while forks, threads, exec, file writes and sockets work. The engine's
    PATH names its install and the system's folders, none of the host's other entries. The agent
    is `agent` in the passwd and group bwrap wrote from the service's descriptors."""
    install_skill("haiku-writer")
    host_bin = tmp_path / "host-bin"
    host_bin.mkdir()
    monkeypatch.setenv("PATH", f"{host_bin}{os.pathsep}{os.environ['PATH']}")
    denied = {name: syscall_probe(name) for name in DENIED_SYSCALLS}
    ordinary, filters, path = syscall_probe("ordinary"), "grep Seccomp_filters: /proc/self/status", 'echo "$PATH"'
    identity = "id -un; id -gn; stat -c %a /etc/passwd /etc/group"  # the files bwrap got as descriptors
    fake_codex.script(haiku_step(commands=[*denied.values(), ordinary, filters, path, identity]))

    request_id = start(api, manual_dispatch, "seccomp")

    assert finish(api, request_id)["status"] == "succeeded"
    from runs.models import Run

    results = command_results(Run.objects.get(pk=request_id).run_dir)
    for name, command in denied.items():
        assert results[command]["out"].strip() == f"{name}:EPERM", results[command]
    assert results[ordinary]["exit"] == 0 and results[ordinary]["out"].strip() == "ordinary:OK", results[ordinary]
    own_filters = int(Path("/proc/self/status").read_text().split("Seccomp_filters:")[1].split()[0])
    assert int(results[filters]["out"].split()[1]) == own_filters + 1
    entries = results[path]["out"].strip().split(os.pathsep)
    assert entries[0] == str(fake_codex.root), entries  # the CLI's install
    assert "/usr/bin" in entries and set(entries[1:]) <= set(SYSTEM_PATH), entries
    assert results[identity]["out"].split() == ["agent", "agent", "644", "644"], results[identity]


def test_limits_end_only_the_offending_turns(api, victim, fake_codex, manual_dispatch, tight_limits):
    """R-SB4: a fork bomb, a memory hog spread over several processes and a disk filler each end
    their own turn with SANDBOX_LIMIT_EXCEEDED naming the limit; a run started with them succeeds."""
    hog = "python3 -c 'import time; b = b\"x\" * (200 * 1024 * 1024); time.sleep(30)'"
    fake_codex.script(
        haiku_step(),
        by_prompt={
            # bash retries failed forks, so its bomb holds the limit (dash's dies out by itself)
            "forkbomb": [haiku_step(commands=["bash -c 'bomb() { bomb | bomb & }; bomb'; sleep 30"])],
            "memoryhog": [haiku_step(commands=[f"{hog} & {hog} & {hog} & wait"])],
            "diskfill": [haiku_step(commands=["for i in 1 2 3 4; do head -c 7000000 /dev/zero > fill$i; done"])],
        },
    )
    runs = {topic: start(api, manual_dispatch, topic) for topic in ("forkbomb", "memoryhog", "diskfill", "calm")}

    outcomes = {topic: finish(api, request_id) for topic, request_id in runs.items()}
    assert outcomes["calm"]["status"] == "succeeded", outcomes["calm"]
    assert api.get(f"/v1/jobs/{runs['calm']}/result").json()["result"]["data"] == HAIKU_DATA
    for topic, limit in (("forkbomb", "processes"), ("memoryhog", "memory"), ("diskfill", "run directory size")):
        status = outcomes[topic]
        assert status["status"] == "failed", status
        assert status["error"]["code"] == "SANDBOX_LIMIT_EXCEEDED", status
        assert limit in status["error"]["message"], status


def test_engine_runs_in_its_own_pid_namespace_and_a_stored_pid_kill_ends_it(
    api, victim, fake_codex, manual_dispatch, settings
):
    """R-SB3, seen from outside: the engine's processes are in another PID namespace than the
    worker; killing the stored engine_pid's group, as a recovering worker does (R-LC13), leaves
    no process of the sandbox behind."""
    from engines.process import kill_process_group
    from runs.models import Run

    fake_codex.script(haiku_step(sleep=60))
    request_id = start(api, manual_dispatch, "sleeper")
    run_dir = Run.objects.get(pk=request_id).run_dir
    assert wait_until(lambda: any(_runs_fake(pid) for pid in processes_in(run_dir)), timeout=15)
    engine = next(pid for pid in processes_in(run_dir) if _runs_fake(pid))
    assert os.readlink(f"/proc/{engine}/ns/pid") != os.readlink("/proc/self/ns/pid")

    stored = Run.objects.get(pk=request_id).engine_pid
    assert stored and stored in processes_in(run_dir)
    kill_process_group(stored, grace=1)
    assert wait_until(lambda: not processes_in(run_dir), timeout=5), "a sandboxed process survived"
    assert finish(api, request_id)["status"] == "failed"


def _runs_fake(pid: int) -> bool:
    try:
        return b"fake_codex.py" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def test_provider_mode_reaches_only_the_provider_and_never_holds_the_key(
    api, victim, fake_codex, manual_dispatch, settings
):
    """R-SB5: in provider mode the engine's one way out is the relay to its configured endpoint,
    which adds the operator's key; the engine itself holds a placeholder. Everything else —
    the endpoint's own address, the local database, the internet — is unreachable."""
    from tests.support.scripted_model_server import ScriptedModelServer

    with ScriptedModelServer([{"text": "hello"}]) as provider:
        settings.SKILLRUNNER_SANDBOX_NETWORK = "provider"
        engines = {name: dict(conf) for name, conf in settings.SKILLRUNNER_ENGINES.items()}
        engines["codex"].update(base_url=provider.url + "/v1", api_key="operator-real-key-5150")
        settings.SKILLRUNNER_ENGINES = engines
        relay = http_probe(
            "http://127.0.0.1:18080/v1/responses",
            body='{"model": "gpt-5.5", "input": "hi", "stream": true}',
            bearer_variable="SKILLRUNNER_PROVIDER_API_KEY",
        )
        probes = {
            "provider directly": http_probe(f"{provider.url}/v1/responses"),
            "database server": http_probe("http://127.0.0.1:5432/"),
            "internet": http_probe("https://example.com/"),
        }
        fake_codex.script(haiku_step(commands=["env", relay, *probes.values()]))
        request_id = start(api, manual_dispatch, "provider")
        status = finish(api, request_id)

        from runs.models import Run

        results = command_results(Run.objects.get(pk=request_id).run_dir)
        assert status["status"] == "succeeded", status
        assert "operator-real-key-5150" not in results["env"]["out"]
        assert "skillrunner-placeholder-" in results["env"]["out"]
        assert results[relay]["exit"] == 0 and "hello" in results[relay]["out"], results[relay]
        [seen] = [r for r in provider.requests if r.path.startswith("/v1/responses")]
        assert seen.headers["authorization"] == "Bearer operator-real-key-5150"
        for what, command in probes.items():
            assert results[command]["exit"] != 0, (what, results[command])
