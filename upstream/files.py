"""What upstream's observe page reads of a run's files (R-UP10): the file tree, a file's preview,
a byte window of a log and the bundle with logs, in upstream's shapes. Every read of the run's
folder goes through runs.runfiles: no link is followed and nothing outside the run is reached."""

from __future__ import annotations

import codecs
from collections.abc import Iterable
from typing import Any

from django.conf import settings
from django.http import FileResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from enginehost.config import configured_secrets
from kernel.errors import ApplicationError, NotFound
from runs import api as jobs
from runs import runfiles, selectors
from runs.bundles import bundle_path
from runs.output_keys import served_file
from runs.services import record_keys_in_output

# A preview shows at most this much of a file; a larger one is "too_large", as upstream's.
PREVIEW_MAX_BYTES = 256 * 1024
# The log streams upstream's clients name: `pty` is a terminal's copy, which no turn here has.
LOG_RANGE_STREAMS = ("stdout", "stderr", "pty")


def tree_entries(paths: Iterable[str]) -> list[dict[str, Any]]:
    """Files (sorted run-relative paths) as upstream's tree: each folder before what it holds,
    folders before files at each level, with its depth."""
    tree: dict[str, Any] = {}
    for path in paths:
        node = tree
        *folders, name = path.split("/")
        for folder in folders:
            node = node.setdefault(folder + "/", {})
        node[name] = None
    entries: list[dict[str, Any]] = []

    def walk(node: dict[str, Any], prefix: str, depth: int) -> None:
        for key in sorted(node, key=lambda key: (not key.endswith("/"), key.lower())):
            is_dir = key.endswith("/")
            name = key.rstrip("/")
            entries.append({"path": prefix + name, "name": name, "is_dir": is_dir, "depth": depth})
            if is_dir:
                walk(node[key], f"{prefix}{name}/", depth + 1)

    walk(tree, "", 0)
    return entries


def preview(handle, path: str) -> dict[str, Any]:
    """Upstream's preview of a file: its text (`mode: text`), or `binary` / `too_large`."""
    head = handle.read(PREVIEW_MAX_BYTES + 1)
    size = len(head)
    if size > PREVIEW_MAX_BYTES:
        return {"mode": "too_large", "content": None, "size": size, "meta": f"more than {PREVIEW_MAX_BYTES} bytes"}
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    if text is None or "\x00" in text:
        return {"mode": "binary", "content": None, "size": size, "meta": f"{size} bytes, binary"}
    suffix = path.rsplit(".", 1)[-1].lower() if "." in path.rsplit("/", 1)[-1] else ""
    return {
        "mode": "text",
        "content": text,
        "size": size,
        "meta": f"{size} bytes, utf-8",
        "detected_format": {"json": "json", "md": "markdown", "jsonl": "jsonl"}.get(suffix, "text"),
    }


def _byte_offset(query, name: str) -> int:
    raw = query.get(name, "0")
    if not (raw.isascii() and raw.isdigit() and len(raw) <= 15):
        raise ApplicationError("INVALID_RANGE", f"{name} must be a non-negative integer")
    return int(raw)


def log_range(run, query) -> dict[str, Any]:
    """Upstream's `/logs/range`: bytes [byte_from, byte_to) of one attempt's log (the latest by
    default), clipped to the log and to SKILLRUNNER_LOG_TEXT_MAX_BYTES."""
    stream = query.get("stream")
    if stream not in LOG_RANGE_STREAMS:
        raise ApplicationError("INVALID_LOG_STREAM", f"stream must be one of {', '.join(LOG_RANGE_STREAMS)}")
    start, end = _byte_offset(query, "byte_from"), _byte_offset(query, "byte_to")
    if 0 < end < start:
        raise ApplicationError("INVALID_RANGE", "byte_to must be at least byte_from")
    sizes = selectors.log_sizes(run)
    raw_attempt = query.get("attempt")
    if raw_attempt is None:
        attempt = max(sizes, default=None)
    elif raw_attempt.isascii() and raw_attempt.isdigit() and len(raw_attempt) <= 9 and int(raw_attempt) > 0:
        attempt = int(raw_attempt)
    else:
        raise ApplicationError("INVALID_ATTEMPT", "attempt must be a positive integer")
    empty = {"stream": stream, "byte_from": start, "byte_to": start, "chunk": ""}
    if stream == "pty" or attempt not in sizes:
        return empty
    size = sizes[attempt][stream]
    start = min(start, size)
    end = min(max(end, start), size, start + settings.SKILLRUNNER_LOG_TEXT_MAX_BYTES)
    if end <= start:
        return {**empty, "byte_from": start, "byte_to": start}
    with open(selectors.log_path(run, attempt, stream), "rb") as log:
        log.seek(start)
        chunk = log.read(end - start)
    text = codecs.getincrementaldecoder("utf-8")(errors="replace").decode(chunk, final=True)
    return {"stream": stream, "byte_from": start, "byte_to": start + len(chunk), "chunk": text}


