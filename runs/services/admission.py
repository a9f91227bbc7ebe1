"""Creating runs (R-AD1–R-AD5): admission checks, the result cache, and input uploads."""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Iterator
from functools import cache
from typing import IO, Any, BinaryIO, NamedTuple

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from accounts.models import SpendLimit
from enginehost.choice import catalogued_models
from enginehost.skill_runtime import ENGINE_DEFAULTS_KEY, skill_engine_defaults
from engines.registry import ENGINE_NAMES, get_adapter
from engines.skill_config import deep_merge
from kernel.archives import ArchiveError, extract_zip
from kernel.errors import ApplicationError, Conflict, NotFound, OverUserLimit
from skills.models import SkillVersion
from skills.selectors import current_version
from skills.services import archive_limits, remove_snapshot, temporary_version, zipped_package

from .. import hooks, runfiles
from ..cache import cache_key, cached_run, copy_cached_result, is_cacheable, uploads_digest
from ..events import append_event
from ..inputs import (
    file_fields,
    missing_required_files,
    required_file_fields,
    validate_request_payload,
    zipped_files,
)
from ..models import OwnerQueue, Run, RunStatus, TokenSpend
from ..options import DEFAULT_EFFORT, EffectiveOptions, resolve_options
from ..spend import budget_exceeded
from .dispatching import run_became_ready
from .lifecycle import cancel_run, end_without_output, locked, transition


def create_run(
    *,
    owner,
    skill_id: str | None,
    engine: str,
    model: str | None,
    input: Any,
    parameter: Any,
    runtime_options: Any,
    expects_upload: bool = False,
    callback_url: str | None = None,
    provider_id: str | None = None,
    effort: str | None = None,
) -> Run:
    """Admission (R-AD1–R-AD5) in upstream's order; nothing is created unless every check passes.

    A run waits for an upload when the skill has required file inputs, or when the caller says
    it will send optional ones (`expects_upload`, used by the browser form). Without a `skill_id`
    the skill itself comes with the upload (R-UP4): the run waits for it, and what depends on the
    skill is decided when it arrives (attach_skill_package).
    """
    if engine in ENGINE_NAMES:
        model, effort = _model_and_effort(engine, model, effort)
        _check_engine_choice(engine, provider_id, model, effort)
    elif skill_id is None:  # with a skill, its engines say why (SKILL_ENGINE_UNSUPPORTED)
        raise ApplicationError("ENGINE_UNKNOWN", f"unknown engine {engine!r}; known: {', '.join(ENGINE_NAMES)}")
    requested = {"runtime_options": runtime_options, "effort": effort or ""}
    if skill_id is None:
        options, _ = resolve_options(runtime_options, {})  # refused now if bad; warned of with the skill
        if callback_url:
            hooks.checking_callback.send(sender=Run, url=callback_url)
        _check_admission(owner, key="")
        run = Run(
            owner=owner,
            engine=engine,
            model=model or "",
            execution_mode=options.execution_mode,
            interactive_profile=get_adapter(engine).interactive_profile,
            input=input,
            parameter=parameter,
            runtime_options=options.as_dict(),
            admission_request=requested,
            awaiting_upload=True,
        )
        return _save_new_run(run, callback_url=callback_url)

    version = current_version(skill_id)
    if version is None:
        raise NotFound("SKILL_NOT_FOUND", f"no installed skill {skill_id!r}")
    admitted = _admit(version, engine, input, parameter, requested)
    validate_request_payload(version.schemas, input, parameter)
    if callback_url:
        hooks.checking_callback.send(sender=Run, url=callback_url)  # R-NT2, before anything is created
    input_schema = version.schemas["input"]
    awaiting_upload = bool(required_file_fields(input_schema)) or (expects_upload and bool(file_fields(input_schema)))
    # A run with uploads gets its key once the files are there (attach_upload).
    cacheable = is_cacheable(admitted.options.as_dict()) and not awaiting_upload
    key = cache_key(version, engine, model, input, parameter, admitted.options.as_dict()) if cacheable else ""
    reusable = _check_admission(owner, key=key)
    run = Run(
        owner=owner,
        skill_id=version.skill_id,
        skill_version=version,
        engine=engine,
        model=model or "",
        execution_mode=admitted.options.execution_mode,
        interactive_profile=get_adapter(engine).interactive_profile,
        input=input,
        parameter=parameter,
        runtime_options=admitted.effective_options,
        warnings=admitted.warnings,
        awaiting_upload=awaiting_upload,
        cache_key=key,
    )
    cached_from = Run.objects.filter(pk=reusable).first() if reusable else None
    return _save_new_run(run, callback_url=callback_url, cached_from=cached_from)


