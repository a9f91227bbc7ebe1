"""Red team with the real Codex, Gemini, Claude Code, Qwen Code, OpenCode and Kilo CLIs (SPEC §11, R-SB2,
R-SB3, R-SB5, R-SB10).

The scripted model makes each CLI call its own shell tool with one command that tries the
essential escapes — other runs' files, the secret key, the database, writing into the data
dir, signalling the worker, reaching the provider around the relay, a new namespace, a mount,
tracing another process — and prints the API key variables. The sandbox runs in ``provider`` network mode, so the key the CLI holds must be a
placeholder while the model server receives the operator's real key.
"""

from __future__ import annotations

import json
import os
import shlex

import pytest
from django.db import connection

from engines.sandbox import PROVIDER_PORT
from tests.real_engines.conftest import require_engine
from tests.support.engine_env import SERVICE_MODELS, SERVICE_URL_PATHS
from tests.support.sandbox_probes import SANDBOX_PYTHON, SERVER_SECRET_KEY, VICTIM_SECRET, http_probe, syscall_probe
from tests.support.scripted_model_server import ScriptedModelServer

pytestmark = [pytest.mark.real_engine, pytest.mark.django_db(transaction=True), pytest.mark.timeout(180)]

REAL_KEY = "operator-real-key-8086"
KEY_HEADERS = {
    "codex": "authorization",
    "gemini": "x-goog-api-key",
    "claude": "x-api-key",
    "qwen": "authorization",
    "opencode": "authorization",
    "kilo": "authorization",
}
KEY_PREFIXES = {"codex": "Bearer ", "qwen": "Bearer ", "opencode": "Bearer ", "kilo": "Bearer "}
HAIKU = {"topic": "sea", "haiku": ["waves fold", "into the grey", "morning"], "haiku_file": "artifacts/haiku.md"}

# The key the engine holds, sent to the relay everywhere but the one header it belongs in, and a
# call outside the engine's model routes (R-SB8). Prints `PROBE <case> <status> <code>` for each.
_RELAY_PROBE = """
import json, os, sys, urllib.error, urllib.request
base, header, prefix = sys.argv[1:4]
key = next(os.environ[name] for name in ("OPENAI_API_KEY", "SKILLRUNNER_PROVIDER_API_KEY", "GEMINI_API_KEY",
           "ANTHROPIC_API_KEY") if os.environ.get(name))
own = {header: prefix + key, "Content-Type": "application/json"}
cases = {
    "path": ("GET", base + "/reflect/" + key, own, None),
    "query": ("GET", base + "/models?echo=" + key, own, None),
    "header": ("GET", base + "/models", {**own, "X-Echo": key}, None),
    "body": ("POST", base + "/files", own, json.dumps({"purpose": key}).encode()),
    "route": ("POST", base + "/files", own, b"{}"),
}
for case, (method, url, headers, body) in cases.items():
    try:
        response = urllib.request.urlopen(urllib.request.Request(url, body, headers, method=method), timeout=5)
    except urllib.error.HTTPError as refused:
        response = refused
    except OSError as failed:
        print("PROBE", case, "none", failed)
        continue
    print("PROBE", case, response.status, json.loads(response.read() or b"{}").get("error", {}).get("code"))
"""
EXPECTED_PROBES = {
    "path": "403 RELAY_KEY_OUTSIDE_KEY_HEADER",
    "query": "403 RELAY_KEY_OUTSIDE_KEY_HEADER",
    "header": "403 RELAY_KEY_OUTSIDE_KEY_HEADER",
    "body": "403 RELAY_KEY_OUTSIDE_KEY_HEADER",
    "route": "403 RELAY_ROUTE_NOT_ALLOWED",
}


def _outcome(test: str, what: str) -> str:
    """`test && echo <what>-OK || echo <what>-DENIED`, with the words split by an empty quote: some
    CLIs (Qwen Code) put the command itself in the tool result, which must not count as output."""
    return f"{test} && echo {what}-''OK || echo {what}-''DENIED"


def _relay_probe(engine: str) -> str:
    base = f"http://127.0.0.1:{PROVIDER_PORT}{SERVICE_URL_PATHS.get(engine, '')}"
    args = [base, KEY_HEADERS[engine], KEY_PREFIXES.get(engine, "")]
    return " ".join([SANDBOX_PYTHON, "-c", shlex.quote(_RELAY_PROBE), *map(shlex.quote, args)])


