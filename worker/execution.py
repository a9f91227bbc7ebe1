"""The worker side of a run: claim a turn, drive the engine adapter, hand the outcome to services.

The orchestrator sees only engine-neutral TurnResults; it never parses engine output itself.
"""

from __future__ import annotations

import dataclasses
import functools
import io
import json
import logging
import os
import socket
import tempfile
import time
from pathlib import Path

from django.conf import settings
from django.db import DatabaseError, close_old_connections, connection
from django.utils import timezone

from enginehost.config import configured_secrets
from enginehost.skill_runtime import dependency_environment, run_engine_config, template_body
from engines.base import EngineAdapter
from engines.prompt import PromptTemplateError, first_turn_prompt
from engines.registry import get_adapter
from engines.relay import RelayLedger
from engines.types import (
    ArtifactSpec,
    EngineConfig,
    Interaction,
    ResidentSession,
    SkillMaterial,
    TurnRequest,
    TurnResult,
)
from kernel.logging import redact_stream, redact_values
from processes import wakeups
from processes.forking import Flag
from runs import services
from runs.inputs import resolve_file_inputs
from runs.models import InteractiveProfile, Run, RunStatus
from runs.spend import relay_ledger
from runs.supervision import retry_while_database_away, stale_claim_seconds
from runs.turn_end import end_turn

from .turn_activity import ActivitySink

logger = logging.getLogger(__name__)

CLAIM_POLL_SECONDS = 0.25
# How often a sticky wait looks whether its engine process still lives.
PROCESS_CHECK_SECONDS = 1.0
# Set by `manage.py worker` before the cluster forks, so a stopping worker knows its own claims.
CLUSTER_TOKEN_ENV = "SKILLRUNNER_CLUSTER_TOKEN"

# Shared by a worker with the task process it forks: once set, the cluster is stopping and a
# turn it still takes from the queue stays queued for another worker or the next start (R-LC13),
# so a stop never waits for a turn that began after it, nor for a sticky run's reply (R-OP10).
_stopping: Flag | None = None


def share_stop_flag() -> Flag:
    """Called by the worker before its cluster forks; returns the flag to set when stopping."""
    global _stopping
    _stopping = Flag()
    return _stopping


def worker_id() -> str:
    """host:pid:cluster — the pid tells recovery whether the claimant still lives."""
    token = os.environ.get(CLUSTER_TOKEN_ENV) or "adhoc"
    return f"{socket.gethostname()}:{os.getpid()}:{token}"


# A stream's output up to this size stays in memory until the turn ends, the rest spills to an
# unnamed file in the run's logs folder: a turn prints a few KB, and a file made and removed for
# each stream of each turn cost the worker's kernel an inode each time (issue #43).
RAW_IN_MEMORY_BYTES = 256 * 1024


class RawOutput:
    """A turn's complete engine output, kept as it arrives (R-AC2): the turn result keeps only a
    capped copy. `_save_logs` turns it into the redacted log."""

    def __init__(self, logs: Path) -> None:
        self._logs = logs
        self._files: dict[str, tempfile.SpooledTemporaryFile[bytes]] = {}  # one writer thread per stream

    def write(self, stream: str, chunk: bytes) -> None:
        handle = self._files.get(stream)
        if handle is None:
            self._logs.mkdir(parents=True, exist_ok=True)  # where a long output spills
            handle = self._files[stream] = tempfile.SpooledTemporaryFile(RAW_IN_MEMORY_BYTES, dir=str(self._logs))
        handle.write(chunk)

    def read(self, stream: str) -> tempfile.SpooledTemporaryFile[bytes] | None:
        """The stream's output from its start, once the process ended; None if it printed nothing."""
        handle = self._files.get(stream)
        if handle is not None:
            handle.seek(0)
        return handle

    def close(self) -> None:
        for handle in self._files.values():
            handle.close()