def create_run_with_files(*, files: BinaryIO | IO[bytes] | None, **create: Any) -> Run:
    """create_run, then its input files as a zip (None: it has none to send). A run whose files
    are refused is canceled rather than left waiting for files that will never come."""
    run = create_run(expects_upload=files is not None, **create)
    if run.awaiting_upload:
        try:
            attach_upload(run, files if files is not None else zipped_files([]))
        except ApplicationError:
            cancel_run(run)
            raise
    return run


def rerun(run: Run, *, owner, allow_cache: bool) -> Run:
    """A new run of `run`'s skill (its current version) with the same engine, model, input,
    parameter, options and input files, owned by `owner`; fresh unless `allow_cache` lets an
    identical earlier result stand in (R-OP9)."""
    skill = run.skill
    if skill is None or skill.temporary:
        raise ApplicationError(
            "RUN_NOT_RERUNNABLE", "this run's skill came with its upload, for that run only: it cannot run again"
        )
    if run.files_removed_at is not None and file_fields(run.version.schemas["input"]):
        raise ApplicationError("RUN_FILES_REMOVED", f"the input files of run {run.pk} were removed", status_code=410)
    uploads = runfiles.list_files(run.run_dir, "uploads")
    return create_run_with_files(
        owner=owner,
        skill_id=skill.skill_id,
        engine=run.engine,
        model=run.model or None,
        input=run.input,
        parameter=run.parameter,
        runtime_options={**run.options.as_dict(), "no_cache": not allow_cache},
        files=zipped_files(_opened(run, uploads)) if uploads else None,
    )


def _opened(run: Run, paths: list[str]) -> Iterator[tuple[str, IO[bytes]]]:
    """`run`'s uploaded files by their names in the upload, each open while it is read."""
    for path in paths:
        handle = runfiles.open_file(run.run_dir, path)
        if handle is not None:
            with handle:
                yield path.removeprefix("uploads/"), handle


def _save_new_run(run: Run, *, callback_url: str | None, cached_from: Run | None = None) -> Run:
    # The folder exists before the run does: a worker may claim the run as soon as it commits.
    # Its uploads/ comes with its files (attach_upload), and a run without any has none.
    run.run_dir.mkdir(parents=True, exist_ok=True)
    try:
        # Copying cached artifacts may take long: never inside the transaction (R-FS2).
        cached_result = copy_cached_result(cached_from, run.run_dir) if cached_from else None
        with transaction.atomic():
            if cached_from is not None and cached_result is not None:
                _complete_from_cache(run, cached_from, cached_result, new=True)
            else:
                transition(run, RunStatus.QUEUED, new=True)
            if callback_url:
                answers = hooks.callback_requested.send(sender=Run, run=run, url=callback_url)
                run.callback_secret = next((secret for _, secret in answers if secret), "")
            for warning in run.warnings:
                append_event(run, "warning", warning)
    except BaseException:
        shutil.rmtree(run.run_dir, ignore_errors=True)  # no folder without its run
        raise
    return run


def _model_and_effort(engine: str, model: str | None, effort: str | None) -> tuple[str | None, str | None]:
    """`model@effort` as two, for an engine that has efforts (R-UP9); an effort of its own wins."""
    if not model or "@" not in model or not get_adapter(engine).efforts:
        return model, effort
    name, _, suffix = model.rpartition("@")
    if not effort or effort == DEFAULT_EFFORT:
        effort = suffix.strip().lower()
    return name, effort