def _probe_command(engine: str, victim, provider_url: str) -> str:
    secrets = [f"{victim.data_dir}/secret_key", f"{victim.run_dir}/uploads/secret.txt"]
    secrets.append(f"{victim.home}/sessions/transcript.jsonl")
    if connection.vendor == "sqlite":
        secrets.append(str(connection.settings_dict["NAME"]))
    steps = [_outcome(f"cat {path} >/dev/null 2>&1", "READ") for path in secrets]
    steps += [
        _outcome(f"touch {victim.data_dir}/pwned 2>/dev/null", "WRITE"),
        _outcome(f"kill -0 {os.getpid()} 2>/dev/null", "SIGNAL"),
        _outcome(f"{http_probe(provider_url + '/')} >/dev/null 2>&1", "NET"),
        _outcome(f"{http_probe(f'http://127.0.0.1:{PROVIDER_PORT}/')} >/dev/null 2>&1", "RELAY"),
        _outcome("unshare -U true 2>/dev/null", "UNSHARE"),
        _outcome(f"{syscall_probe('mount')} >/dev/null 2>&1", "MOUNT"),
        _outcome(f"{syscall_probe('ptrace')} >/dev/null 2>&1", "PTRACE"),
        # The first 24 characters: the whole placeholder in the conversation would have the
        # relay refuse every later call (R-SB8: only in the key header).
        'echo "KEYS=[$OPENAI_API_KEY|$SKILLRUNNER_PROVIDER_API_KEY|$GEMINI_API_KEY|$ANTHROPIC_API_KEY]" | cut -c1-40',
        _relay_probe(engine),
        "printf 'waves fold\\ninto the grey\\nmorning\\n' > artifacts/haiku.md",
    ]
    return "; ".join(steps)


# Local mode (R-UP1) runs every engine in provider network mode, behind the same relay: one CLI
# of each model API there as well.
CASES = [(engine, "provider") for engine in sorted(KEY_HEADERS)] + [
    (engine, "local") for engine in ("claude", "codex", "gemini", "qwen")
]


@pytest.mark.parametrize("engine,mode", CASES)
def test_real_cli_shell_tool_cannot_escape_or_see_the_key(engine, mode, api, victim, settings):
    with ScriptedModelServer() as provider:
        settings.SKILLRUNNER_SANDBOX_NETWORK = "provider"
        settings.SKILLRUNNER_LOCAL_MODE = mode == "local"
        engines = {name: dict(conf) for name, conf in settings.SKILLRUNNER_ENGINES.items()}
        engines[engine].update(
            binary=str(require_engine(engine)),
            base_url=provider.url + SERVICE_URL_PATHS.get(engine, ""),
            api_key=REAL_KEY,
            model=SERVICE_MODELS[engine],
        )
        settings.SKILLRUNNER_ENGINES = engines
        provider.set_script([{"shell": _probe_command(engine, victim, provider.url)}, {"text": json.dumps(HAIKU)}])

        from runs.models import Run
        from worker.execution import run_claimed_turn

        body = {"skill_id": "haiku-writer", "engine": engine, "input": {"topic": "sea"}}
        request_id = api.post("/v1/jobs", body, format="json").json()["request_id"]
        run_claimed_turn(request_id, 1)  # the suite's dispatch holds turns back; run it here
        run = Run.objects.get(pk=request_id)
        logs = api.get(f"/v1/jobs/{request_id}/logs").json()
        assert run.status == "succeeded", (run.error, logs["stderr"][-2000:])

        turns = [r for r in provider.requests if r.step_index is not None]
        output = "\n".join(turns[-1].tool_results)
        assert output.count("READ-DENIED") >= 3, output
        denied = ("WRITE", "SIGNAL", "NET", "UNSHARE", "MOUNT", "PTRACE")
        for escaped in ("READ", *denied):
            assert f"{escaped}-OK" not in output, output
        assert "RELAY-OK" in output, output  # the probe itself works: the way out it may take answers
        assert all(f"{what}-DENIED" in output for what in denied), output
        assert "skillrunner-placeholder-" in output, output
        for secret in (REAL_KEY, VICTIM_SECRET, SERVER_SECRET_KEY):
            assert secret not in output
        assert not (victim.data_dir / "pwned").exists()
        # The provider did get the operator's key, added on the way out of the sandbox, in the
        # one header its API reads, and nothing the relay refused.
        seen = {r.headers.get(KEY_HEADERS[engine], "") for r in turns}
        assert all(REAL_KEY in value for value in seen), seen
        probes = dict(line.split(" ", 2)[1:] for line in output.splitlines() if line.startswith("PROBE "))
        assert probes == EXPECTED_PROBES, output
        assert not [r.path for r in provider.requests if "reflect" in r.path or "files" in r.path]
        assert all(REAL_KEY not in json.dumps([r.path, r.body]) for r in provider.requests)
        # Each refusal is on the run, for its owner and the admin (R-SB8).
        security = api.get(f"/v1/jobs/{request_id}/events/history?after_seq=0").json()["events"]
        reasons = sorted(e["payload"]["reason"] for e in security if e["kind"] == "security")
        # (RELAY: the probe of the way out, without the key: RELAY_KEY_HEADER_INVALID.)
        expected = ["RELAY_KEY_HEADER_INVALID"] + ["RELAY_KEY_OUTSIDE_KEY_HEADER"] * 4 + ["RELAY_ROUTE_NOT_ALLOWED"]
        assert reasons == expected, reasons
        assert run.model_tokens > 0  # the relay counted the legitimate calls
