"""Safe extraction of uploaded zip archives (skill packages and run input files).

Nothing is trusted from the archive: names are checked before anything is written, sizes are
counted while streaming rather than read from headers, and everything lands in a fresh
directory the caller moves into place only when the whole archive was accepted.
"""

from __future__ import annotations

import stat
import zipfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO, BinaryIO

from engines.registry import CONTROL_NAMES

from .errors import ApplicationError

CHUNK = 64 * 1024
IGNORED_TOP_LEVEL = frozenset({"__MACOSX"})


class ArchiveError(ApplicationError):
    """An archive refused before anything of it was kept."""


@dataclass(frozen=True)
class ArchiveLimits:
    max_members: int
    max_total_bytes: int
    max_ratio: int


def _entry_problem(info: zipfile.ZipInfo) -> str | None:
    name = info.filename
    if "\\" in name or name.startswith("/") or (len(name) > 1 and name[1] == ":"):
        return "absolute or non-POSIX path"
    parts = PurePosixPath(name).parts
    if any(part == ".." for part in parts):
        return "parent-directory reference"
    mode = info.external_attr >> 16
    if stat.S_ISLNK(mode):
        return "symbolic link"
    if any(part in CONTROL_NAMES for part in parts):
        return "engine control file"
    return None


def _members(archive: zipfile.ZipFile, limits: ArchiveLimits) -> list[zipfile.ZipInfo]:
    infos = [
        i
        for i in archive.infolist()
        if PurePosixPath(i.filename).parts[:1] and PurePosixPath(i.filename).parts[0] not in IGNORED_TOP_LEVEL
    ]
    if len(infos) > limits.max_members:
        raise ArchiveError(
            "ARCHIVE_TOO_MANY_MEMBERS", f"archive has {len(infos)} entries; at most {limits.max_members} are allowed"
        )
    refused = [f"{i.filename} ({problem})" for i in infos if (problem := _entry_problem(i))]
    if refused:
        raise ArchiveError("ARCHIVE_UNSAFE_ENTRY", "archive refused, unsafe entries: " + ", ".join(refused))
    names = [i.filename.rstrip("/") for i in infos]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ArchiveError("ARCHIVE_UNSAFE_ENTRY", "archive refused, duplicate entries: " + ", ".join(duplicates))
    # A file cannot also be a folder: `x` then `x/y` (R-FS3, a clean 400 rather than a failed mkdir).
    files = {i.filename for i in infos if not i.is_dir()}
    folders = {str(parent) for i in infos for parent in PurePosixPath(i.filename).parents}
    clashes = sorted(files & folders)
    if clashes:
        raise ArchiveError(
            "ARCHIVE_UNSAFE_ENTRY", "archive refused, entries both file and folder: " + ", ".join(clashes)
        )
    return infos


def extract_zip(source: BinaryIO | IO[bytes] | Path, destination: Path, limits: ArchiveLimits) -> list[str]:
    """Extract into `destination` (which must be empty or missing); returns the file names written."""
    try:
        archive = zipfile.ZipFile(source)
    except (zipfile.BadZipFile, OSError, ValueError) as exc:
        raise ArchiveError("ARCHIVE_INVALID", f"not a valid zip archive: {exc}") from exc
    written: list[str] = []
    total = 0
    with archive:
        infos = _members(archive, limits)
        destination.mkdir(parents=True, exist_ok=True)
        root = destination.resolve()
        for info in infos:
            target = (root / info.filename).resolve()
            if not target.is_relative_to(root):
                raise ArchiveError(
                    "ARCHIVE_UNSAFE_ENTRY",
                    f"archive refused, entry escapes the target: {info.filename}",
                )
            if info.is_dir():
                target.mkdir(parents=True, exist_ok=True)
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            size = 0
            try:
                with archive.open(info) as member, open(target, "wb") as out:
                    while chunk := member.read(CHUNK):
                        size += len(chunk)
                        total += len(chunk)
                        if total > limits.max_total_bytes:
                            raise ArchiveError(
                                "ARCHIVE_TOO_LARGE", f"archive expands to more than {limits.max_total_bytes} bytes"
                            )
                        if size > 1024 * 1024 and size > max(info.compress_size, 1) * limits.max_ratio:
                            raise ArchiveError(
                                "ARCHIVE_RATIO_EXCEEDED",
                                f"{info.filename} expands more than {limits.max_ratio}x; refusing a likely zip bomb",
                            )
                        out.write(chunk)
            except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, EOFError, NotImplementedError) as exc:
                raise ArchiveError("ARCHIVE_INVALID", f"cannot read {info.filename}: {exc}") from exc
            written.append(info.filename)
    return written