def _check_engine_choice(engine: str, provider_id: str | None, model: str | None, effort: str | None) -> None:
    """The engine serves the provider asked for, lists the model (R-UP9) and knows the effort
    asked for (R-UP4)."""
    adapter = get_adapter(engine)
    if provider_id and provider_id != adapter.provider_id:
        raise ApplicationError(
            "PROVIDER_UNSUPPORTED",
            f"engine {engine} runs models of provider {adapter.provider_id!r}, not {provider_id!r}",
            provider_id=adapter.provider_id,
        )
    if model and not settings.SKILLRUNNER_ALLOW_ANY_MODEL:
        catalogue = catalogued_models(engine)
        if model not in catalogue:
            raise ApplicationError(
                "MODEL_UNSUPPORTED",
                f"engine {engine} has no model {model!r} in its catalogue; it lists: {', '.join(catalogue)}",
                model=model,
                allowed_models=catalogue,
            )
    if effort and effort != DEFAULT_EFFORT and effort not in adapter.efforts:
        supported = ", ".join(adapter.efforts) or f"none (only {DEFAULT_EFFORT!r})"
        raise ApplicationError(
            "EFFORT_UNSUPPORTED", f"engine {engine} does not take reasoning effort {effort!r}; it takes: {supported}"
        )


class Admitted(NamedTuple):
    options: EffectiveOptions
    effective_options: dict[str, Any]  # as the run keeps them, with the engine settings
    warnings: list[dict[str, str]]


def _admit(version: SkillVersion, engine: str, input: Any, parameter: Any, requested: dict[str, Any]) -> Admitted:
    """The checks that need the skill (but its schemas'), and the options its defaults and the
    request make."""
    if engine not in version.effective_engines:
        raise ApplicationError(
            "SKILL_ENGINE_UNSUPPORTED",
            f"skill {version.skill.skill_id} does not run on engine {engine!r}; it supports {', '.join(version.effective_engines)}",
            declared_engines=version.engines,
            unsupported_engines=version.unsupported_engines,
            effective_engines=version.effective_engines,
            requested_engine=engine,
        )
    options, option_warnings = resolve_options(requested["runtime_options"], version.runtime_defaults)
    effective_options = options.as_dict()
    engine_defaults = skill_engine_defaults(version, engine)  # R-SK9, kept with the run's options
    engine_settings = engine_defaults.settings
    effort = requested.get("effort")
    if effort and effort != DEFAULT_EFFORT:  # the request's effort over the skill's (R-UP4)
        engine_settings = deep_merge(engine_settings, get_adapter(engine).effort_settings(effort))
    if engine_defaults.source or engine_settings:
        effective_options[ENGINE_DEFAULTS_KEY] = {"source": engine_defaults.source, "settings": engine_settings}
    option_warnings += engine_defaults.warnings
    if options.execution_mode not in version.execution_modes:
        raise ApplicationError(
            "SKILL_EXECUTION_MODE_UNSUPPORTED",
            f"skill {version.skill.skill_id} does not support execution_mode {options.execution_mode!r}",
            declared_execution_modes=version.execution_modes,
            requested_execution_mode=options.execution_mode,
        )
    return Admitted(options, effective_options, option_warnings)


def receive_upload(run: Run, *, package: BinaryIO | IO[bytes] | None, files: BinaryIO | IO[bytes] | None) -> list[str]:
    """POST /v1/jobs/{id}/upload: the skill of a run created without one (R-UP4) and/or its
    input files. Inputs that fail checks only their arrival allows (the schemas of a skill that
    came with them, required files) are taken, and the run ends failed with the check's code at
    once (R-UP8); an upload refused for anything else is answered with its error, and the run it
    was for ends failed the same way: no refused upload leaves a run waiting for its timeout."""
    try:
        if run.skill_version_id is None and run.status == RunStatus.QUEUED:
            if package is None:
                raise ApplicationError(
                    "SKILL_PACKAGE_MISSING",
                    "this run brings its own skill: send its zip as multipart field `skill_package`",
                )
            run = attach_skill_package(run, package, expects_files=files is not None)
            if files is None or run.is_terminal:
                return []
        elif package is not None:
            raise Conflict("SKILL_PACKAGE_NOT_EXPECTED", "this run's skill is already there")
        elif files is None:
            raise ApplicationError("UPLOAD_FILE_MISSING", "send the zip as multipart field `file`")
        return attach_upload(run, files)
    except InputFilesMissing as missing:
        fail_awaiting_upload(run.pk, missing.code, missing.message)
        return []
    except ApplicationError as refused:
        fail_awaiting_upload(run.pk, refused.code, refused.message)
        raise


