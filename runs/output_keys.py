"""Provider keys in what the service serves of a run (R-SB10): the second line behind the relay.

The provider relay (engines.relay) keeps the operator's keys out of the sandbox, so an agent
should never see one. Should it get one all the same (a relay bug, a key left somewhere the agent
can read), no door of the service hands it out: the run's result, artifacts, bundle and logs are
checked for every configured key (enginehost.config.configured_secrets); a hit is redacted
(kernel.logging.REDACTED) and recorded as a `security` event, source "output".

Where, and why there:

- Once, when a turn ends: the logs are redacted as they are written and the answer before it
  becomes the result (kernel.logging.redact_stream, worker.execution._finish_turn), the files
  under `artifacts/` (after collection moved the answer's files in) are read once
  (runs.turn_end.end_turn); the rare file holding a key is rewritten in place
  (runs.runfiles.rewrite_file: never through a link). That costs one read of the turn's
  artifacts, and a write only on a hit.
- Every time a file of the agent's is served (artifact downloads and previews, the bundle's
  members): its bytes pass through kernel.logging.ValueRedactor on their way out
  (`RedactingReader`), in memory bounded by the read size whatever the file, a key cut by a read's
  end included. This catches what a turn's end cannot: a file written while a turn runs (or by a
  resident process while its run waits), and a key configured after the turn. It costs a pass per
  key over the bytes served, and downloads go without Content-Length (chunked). The bundle, built
  once, is kept under a digest of the configured keys (runs.bundles), so a new key gets a new one.
- The result and the logs are written only by the service, after that check, where the agent
  cannot write (R-SB7); they are not read again per request (the result is the API's hottest
  read), so a key configured after a turn is not looked for in them.

Each place a key was found is recorded once per attempt (runs.services.record_keys_in_output),
however often it is served. Engine transcripts (the session files in engine homes) are never
served. A key in a file's name is not redacted.

    RedactingReader(source, secrets)      -> a file's bytes, read with the keys redacted
    redact_artifacts(run_dir, secrets)    -> the artifacts that held a key, now redacted in place
    served_artifact(run, path)            -> an artifact open for serving through the guard
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from enginehost.config import configured_secrets
from kernel.errors import NotFound
from kernel.logging import ValueRedactor

from . import runfiles, services
from .models import Run
from .outcome import list_artifacts

# Where a key found in the turn's answer (its message, data, question or error) is said to be.
RESULT = "result"
READ_BYTES = 1 << 20
# Reads of a few KB (FileResponse's) are looked through in pieces no smaller than this: a piece
# costs a pass per key and a copy of what stays ready, so tiny ones would make serving slow.
MIN_PIECE = 64 * 1024


class RedactingReader:
    """A binary file's bytes as `read` gives them, every configured key replaced by the marker.

    No size and no name: what it gives is not the file's length (FileResponse then sends no
    Content-Length). `found` counts the keys replaced so far; `on_found`, when given, is called
    once at close if there were any.
    """

    def __init__(self, source: BinaryIO, secrets: tuple[str, ...], on_found: Callable[[], None] | None = None):
        self._source = source
        self._redactor = ValueRedactor(secrets)
        self._ready = b""
        self._ended = False
        self._on_found = on_found

    @property
    def found(self) -> int:
        return self._redactor.found

    def read(self, size: int = -1) -> bytes:
        while not self._ended and (size < 0 or len(self._ready) < size):
            # Pieces of about the size asked: what is ready stays small however the file is read.
            chunk = self._source.read(max(size, MIN_PIECE) if size > 0 else READ_BYTES)
            self._ended = not chunk
            self._ready += self._redactor.feed(chunk, final=self._ended)
        size = len(self._ready) if size < 0 else size
        piece, self._ready = self._ready[:size], self._ready[size:]
        return piece

    def close(self) -> None:
        self._source.close()
        if self.found and self._on_found is not None:
            on_found, self._on_found = self._on_found, None
            on_found()

    def __enter__(self) -> RedactingReader:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


def _holds_key(source: BinaryIO, secrets: tuple[str, ...]) -> bool:
    reader = RedactingReader(source, secrets)
    while reader.read(READ_BYTES) and not reader.found:
        pass
    return bool(reader.found)


def _copy_redacted(secrets: tuple[str, ...]) -> Callable[[BinaryIO, BinaryIO], None]:
    return lambda source, target: shutil.copyfileobj(RedactingReader(source, secrets), target, READ_BYTES)


def redact_artifacts(run_dir: Path, secrets: tuple[str, ...]) -> list[str]:
    """The run-relative paths of the files under artifacts/ that held one of `secrets`, each
    rewritten with the keys redacted. Files are read through runs.runfiles (R-SB7)."""
    if not secrets:
        return []
    found = []
    for path in list_artifacts(run_dir):
        handle = runfiles.open_file(run_dir, path)
        if handle is None:
            continue  # swapped for a link since the listing: never served either
        with handle:
            if not _holds_key(handle, secrets):
                continue
        found.append(path)
        # Refused (swapped meanwhile): recorded all the same, and the guard redacts it when served.
        runfiles.rewrite_file(run_dir, path, _copy_redacted(secrets))
    return found


def served_file(run: Run, path: str) -> RedactingReader | None:
    """A file of the run's folder (`path` relative to it), open for serving: keys redacted as it
    is read, one found recorded on the run when it is closed. Opened through runs.runfiles: never
    a link (at any level), a special file or anything outside. None when there is no such file."""
    handle = runfiles.open_file(run.run_dir, path)
    if handle is None:
        return None
    return RedactingReader(
        handle,
        configured_secrets(),
        on_found=lambda: services.record_keys_in_output(run.pk, run.attempt_number, [path]),
    )


def served_artifact(run: Run, relative: str) -> RedactingReader:
    """served_file for a file under artifacts/, given as `artifacts/x` or `x`; NotFound when there
    is no such file."""
    relative = relative.removeprefix("artifacts/")
    reader = served_file(run, f"artifacts/{relative}")
    if reader is None:
        raise NotFound("ARTIFACT_NOT_FOUND", f"no artifact {relative!r}")
    return reader