def _run_with_files(request, request_id):
    return selectors.with_files(selectors.run_for(request.user, request_id))


class RunFilesView(APIView):
    """GET /v1/jobs/{id}/files: the run's folder as upstream's tree."""

    @extend_schema(
        responses=inline_serializer(
            "RunFiles",
            {
                "request_id": serializers.UUIDField(),
                "run_id": serializers.UUIDField(),
                "entries": serializers.ListField(
                    child=serializers.DictField(), help_text="{path, name, is_dir, depth}"
                ),
            },
        )
    )
    def get(self, request, request_id):
        run = _run_with_files(request, request_id)
        entries = tree_entries(runfiles.list_files(run.run_dir))
        return Response({"request_id": str(run.pk), "run_id": str(run.pk), "entries": entries})


class RunFileView(APIView):
    """GET /v1/jobs/{id}/file?path=: one file of the run, previewed."""

    @extend_schema(
        parameters=[OpenApiParameter("path", str, required=True, description="relative to the run's folder")],
        responses=inline_serializer(
            "RunFilePreview",
            {
                "request_id": serializers.UUIDField(),
                "run_id": serializers.UUIDField(),
                "path": serializers.CharField(),
                "preview": serializers.DictField(help_text="{mode: text|binary|too_large, content, size, meta, …}"),
            },
        ),
    )
    def get(self, request, request_id):
        run = _run_with_files(request, request_id)
        path = request.query_params.get("path", "")
        if runfiles.parts(path) is None:
            raise ApplicationError("INVALID_PATH", "path must be relative to the run's folder, without `.` or `..`")
        handle = served_file(run, path)  # a provider key the agent left is not shown (R-SB10)
        if handle is None:
            raise NotFound("FILE_NOT_FOUND", f"the run has no file {path!r}")
        with handle:
            shown = preview(handle, path)
        return Response({"request_id": str(run.pk), "run_id": str(run.pk), "path": path, "preview": shown})


class LogRangeView(APIView):
    """GET /v1/jobs/{id}/logs/range: a byte window of one log, where an event's `raw_ref` points."""

    @extend_schema(
        parameters=[
            OpenApiParameter("stream", str, required=True, enum=list(LOG_RANGE_STREAMS)),
            OpenApiParameter("byte_from", int),
            OpenApiParameter("byte_to", int),
            OpenApiParameter("attempt", int, description="default: the latest"),
        ],
        responses=inline_serializer(
            "LogRange",
            {
                "stream": serializers.CharField(),
                "byte_from": serializers.IntegerField(),
                "byte_to": serializers.IntegerField(),
                "chunk": serializers.CharField(),
            },
        ),
    )
    def get(self, request, request_id):
        return Response(log_range(_run_with_files(request, request_id), request.query_params))


class DebugBundleView(APIView):
    """GET /v1/jobs/{id}/bundle/debug: the bundle with the run's logs and input files."""

    @extend_schema(responses={(200, "application/zip"): OpenApiTypes.BINARY})
    def get(self, request, request_id):
        run = jobs.terminal(_run_with_files(request, request_id))
        bundle, found = bundle_path(run, configured_secrets(), with_logs=True)
        record_keys_in_output(run.pk, run.attempt_number, found)
        return FileResponse(
            open(bundle, "rb"),
            as_attachment=True,
            filename="run_bundle_debug.zip",
            content_type="application/zip",
        )
