"""Reading a file reply (R-UP6): multipart `metadata` (JSON) plus repeated `files` parts.

The files are written to a staging folder of the service's own (<data dir>/reply-staging/…) as
the body streams in, and the request is refused the moment it passes one of the limits the
handshake announces (R-UP3). Only an accepted reply moves the folder into the run directory
(runs.services.submit_reply); the view discards whatever is left, so a refused request leaves
nothing behind.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import unicodedata
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO, Any

from django.core.exceptions import RequestDataTooBig, SuspiciousOperation
from django.core.files.uploadhandler import FileUploadHandler
from django.http import QueryDict
from django.http.multipartparser import MultiPartParser, MultiPartParserError
from rest_framework import serializers

from kernel.errors import ApplicationError
from runs.services import ReplyFile, StagedReplyFiles, reply_file_limits
from runs.sweeps import reply_staging_root

METADATA_PART = "metadata"
FILES_PART = "files"
# Room for a "-N" suffix within the 255 bytes a file name may have.
MAX_NAME_BYTES = 200
_CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def _invalid(message: str, **extra: Any) -> ApplicationError:
    return ApplicationError("REPLY_FILES_INVALID", message, **extra)


def _unprintable(char: str) -> bool:
    """Control and format characters, unassigned code points, line and paragraph separators."""
    return unicodedata.category(char)[0] == "C" or char in "\u2028\u2029"


def safe_file_name(sent: str) -> str:
    """The name a reply file is saved under: the last component of the name sent (either slash
    separates), without surrounding blanks. A name with unprintable characters, or none left
    (empty, `.`, `..`), or a very long one is refused."""
    if any(_unprintable(char) for char in sent):
        raise _invalid("a file name holds control or other unprintable characters", name=sent)
    name = sent.replace("\\", "/").rsplit("/", 1)[-1].strip()
    if name in ("", ".", ".."):
        raise _invalid(f"the file name {sent!r} names no file", name=sent)
    if len(name.encode()) > MAX_NAME_BYTES:
        raise _invalid(f"a file name may have at most {MAX_NAME_BYTES} bytes", name=sent)
    return name


def unique_name(name: str, taken: set[str]) -> str:
    """`name`, or `stem-2.ext`, `stem-3.ext`, … when an earlier file of the reply has it."""
    if name not in taken:
        return name
    path = PurePosixPath(name)
    number = 2
    while (candidate := f"{path.stem}-{number}{path.suffix}") in taken:
        number += 1
    return candidate


class _RawNamesParser(MultiPartParser):
    """Django's multipart parser, with file names left as sent: its own cleaning silently drops a
    file whose name it cannot use and strips control characters, where a reply refuses them."""

    def sanitize_file_name(self, file_name: str) -> str:
        return file_name


@dataclass
class _Incoming:
    name: str
    handle: IO[bytes]
    digest: Any  # hashlib's sha256 object
    size: int = 0


class ReplyFileReceiver(FileUploadHandler):
    """The upload handler of one file-reply request: every `files` part goes straight into the
    staging folder under a safe, unique name, counted against the limits as it arrives.

    Installed before anything reads the body (a session's CSRF check reads it during
    authentication), so however the body gets parsed, it is parsed here.
    """

    def __init__(self) -> None:
        super().__init__()
        self.limits = reply_file_limits()
        self.folder: Path | None = None
        self.saved: list[ReplyFile] = []
        self._incoming: _Incoming | None = None
        self._total = 0
        self._parsing = False

    def handle_raw_input(self, input_data, META, content_length, boundary, encoding=None):
        if self._parsing:
            return None  # the parser below asks too: it goes on with the parts
        self._parsing = True
        try:
            return _RawNamesParser(META, input_data, [self], encoding).parse()
        except RequestDataTooBig as exc:
            raise ApplicationError(
                "REPLY_METADATA_TOO_LARGE", "the metadata part is larger than a JSON body may be", status_code=413
            ) from exc
        except (SuspiciousOperation, MultiPartParserError) as exc:
            raise ApplicationError("MALFORMED_REQUEST", f"the multipart body cannot be read: {exc}") from exc

    def new_file(self, field_name, file_name, *args, **kwargs) -> None:
        super().new_file(field_name, file_name, *args, **kwargs)
        if field_name != FILES_PART:
            raise _invalid(f"a file came in part {field_name!r}; files go in parts named {FILES_PART!r}")
        if len(self.saved) >= self.limits["max_files"]:
            raise ApplicationError(
                "REPLY_FILES_TOO_MANY",
                f"a reply may carry at most {self.limits['max_files']} files",
                status_code=413,
                **self.limits,
            )
        name = unique_name(safe_file_name(file_name), {saved.name for saved in self.saved})
        fd = os.open(self._staging() / name, _CREATE_FLAGS, 0o644)
        self._incoming = _Incoming(name, os.fdopen(fd, "wb"), hashlib.sha256())

    def receive_data_chunk(self, raw_data: bytes, start: int) -> None:
        incoming = self._incoming
        assert incoming is not None  # the parser announces each file first
        incoming.size += len(raw_data)
        self._total += len(raw_data)
        if incoming.size > self.limits["max_file_bytes"]:
            raise ApplicationError(
                "REPLY_FILE_TOO_LARGE",
                f"{incoming.name} is larger than {self.limits['max_file_bytes']} bytes",
                status_code=413,
                name=incoming.name,
                **self.limits,
            )
        if self._total > self.limits["max_total_bytes"]:
            raise ApplicationError(
                "REPLY_FILES_TOO_LARGE",
                f"the files add up to more than {self.limits['max_total_bytes']} bytes",
                status_code=413,
                **self.limits,
            )
        incoming.handle.write(raw_data)
        incoming.digest.update(raw_data)
        return None  # consumed: request.FILES never holds these

    def file_complete(self, file_size: int) -> None:
        incoming = self._incoming
        assert incoming is not None
        incoming.handle.close()
        self._incoming = None
        self.saved.append(ReplyFile(incoming.name, incoming.size, incoming.digest.hexdigest()))
        return None

    def _staging(self) -> Path:
        if self.folder is None:
            root = reply_staging_root()
            root.mkdir(parents=True, exist_ok=True)
            self.folder = Path(tempfile.mkdtemp(dir=root))
            # Readable to an agent that runs as a uid of its own (engines.sandbox) once it moves in.
            self.folder.chmod(0o755)
        return self.folder

    def staged(self) -> StagedReplyFiles | None:
        """The files received, or None when the request carried none."""
        if not self.saved:
            return None
        assert self.folder is not None
        return StagedReplyFiles(folder=self.folder, files=tuple(self.saved))

    def discard(self) -> None:
        """Remove what did not move into a run (all of it when the request was refused)."""
        if self._incoming is not None:
            self._incoming.handle.close()
            self._incoming = None
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)


class ReplyMetadata(serializers.Serializer):
    """The `metadata` part: SPEC's `{interaction_id, idempotency_key?, text?}`, and upstream's
    `message` and `bindings` (which names each file's slot) so its clients are understood too."""

    interaction_id = serializers.IntegerField(min_value=1)
    idempotency_key = serializers.CharField(max_length=128, required=False, allow_blank=True, default="")
    text = serializers.CharField(required=False, allow_null=True, allow_blank=True, trim_whitespace=False)
    message = serializers.CharField(
        required=False, allow_null=True, allow_blank=True, trim_whitespace=False, help_text="upstream's name for text"
    )
    bindings = serializers.ListField(
        child=serializers.DictField(), required=False, help_text="upstream's file slots: accepted, not used"
    )

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if attrs.get("text") is not None and attrs.get("message") is not None:
            raise serializers.ValidationError("send the reply's text as `text` or as `message`, not both")
        return attrs


@dataclass(frozen=True)
class FileReply:
    interaction_id: int
    idempotency_key: str
    text: str | None


def read_metadata(form: QueryDict) -> FileReply:
    """The reply the form's parts other than the files describe; 400 for anything amiss."""
    unexpected = sorted(set(form) - {METADATA_PART})
    if FILES_PART in unexpected:
        raise _invalid(f"every {FILES_PART!r} part must be a file with a file name")
    if unexpected:
        raise _invalid(f"unexpected parts: {', '.join(unexpected)}", parts=unexpected)
    parts = form.getlist(METADATA_PART)
    if len(parts) != 1:
        raise ApplicationError("REPLY_METADATA_INVALID", f"send exactly one {METADATA_PART!r} part, not {len(parts)}")
    try:
        metadata = json.loads(parts[0])
    except (ValueError, RecursionError) as exc:
        raise ApplicationError("REPLY_METADATA_INVALID", f"metadata is not JSON: {exc}") from exc
    if not isinstance(metadata, dict):
        raise ApplicationError("REPLY_METADATA_INVALID", "metadata must be a JSON object")
    unknown = sorted(set(metadata) - set(ReplyMetadata().fields))
    if unknown:
        raise ApplicationError(
            "REPLY_METADATA_INVALID", f"unknown metadata keys: {', '.join(unknown)}", unknown_keys=unknown
        )
    payload = ReplyMetadata(data=metadata)
    payload.is_valid(raise_exception=True)
    data = payload.validated_data
    text = data.get("text")
    return FileReply(
        interaction_id=data["interaction_id"],
        idempotency_key=data["idempotency_key"],
        text=data.get("message") if text is None else text,
    )
