"""The downloadable bundle of a finished run: result.json plus its artifacts; with its logs and
input files besides, for looking into how it went."""

from __future__ import annotations

import hmac
import io
import json
import os
import shutil
import tempfile
import zipfile
from pathlib import Path
from typing import BinaryIO

from django.conf import settings

from . import runfiles
from .models import Run
from .output_keys import RESULT, RedactingReader

COPY_CHUNK = 1 << 20
RESULT_MEMBER = "result/result.json"


def _keys_digest(secrets: tuple[str, ...]) -> str:
    """Tells bundles redacted with different keys apart; keyed, so it says nothing of the keys."""
    return hmac.digest(settings.SECRET_KEY.encode(), "\0".join(sorted(secrets)).encode(), "sha256").hex()[:16]


def bundle_path(run: Run, secrets: tuple[str, ...], *, with_logs: bool = False) -> tuple[Path, list[str]]:
    """The bundle's path, and where building it found one of `secrets` (R-SB10): nothing when it
    was there already. Built once per terminal run (its contents can no longer change) and set of
    configured keys, then served from disk; every member passes through the key guard.

    The bundle lives in the run's records folder, out of the agent's reach; artifacts (and input
    files) are read with runs.runfiles, so a link the agent left is neither followed nor bundled
    (R-SB7). `with_logs` adds the uploads and each attempt's logs (the service's own files).
    """
    name = "run_bundle_with_logs" if with_logs else "run_bundle"
    target = run.records_dir / "bundle" / f"{name}-{_keys_digest(secrets)}.zip"
    if target.exists():
        return target, []
    target.parent.mkdir(parents=True, exist_ok=True)
    found: list[str] = []
    # A private partial file per builder: two requests building at once never share one.
    fd, partial = tempfile.mkstemp(prefix="run_bundle.", suffix=".partial", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as raw, zipfile.ZipFile(raw, "w", compression=zipfile.ZIP_DEFLATED) as bundle:
            result = json.dumps(run.result, indent=2, ensure_ascii=False).encode()
            if _add_member(bundle, RESULT_MEMBER, io.BytesIO(result), secrets):
                found.append(RESULT)
            folders = ("artifacts", "uploads") if with_logs else ("artifacts",)
            for path in [path for folder in folders for path in runfiles.list_files(run.run_dir, folder)]:
                source = runfiles.open_file(run.run_dir, path)
                if source is not None and _add_member(bundle, path, source, secrets):  # None: now a link
                    found.append(path)
            logs = run.records_dir / "logs"
            if with_logs and logs.is_dir():
                for log in sorted(logs.iterdir()):  # the service's own files, redacted when written
                    _add_member(bundle, f"logs/{log.name}", open(log, "rb"), secrets)
        os.replace(partial, target)
    except BaseException:
        Path(partial).unlink(missing_ok=True)
        raise
    for stale in target.parent.glob("run_bundle-*.zip"):
        if stale != target:  # built with keys no longer configured
            stale.unlink(missing_ok=True)
    return target, found


def _add_member(bundle: zipfile.ZipFile, name: str, source: BinaryIO, secrets: tuple[str, ...]) -> bool:
    """Copy `source` into the bundle as `name`, keys redacted; whether it held one."""
    with RedactingReader(source, secrets) as reader, bundle.open(name, "w", force_zip64=True) as member:
        shutil.copyfileobj(reader, member, COPY_CHUNK)
    return bool(reader.found)