def attach_skill_package(run: Run, package_source: BinaryIO | IO[bytes], *, expects_files: bool) -> Run:
    """The skill of a run created without one (R-UP4), validated exactly like an install but for
    its version, which a package for one run need not have; a snapshot for this run only. The run
    is admitted as create_run would have with an installed skill, except that an input or
    parameter its schemas refuse ends the run failed at once (R-UP8): only now could it be
    checked. The run then waits for its files if the skill requires some or `expects_files`."""
    if run.skill_version_id is not None or run.status != RunStatus.QUEUED:
        raise Conflict("SKILL_PACKAGE_NOT_EXPECTED", "this run's skill is already there")
    version: SkillVersion | None = None
    with zipped_package(package_source, versioned=False) as package:
        try:
            with transaction.atomic():
                run = locked(run.pk)
                if run.skill_version_id is not None or run.status != RunStatus.QUEUED:
                    raise Conflict("SKILL_PACKAGE_NOT_EXPECTED", "this run's skill is already there")
                version = temporary_version(package, user=run.owner)
                admitted = _admit(version, run.engine, run.input, run.parameter, run.admission_request)
                run.skill_id, run.skill_version = version.skill_id, version
                run.execution_mode = admitted.options.execution_mode
                run.runtime_options = admitted.effective_options
                run.warnings = [*run.warnings, *admitted.warnings]
                run.awaiting_upload = bool(required_file_fields(version.schemas["input"])) or expects_files
                run.save()
                for warning in admitted.warnings:
                    append_event(run, "warning", warning)
                try:
                    validate_request_payload(version.schemas, run.input, run.parameter)
                except ApplicationError as refused:
                    end_without_output(run, RunStatus.FAILED, refused.code, refused.message)
                else:
                    if not run.awaiting_upload:
                        run_became_ready(run)
        except BaseException:
            if version is not None:
                remove_snapshot(version)
            raise
    return run


class AdmissionRead(NamedTuple):
    owner_queued: int  # the owner's queued runs, those waiting for their upload too
    queue_length: int | None  # runs ready to dispatch, every owner's (None: none)
    own_daily_limit: int | None
    spent_today: int | None
    reusable: uuid.UUID | None  # the earlier run whose result this one may reuse (R-OP9)


def _check_admission(owner, *, key: str) -> uuid.UUID | None:
    """The queue caps and the owner's daily budget checked, and the earlier run a run with cache
    key `key` may reuse ("" for none) found, from one statement of bounded reads. Neither count
    reads the backlog (R-SC1): the owner's from an index holding their queued runs alone, the
    queue's from the owners' places."""
    with connection.cursor() as cursor:
        cursor.execute(_admission_sql(), _admission_params(owner.pk, key))
        read = AdmissionRead(*cursor.fetchone())
    if read.reusable is not None:
        read = read._replace(reusable=uuid.UUID(str(read.reusable)))  # SQLite keeps it as hex
    _check_queue_room(read)
    _check_budget(read)
    return read.reusable


@cache
def _admission_sql() -> str:
    """_check_admission's statement, written out: Django compiled it from querysets in about ten
    times what the database takes to run it. One column per AdmissionRead field."""
    runs, places, limits, spent = (
        connection.ops.quote_name(model._meta.db_table) for model in (Run, OwnerQueue, SpendLimit, TokenSpend)
    )
    return (
        f"SELECT (SELECT COUNT(*) FROM {runs} WHERE owner_id = %s AND status = %s),"
        f" (SELECT SUM(ready_count) FROM {places} WHERE oldest_ready_at IS NOT NULL),"
        f" (SELECT max_tokens_per_day FROM {limits} WHERE user_id = %s),"
        f" (SELECT tokens FROM {spent} WHERE owner_id = %s AND day = %s),"
        f" (SELECT request_id FROM {runs} WHERE owner_id = %s AND cache_key = %s AND status = %s"
        "   AND files_removed_at IS NULL ORDER BY finished_at DESC LIMIT 1)"
    )


def _admission_params(owner_id: int, key: str) -> list[Any]:
    today = TokenSpend._meta.get_field("day").get_db_prep_value(timezone.localdate(), connection)
    # Without a key nothing is looked up: `cache_key = NULL` holds for no run.
    reusable = [owner_id, key or None, RunStatus.SUCCEEDED.value]
    return [owner_id, RunStatus.QUEUED.value, owner_id, owner_id, today, *reusable]


def _check_budget(read: AdmissionRead) -> None:
    """429 BUDGET_EXCEEDED when the owner's tokens for the day are spent (R-SB9)."""
    spent = budget_exceeded(read.own_daily_limit, read.spent_today)
    if spent is not None:
        raise ApplicationError(spent.code, f"{spent.message}; try again tomorrow", status_code=429, **spent.details())