class ClaimControl:
    """TurnControl for a claimed attempt: records the pid, renews the heartbeat, notices cancels,
    turns live activity into events (R-AC1), keeps the raw output (R-AC2) and times the turn (R-AC4)."""

    def __init__(self, request_id, attempt_number: int, worker: str, logs: Path, ledger: RelayLedger | None):
        self.request_id = request_id
        self.attempt_number = attempt_number
        self.worker = worker
        self.ledger = ledger
        # The claim was just taken: a turn shorter than CLAIM_POLL_SECONDS needs no check of it.
        self._last_check = self._last_beat = time.monotonic()
        self._lost = False
        self._unrecorded_pid: int | None = None
        self._started = time.monotonic()
        self.activity = ActivitySink(request_id, attempt_number, worker)
        self.raw = RawOutput(logs)

    @property
    def unrecorded_pid(self) -> int | None:
        """The engine's pid when the database was away from its start to now."""
        return self._unrecorded_pid

    def on_spawn(self, pid: int) -> None:
        try:
            services.record_engine_pid(self.request_id, self.attempt_number, self.worker, pid)
        except DatabaseError:
            # The engine already runs: a database outage must not fail its turn. The pid is
            # recorded at the next claim check that reaches the database.
            connection.close()
            self._unrecorded_pid = pid

    def on_activity(self, item: dict) -> None:
        self.activity.put(item)

    def on_output(self, stream: str, chunk: bytes) -> None:
        self.raw.write(stream, chunk)

    def end_turn(self) -> int:
        """The turn's process is done: write the remaining activity and what its relay counted
        and refused; returns the duration in ms."""
        self.activity.close()
        retry_while_database_away(self._record_relay, False)  # what other runs spent: at the next heartbeat
        return round((time.monotonic() - self._started) * 1000)

    def _record_relay(self, refresh: bool) -> None:
        """The relay's tokens and refusals since the last time, into the run (R-SB8, R-SB9); with
        `refresh`, also when there are none, to learn what the user's other runs spent."""
        if self.ledger is None:
            return
        tokens, refusals = self.ledger.take()
        if not (tokens or refusals or refresh):
            return
        try:
            spent = services.record_relay_activity(self.request_id, self.attempt_number, tokens, refusals)
        except DatabaseError:
            self.ledger.restore(tokens, refusals)
            raise
        if spent is not None:
            self.ledger.set_spent(*spent)

    def should_abort(self) -> bool:
        now = time.monotonic()
        if self._lost or now - self._last_check < CLAIM_POLL_SECONDS:
            return self._lost
        self._last_check = now
        beat = now - self._last_beat >= settings.SKILLRUNNER_HEARTBEAT_SECONDS
        try:
            self._lost = not services.turn_still_ours(self.request_id, self.attempt_number, self.worker, beat=beat)
            self._record_relay(refresh=beat)
            if self._unrecorded_pid is not None and not self._lost:
                services.record_engine_pid(self.request_id, self.attempt_number, self.worker, self._unrecorded_pid)
                self._unrecorded_pid = None
        except DatabaseError:
            connection.close()  # reconnect on the next check
            # Without the database the claim cannot be renewed; once peers would think this
            # worker dead, the turn must stop rather than run on unowned.
            self._lost = now - self._last_beat > stale_claim_seconds()
            return self._lost
        if beat:
            self._last_beat = now
        return self._lost


def _artifact_specs(run: Run) -> tuple[ArtifactSpec, ...]:
    return tuple(
        ArtifactSpec(role=a["role"], filename=a["filename"], required=a["required"], output_property=a.get("property"))
        for a in run.version.artifacts
    )


def build_turn_request(run: Run, ledger: RelayLedger) -> tuple[TurnRequest, dict[str, str] | None]:
    """The turn's request, and the warning to record when the skill's dependencies could not be
    prepared (R-SK7). Raises PromptTemplateError when the skill's prompt template is unusable (R-SK8)."""
    version = run.version
    run_dir = run.run_dir
    adapter = get_adapter(run.engine)
    if run.attempt_number == 1 or not run.session_handle:
        file_inputs = resolve_file_inputs(version.schemas["input"], run.input, run_dir / "uploads")
        prompt = first_turn_prompt(
            skill_id=run.skill_key,
            skill_name=version.name,
            inputs=run.input,
            parameters=run.parameter,
            file_inputs=file_inputs,
            run_dir=run_dir,
            skill_dir=adapter.skill_dir(run_dir, run.skill_key),
            body=template_body(version, run.engine, run.input, run.parameter, file_inputs),
        )
    else:
        prompt = run.next_prompt
    environment, warning = dependency_environment(version)
    request = TurnRequest(
        run_dir=run_dir,
        prompt=prompt,
        mode=run.options.execution_mode,
        skill=SkillMaterial(skill_id=run.skill_key, source_dir=version.path, artifacts=_artifact_specs(run)),
        hard_timeout_seconds=float(run.options.hard_timeout_seconds),
        model=run.model or None,
        session_handle=run.session_handle if run.attempt_number > 1 else None,
        readonly_paths=environment.readonly_paths if environment else (),
        path_prefix=(environment.bin_dir,) if environment else (),
        relay_ledger=ledger,
    )
    return request, warning


