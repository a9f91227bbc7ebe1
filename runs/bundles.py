"""The downloadable bundle of a finished run: result.json plus its artifacts."""

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


def bundle_path(run: Run) -> Path:
    """Built once per terminal run (its contents can no longer change), then served from disk.

    The bundle lives in the run's records folder, out of the agent's reach; artifacts are read
    with runs.runfiles, so a link the agent left is neither followed nor bundled (R-SB7).
    """
    target = run.records_dir / "bundle" / "run_bundle.zip"
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    # A private partial file per builder: two requests building at once never share one.
    fd, partial = tempfile.mkstemp(prefix="run_bundle.", suffix=".partial", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as raw, zipfile.ZipFile(raw, "w", compression=zipfile.ZIP_DEFLATED) as bundle:
            bundle.writestr("result/result.json", json.dumps(run.result, indent=2, ensure_ascii=False))
            for path in runfiles.list_files(run.run_dir, "artifacts"):
                source = runfiles.open_file(run.run_dir, path)
                if source is None:
                    continue  # swapped for a link since the listing
                with source, bundle.open(path, "w", force_zip64=True) as member:
                    shutil.copyfileobj(source, member, COPY_CHUNK)
        os.replace(partial, target)
    except BaseException:
        Path(partial).unlink(missing_ok=True)
        raise
    return target
