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

import pytest
from django.db import connection

from engines.sandbox import PROVIDER_PORT
from tests.real_engines.conftest import require_engine
from tests.support.engine_env import SERVICE_MODELS, SERVICE_URL_PATHS
from tests.support.scripted_model_server import ScriptedModelServer

from .conftest import SERVER_SECRET_KEY, VICTIM_SECRET, http_probe, syscall_probe

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
HAIKU = {"topic": "sea", "haiku": ["waves fold", "into the grey", "morning"], "haiku_file": "artifacts/haiku.md"}


def _outcome(test: str, what: str) -> str:
    """`test && echo <what>-OK || echo <what>-DENIED`, with the words split by an empty quote: some
    CLIs (Qwen Code) put the command itself in the tool result, which must not count as output."""
    return f"{test} && echo {what}-''OK || echo {what}-''DENIED"


def _probe_command(victim, provider_url: str) -> str:
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
        'echo "KEYS=[$OPENAI_API_KEY|$SKILLRUNNER_PROVIDER_API_KEY|$GEMINI_API_KEY|$ANTHROPIC_API_KEY]"',
        "printf 'waves fold\\ninto the grey\\nmorning\\n' > artifacts/haiku.md",
    ]
    return "; ".join(steps)


@pytest.mark.parametrize("engine", sorted(KEY_HEADERS))
def test_real_cli_shell_tool_cannot_escape_or_see_the_key(engine, api, victim, settings):
    with ScriptedModelServer() as provider:
        settings.SKILLRUNNER_SANDBOX_NETWORK = "provider"
        engines = {name: dict(conf) for name, conf in settings.SKILLRUNNER_ENGINES.items()}
        engines[engine].update(
            binary=str(require_engine(engine)),
            base_url=provider.url + SERVICE_URL_PATHS.get(engine, ""),
            api_key=REAL_KEY,
            model=SERVICE_MODELS[engine],
        )
        settings.SKILLRUNNER_ENGINES = engines
        provider.set_script([{"shell": _probe_command(victim, provider.url)}, {"text": json.dumps(HAIKU)}])

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
        # The provider did get the operator's key, added on the way out of the sandbox.
        seen = {r.headers.get(KEY_HEADERS[engine], "") for r in turns}
        assert all(REAL_KEY in value for value in seen), seen