def _save_logs(
    records_dir: Path, attempt_number: int, prompt: str, turn: TurnResult, raw: RawOutput, secrets: tuple[str, ...]
) -> list[str]:
    """The turn's prompt and complete output (`raw`, then closed), redacted. Returns the engine's
    logs that held a configured key (R-SB10), as the places to record."""
    logs = records_dir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    found = []
    try:
        for name, text in (("prompt", prompt), ("stdout", turn.stdout), ("stderr", turn.stderr)):
            target = logs / f"attempt-{attempt_number}.{name}.txt"
            # Piece by piece: output of any size, a single line too, never held in memory whole.
            source = raw.read(name) or io.BytesIO((text or "").encode())  # the prompt is never in `raw`
            with open(target, "w", encoding="utf-8") as log:
                keys = redact_stream(source, log, secrets)
            if keys and name != "prompt":  # the prompt is the service's and the user's words, not output
                found.append(f"logs/{target.name}")
    finally:
        raw.close()
    return found


def _without_secrets(turn: TurnResult, secrets: tuple[str, ...]) -> TurnResult:
    """An engine may echo its own API key; nothing it says reaches events, results or bundles with it."""
    if not secrets:
        return turn

    def scrub(value):
        text = json.dumps(value, ensure_ascii=False)
        cleaned = redact_values(text, secrets)
        return value if cleaned == text else json.loads(cleaned)

    interaction = turn.interaction
    if interaction is not None:
        interaction = Interaction(**scrub(dataclasses.asdict(interaction)))
    return dataclasses.replace(
        turn,
        assistant_text=redact_values(turn.assistant_text, secrets),
        final_data=scrub(turn.final_data),
        interaction=interaction,
        failure_message=redact_values(turn.failure_message, secrets),
        warnings=scrub(turn.warnings),
    )


def _finish_turn(
    run: Run, worker: str, prompt: str, turn: TurnResult, control: ClaimControl, resident: ResidentSession | None = None
) -> Run | None:
    """The worker's part of a turn's end: its claim control ended, the logs saved and the answer
    scrubbed of configured keys; runs.turn_end takes the run on. ``resident`` is the process a
    sticky run continues in."""
    duration_ms = control.end_turn()  # activity events come before the turn's outcome
    secrets = configured_secrets()
    logs_with_keys = _save_logs(run.records_dir, run.attempt_number, prompt, turn, control.raw, secrets)
    scrubbed = _without_secrets(turn, secrets)
    can_continue = resident.is_alive() if resident is not None else bool(turn.session_handle or run.session_handle)
    return end_turn(
        run,
        worker,
        scrubbed,
        duration_ms=duration_ms,
        can_continue=can_continue,
        logs_with_keys=logs_with_keys,
        answer_redacted=scrubbed != turn,
        unrecorded_pid=control.unrecorded_pid,
    )


