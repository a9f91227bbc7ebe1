"""The downloadable bundle of a finished run: result.json plus its artifacts."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

from .models import Run


def bundle_path(run: Run) -> Path:
    """Built once per terminal run (its contents can no longer change), then served from disk."""
    target = run.run_dir / "bundle" / "run_bundle.zip"
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(".partial")
    artifacts = run.run_dir / "artifacts"
    with zipfile.ZipFile(partial, "w", compression=zipfile.ZIP_DEFLATED) as bundle:
        bundle.writestr("result/result.json", json.dumps(run.result, indent=2, ensure_ascii=False))
        if artifacts.is_dir():
            for path in sorted(p for p in artifacts.rglob("*") if p.is_file() and not p.is_symlink()):
                bundle.write(path, path.relative_to(run.run_dir).as_posix())
    partial.replace(target)
    return target