def _check_queue_room(read: AdmissionRead) -> None:
    """429 QUEUE_FULL when the queue, or this owner's share of it, is full (R-FS1). Runs waiting
    for their upload count toward their owner's share only; they expire (UPLOAD_TIMEOUT)."""
    if read.owner_queued >= settings.SKILLRUNNER_USER_MAX_QUEUED:
        held = f"{settings.SKILLRUNNER_USER_MAX_QUEUED} queued runs"
        raise OverUserLimit("QUEUE_FULL", held, "try again when some have started", scope="user")
    if (read.queue_length or 0) >= settings.SKILLRUNNER_MAX_QUEUED_RUNS:
        raise ApplicationError("QUEUE_FULL", "the run queue is full; try again later", status_code=429, scope="all")


def _complete_from_cache(run: Run, source: Run, result: dict[str, Any], *, new: bool) -> None:
    """A run that never executes: succeeded with the earlier run's result, its artifacts already
    copied into it by cache.copy_cached_result. A new run is born so; one whose upload just came
    leaves the queue so."""
    run.cache_hit = True
    run.session_handle = ""
    run.started_at = timezone.now()  # it starts and ends at once
    transition(run, RunStatus.SUCCEEDED, new=new, result=result, cache_hit=True, cached_from=str(source.pk))


class InputFilesMissing(ApplicationError):
    """An upload without a file the skill requires: known only once the upload is there."""


def attach_upload(run: Run, source: BinaryIO | IO[bytes]) -> list[str]:
    """Input files for a run that waits for them (R-AD5); the run is dispatched once all are there."""
    if not run.awaiting_upload or run.status != RunStatus.QUEUED:
        raise Conflict("UPLOAD_NOT_EXPECTED", "this run does not wait for an upload")
    if run.skill_version_id is None:
        raise ApplicationError("SKILL_PACKAGE_MISSING", "this run's skill package must come first (or with the files)")
    uploads = run.run_dir / "uploads"
    staging = run.run_dir / ".uploads-staging"
    shutil.rmtree(staging, ignore_errors=True)
    try:
        extracted = extract_zip(source, staging, archive_limits())
    except ArchiveError:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    missing = missing_required_files(run.version.schemas["input"], run.input, staging)
    if missing:
        shutil.rmtree(staging, ignore_errors=True)
        raise InputFilesMissing(
            "INPUT_FILE_MISSING", f"the upload lacks required input files: {', '.join(missing)}", missing=missing
        )
    shutil.rmtree(uploads, ignore_errors=True)
    staging.rename(uploads)
    key, cached, cached_result = "", None, None
    if is_cacheable(run.runtime_options):  # the key covers the uploaded files by content (R-OP9)
        key = cache_key(
            run.version,
            run.engine,
            run.model,
            run.input,
            run.parameter,
            run.runtime_options,
            uploads_digest(run.run_dir),
        )
        cached = cached_run(run.owner, key)
        cached_result = copy_cached_result(cached, run.run_dir) if cached else None  # outside the transaction
    with transaction.atomic():
        run = locked(run.pk)
        if not run.awaiting_upload or run.status != RunStatus.QUEUED:
            raise Conflict("UPLOAD_NOT_EXPECTED", "this run does not wait for an upload")
        run.awaiting_upload = False
        run.cache_key = key
        run.save(update_fields=["awaiting_upload", "cache_key", "updated_at"])
        append_event(run, "input_uploaded", {"files": sorted(extracted)})
        if cached is not None and cached_result is not None:
            _complete_from_cache(run, cached, cached_result, new=False)
        else:
            run_became_ready(run)
    return extracted


def expire_upload(request_id) -> bool:
    """R-FS1: a run still waiting for its upload fails with UPLOAD_TIMEOUT; False when the upload
    came (or the run ended) meanwhile."""
    return fail_awaiting_upload(request_id, "UPLOAD_TIMEOUT", "the run's input files were not uploaded in time")


def fail_awaiting_upload(request_id, code: str, message: str) -> bool:
    """A run still waiting for its upload ends failed with `code`; False when it waits no more."""
    with transaction.atomic():
        run = locked(request_id)
        if run.status != RunStatus.QUEUED or not run.awaiting_upload:
            return False
        end_without_output(run, RunStatus.FAILED, code, message)
    return True
