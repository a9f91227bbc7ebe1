"""Creating runs (R-AD1–R-AD5): admission checks, the result cache, and input uploads."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from typing import IO, Any, BinaryIO, NamedTuple

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from enginehost.skill_runtime import ENGINE_DEFAULTS_KEY, skill_engine_defaults
from engines.registry import ENGINE_NAMES, get_adapter
from engines.skill_config import deep_merge
from skillrunner.archives import ArchiveError, extract_zip
from skillrunner.errors import ApplicationError, Conflict, NotFound, OverUserLimit
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
from ..models import Run, RunStatus
from ..options import DEFAULT_EFFORT, EffectiveOptions, resolve_options
from ..spend import budget_left_at_admission
from .dispatching import ready_queue_length, run_became_ready
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
        _check_engine_choice(engine, provider_id, effort)
    elif skill_id is None:  # with a skill, its engines say why (SKILL_ENGINE_UNSUPPORTED)
        raise ApplicationError("ENGINE_UNKNOWN", f"unknown engine {engine!r}; known: {', '.join(ENGINE_NAMES)}")
    requested = {"runtime_options": runtime_options, "effort": effort or ""}
    if skill_id is None:
        options, _ = resolve_options(runtime_options, {})  # refused now if bad; warned of with the skill
        if callback_url:
            hooks.checking_callback.send(sender=Run, url=callback_url)
        _check_queue_room(owner)
        _check_budget(owner)
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
    if callback_url:
        hooks.checking_callback.send(sender=Run, url=callback_url)  # R-NT2, before anything is created
    _check_queue_room(owner)
    _check_budget(owner)

    input_schema = version.schemas["input"]
    awaiting_upload = bool(required_file_fields(input_schema)) or (expects_upload and bool(file_fields(input_schema)))
    # A run with uploads gets its key once the files are there (attach_upload).
    cacheable = is_cacheable(admitted.options.as_dict()) and not awaiting_upload
    key = cache_key(version, engine, model, input, parameter, admitted.options.as_dict()) if cacheable else ""
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
    return _save_new_run(run, callback_url=callback_url, cached_from=cached_run(owner, key) if key else None)


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
    (run.run_dir / "uploads").mkdir(parents=True, exist_ok=True)
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


def _check_engine_choice(engine: str, provider_id: str | None, effort: str | None) -> None:
    """The engine serves the provider asked for and knows the effort asked for (R-UP4)."""
    adapter = get_adapter(engine)
    if provider_id and provider_id != adapter.provider_id:
        raise ApplicationError(
            "PROVIDER_UNSUPPORTED",
            f"engine {engine} runs models of provider {adapter.provider_id!r}, not {provider_id!r}",
            provider_id=adapter.provider_id,
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
    """The checks that need the skill, and the options its defaults and the request make."""
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
    validate_request_payload(version.schemas, input, parameter)
    return Admitted(options, effective_options, option_warnings)


def attach_skill_package(
    run: Run, package_source: BinaryIO | IO[bytes], inputs: BinaryIO | IO[bytes] | None
) -> list[str]:
    """The skill of a run created without one (R-UP4), validated exactly like an install, as a
    snapshot for this run only; then its input files, if sent. The run is admitted as create_run
    would have with an installed skill; anything refused leaves the run waiting as it was."""
    if run.skill_version_id is not None or run.status != RunStatus.QUEUED:
        raise Conflict("SKILL_PACKAGE_NOT_EXPECTED", "this run's skill is already there")
    version: SkillVersion | None = None
    with zipped_package(package_source) as package:
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
                run.awaiting_upload = bool(required_file_fields(version.schemas["input"])) or inputs is not None
                run.save()
                for warning in admitted.warnings:
                    append_event(run, "warning", warning)
                if not run.awaiting_upload:
                    run_became_ready(run)
        except BaseException:
            if version is not None:
                remove_snapshot(version)
            raise
    if inputs is None:
        return []
    try:
        return attach_upload(run, inputs)
    except BaseException:
        _detach_skill_package(run.pk, version)
        raise


def _detach_skill_package(request_id, version: SkillVersion) -> None:
    """Undo attach_skill_package when the inputs sent with the package were refused: the run
    waits for both again, as if neither had come."""
    with transaction.atomic():
        run = locked(request_id)
        run.skill, run.skill_version = None, None
        run.awaiting_upload = True
        run.save(update_fields=["skill", "skill_version", "awaiting_upload", "updated_at"])
        skill = version.skill
        version.delete()
        skill.delete()
    remove_snapshot(version)


def _check_budget(owner) -> None:
    """429 BUDGET_EXCEEDED when the owner's tokens for the day are spent (R-SB9)."""
    spent = budget_left_at_admission(owner.pk)
    if spent is not None:
        raise ApplicationError(spent.code, f"{spent.message}; try again tomorrow", status_code=429, **spent.details())


def _check_queue_room(owner) -> None:
    """429 QUEUE_FULL when the queue, or this owner's share of it, is full (R-FS1). Runs waiting
    for their upload count toward their owner's share only; they expire (UPLOAD_TIMEOUT). Neither
    count reads the backlog (R-SC1): the owner's from an index holding their queued runs alone,
    the queue's from the owners' places."""
    if Run.objects.filter(owner=owner, status=RunStatus.QUEUED).count() >= settings.SKILLRUNNER_USER_MAX_QUEUED:
        held = f"{settings.SKILLRUNNER_USER_MAX_QUEUED} queued runs"
        raise OverUserLimit("QUEUE_FULL", held, "try again when some have started", scope="user")
    if ready_queue_length() >= settings.SKILLRUNNER_MAX_QUEUED_RUNS:
        raise ApplicationError("QUEUE_FULL", "the run queue is full; try again later", status_code=429, scope="all")


def _complete_from_cache(run: Run, source: Run, result: dict[str, Any], *, new: bool) -> None:
    """A run that never executes: succeeded with the earlier run's result, its artifacts already
    copied into it by cache.copy_cached_result. A new run is born so; one whose upload just came
    leaves the queue so."""
    run.cache_hit = True
    run.session_handle = ""
    run.started_at = timezone.now()  # it starts and ends at once
    transition(run, RunStatus.SUCCEEDED, new=new, result=result, cache_hit=True, cached_from=str(source.pk))


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
        raise ApplicationError(
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
    with transaction.atomic():
        run = locked(request_id)
        if run.status != RunStatus.QUEUED or not run.awaiting_upload:
            return False
        end_without_output(run, RunStatus.FAILED, "UPLOAD_TIMEOUT", "the run's input files were not uploaded in time")
    return True