def run_claimed_turn(request_id: str, attempt_number: int) -> None:
    """django-q2 task body: claim the turn, prepare its request, run it on the engine and record
    its outcome (_finish_turn); a sticky run's resident process runs each of its turns so
    (_drive_resident_session). A redelivered or superseded task finds nothing to claim and returns."""
    if _stopping is not None and _stopping.is_set():
        return
    close_old_connections()
    worker = worker_id()
    run = retry_while_database_away(services.claim_turn, request_id, attempt_number, worker, timezone.now())
    if run is None:
        return
    adapter = get_adapter(run.engine)
    config = run_engine_config(run.engine, str(run.pk), run.runtime_options)
    try:
        try:
            request, warning = build_turn_request(run, retry_while_database_away(relay_ledger, run))
        except PromptTemplateError as exc:  # R-SK8: a clear failure, never a half-rendered prompt
            retry_while_database_away(services.fail_run, request_id, "SKILL_PROMPT_INVALID", str(exc))
            return
        if warning:
            retry_while_database_away(services.record_warning, run.pk, warning)
        if run.interactive_profile == InteractiveProfile.STICKY_PROCESS:
            _drive_resident_session(run, adapter, config, request, worker)
        else:
            control = ClaimControl(run.pk, attempt_number, worker, run.records_dir / "logs", request.relay_ledger)
            turn = adapter.run_turn(request, config, control)
            _finish_turn(run, worker, request.prompt, turn, control)
    except Exception as exc:  # an orchestrator bug must still end the run with a cause
        logger.exception("turn %s/%s crashed", request_id, attempt_number)
        retry_while_database_away(
            services.fail_run,
            request_id,
            "ORCHESTRATOR_ERROR",
            f"internal error while running the turn: {type(exc).__name__}",
        )


def _drive_resident_session(
    run: Run, adapter: EngineAdapter, config: EngineConfig, request: TurnRequest, worker: str
) -> None:
    """sticky_process (R-LC7): one resident engine process answers every turn of the run, its
    replies and repair rounds in both modes, each turn finished as a resumable run's is."""
    logs, ledger = run.records_dir / "logs", request.relay_ledger  # one relay for all the process's turns
    control = ClaimControl(run.pk, run.attempt_number, worker, logs, ledger)  # records the pid
    session = adapter.open_resident_session(request, config, control)
    prompt = request.prompt
    try:
        while True:
            turn = session.send(prompt, control, request.hard_timeout_seconds)
            updated = _finish_turn(run, worker, prompt, turn, control, resident=session)
            if updated is None or updated.status not in (RunStatus.RUNNING, RunStatus.WAITING_USER):
                return
            if updated.status == RunStatus.WAITING_USER:
                resumed = _await_sticky_reply(updated, worker, session)
                if resumed is None:
                    return
                run = resumed
            else:
                run = updated  # a repair round (R-RP1): the same process gets the repair prompt
            prompt = run.next_prompt
            control = ClaimControl(run.pk, run.attempt_number, worker, logs, ledger)
    finally:
        session.close()


def _await_sticky_reply(run: Run, worker: str, session: ResidentSession) -> Run | None:
    """Hold the resident process while the run waits; return the run once a reply resumed it.

    The run is read when a change to it wakes the wait (services.lifecycle) and at each
    heartbeat; in between only the process is looked at, which costs no query."""
    with wakeups.Listener(services.sticky_wait_name(run.pk)) as listener:
        read = True  # once listening: a reply committed before that is not missed
        last_beat = time.monotonic()
        while True:
            beat = time.monotonic() - last_beat >= settings.SKILLRUNNER_HEARTBEAT_SECONDS
            if read or beat:
                state = retry_while_database_away(
                    functools.partial(services.sticky_wait_state, beat=beat), run.pk, run.attempt_number, worker
                )
                if state is services.StickyWait.LOST:
                    return None
                if state is services.StickyWait.RESUMED:
                    return Run.objects.select_related("skill", "skill_version").get(pk=run.pk)
                if beat:
                    last_beat = time.monotonic()
            if _stopping is not None and _stopping.is_set():
                # The worker stops (R-OP10): its turns end, and the resident process cannot outlive
                # it. The run keeps waiting until the worker releases its claims, which fails it
                # as R-LC13 fails a sticky run whose process is gone (INTERACTION_PROCESS_LOST).
                return None
            if not session.is_alive():
                retry_while_database_away(
                    services.fail_run,
                    run.pk,
                    "INTERACTION_PROCESS_LOST",
                    "the engine process ended while waiting for a reply",
                )
                return None
            read = listener.wait(timeout=PROCESS_CHECK_SECONDS)
