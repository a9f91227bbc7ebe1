"""The downloadable bundle of a finished run: result.json plus its artifacts; with its logs and
input files besides, for looking into how it went."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import zipfile
from pathlib import Path

from . import runfiles
from .models import Run

COPY_CHUNK = 1 << 20


def bundle_path(run: Run, *, with_logs: bool = False) -> Path:
    """Built once per terminal run (its contents can no longer change), then served from disk.

    The bundle lives in the run's records folder, out of the agent's reach; artifacts (and input
    files) are read with runs.runfiles, so a link the agent left is neither followed nor bundled
    (R-SB7). `with_logs` adds the uploads and each attempt's logs (the service's own files).
    """
    name = "run_bundle_with_logs.zip" if with_logs else "run_bundle.zip"
    target = run.records_dir / "bundle" / name
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    # A private partial file per builder: two requests building at once never share one.
    fd, partial = tempfile.mkstemp(prefix="run_bundle.", suffix=".partial", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as raw, zipfile.ZipFile(raw, "w", compression=zipfile.ZIP_DEFLATED) as bundle:
            bundle.writestr("result/result.json", json.dumps(run.result, indent=2, ensure_ascii=False))
            folders = ("artifacts", "uploads") if with_logs else ("artifacts",)
            for path in [path for folder in folders for path in runfiles.list_files(run.run_dir, folder)]:
                source = runfiles.open_file(run.run_dir, path)
                if source is None:
                    continue  # swapped for a link since the listing
                with source, bundle.open(path, "w", force_zip64=True) as member:
                    shutil.copyfileobj(source, member, COPY_CHUNK)
            logs = run.records_dir / "logs"
            if with_logs and logs.is_dir():
                for log in sorted(logs.iterdir()):
                    bundle.write(log, f"logs/{log.name}")
        os.replace(partial, target)
    except BaseException:
        Path(partial).unlink(missing_ok=True)
        raise
    return target
