"""Reading what an agent left in its run directory without trusting its shape (R-SB7).

The agent owns its run directory: any name in it may be a symlink (to `../..`, to another run,
to the secret key), a hard link to a file elsewhere, a FIFO or a device, and it may swap them
while the service looks. So the service reads run files only through this module:

- a path is relative and checked one component at a time: no empty part, `.`, `..` or NUL;
- every directory below the root is opened with ``O_NOFOLLOW | O_DIRECTORY`` relative to the
  descriptor of its parent (an ``O_NOFOLLOW`` walk: what ``openat2`` with
  ``RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS`` does), so a link at any level is refused, never
  followed — ``artifacts`` itself included;
- the file is opened with ``O_NOFOLLOW | O_NONBLOCK`` (a FIFO cannot hang the service) and
  judged on the open handle (``fstat``): a regular file with exactly one link. There is no
  check-then-open race, and a hard link to a file outside the run is refused too.

Anything refused counts as absent: callers report it as missing, never follow it, and never
fail a run just because a link is lying around. The root itself (the run directory, created by
the service) is trusted.

    parts(path)                        -> the checked components of a relative path, or None
    open_file(root, path)              -> a binary file object open for reading, or None
    is_file(root, path)                -> whether open_file would open it
    list_files(root, under)            -> run-relative paths of the safe files beneath `under` (or all)
    run_relative(root, value)          -> a path the agent gave (relative or absolute) made run-relative
    move_file(root, source, target)    -> move a safe file within the run (artifact collection)
    move_directory_in(root, src, path) -> move a folder of the service's into the run (reply files)
    move_directory_out(root, path, dst)-> take such a folder back out (its reply was not recorded)
    write_new_file(root, path, data)   -> create a file that was not there (a rewritten manifest)
    rewrite_file(root, path, rewrite)  -> replace a safe file by a rewritten copy (keys redacted)
    remove_file(root, path)            -> remove one entry, a link itself rather than its target
    copy_files(src, dest, paths, cap)  -> copy safe files from one run into another (result cache)
"""

from __future__ import annotations

import io
import os
import secrets
import stat
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import BinaryIO

# An agent can make a tree of any shape; listing one never costs more than this.
MAX_DEPTH = 32
MAX_LISTED = 10_000
COPY_CHUNK = 1 << 20

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


class CopyTooLarge(Exception):
    """The files to copy add up to more than the allowed size."""


def parts(path: str | os.PathLike[str]) -> tuple[str, ...] | None:
    """The components of a relative path, or None when it is absolute, empty or has `.`/`..`/NUL."""
    text = os.fspath(path)
    if not text or text.startswith("/") or "\0" in text:
        return None
    components = tuple(text.split("/"))
    if any(part in ("", ".", "..") for part in components):
        return None
    return components


def run_relative(root: Path, value: str) -> str | None:
    """`value` (relative to the run, or absolute inside it) as a checked run-relative path, else None.

    Purely lexical: nothing is resolved, so a link cannot make a path look inside.
    """
    if value.startswith("/"):
        prefix = str(root).rstrip("/") + "/"
        if not value.startswith(prefix):
            return None
        value = value[len(prefix) :]
    checked = parts(value)
    return "/".join(checked) if checked else None


def _is_safe_file(info: os.stat_result) -> bool:
    return stat.S_ISREG(info.st_mode) and info.st_nlink == 1


@contextmanager
def _directory(root: Path, components: Iterable[str], *, create: bool = False, mode: int = 0o700) -> Iterator[int]:
    """A descriptor of root/components, every level opened without following links; with
    `create`, missing levels are made with `mode`.

    Raises OSError (ELOOP for a link, ENOTDIR for a file) when the walk is refused.
    """
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in components:
            if create:
                try:
                    os.mkdir(part, mode, dir_fd=fd)
                except FileExistsError:
                    pass
            child = os.open(part, _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = child
        yield fd
    finally:
        os.close(fd)


def open_file(root: Path, path: str) -> io.BufferedReader | None:
    """root/path open for reading if it is a regular, single-link file reached without any link.

    None when it is missing, a link at any level, a directory, a FIFO/device/socket, hard-linked,
    or the path is not a plain relative one. The caller closes the returned file.
    """
    components = parts(path)
    if components is None:
        return None
    try:
        with _directory(root, components[:-1]) as parent:
            return _open_in(parent, components[-1])
    except (OSError, ValueError):
        return None


def _open_in(parent: int, name: str) -> io.BufferedReader | None:
    """`name` in the directory `parent` open for reading if it is a safe file, else None; raises
    OSError when it cannot be opened at all (missing, a link)."""
    fd = os.open(name, _READ_FLAGS, dir_fd=parent)
    try:
        if not _is_safe_file(os.fstat(fd)):
            os.close(fd)
            return None
        os.set_blocking(fd, True)
    except OSError:
        os.close(fd)
        return None
    return os.fdopen(fd, "rb")


def list_files(root: Path, under: str = "") -> list[str]:
    """Sorted run-relative paths of the regular, single-link files beneath root/under (the whole
    root when `under` is empty).

    Links (to files or directories) and special files are skipped, never entered; `under`
    itself being a link gives an empty list. At most MAX_LISTED paths, MAX_DEPTH levels.
    """
    components = parts(under) if under else ()
    if components is None:
        return []
    found: list[str] = []
    try:
        with _directory(root, components) as fd:
            _walk(fd, "/".join(components), found, MAX_DEPTH)
    except OSError:
        return []
    return sorted(found)


def _walk(fd: int, prefix: str, found: list[str], depth: int) -> None:
    with os.scandir(fd) as entries:
        listing = sorted(entries, key=lambda entry: entry.name)
    for entry in listing:
        if len(found) >= MAX_LISTED:
            return
        try:
            info = os.stat(entry.name, dir_fd=fd, follow_symlinks=False)
        except OSError:
            continue
        path = f"{prefix}/{entry.name}" if prefix else entry.name
        if _is_safe_file(info):
            found.append(path)
        elif stat.S_ISDIR(info.st_mode) and depth > 1:
            try:
                child = os.open(entry.name, _DIR_FLAGS, dir_fd=fd)
            except OSError:
                continue
            try:
                _walk(child, path, found, depth - 1)
            finally:
                os.close(child)


def is_file(root: Path, path: str) -> bool:
    """Whether root/path is a regular, single-link file reached without any link (as open_file)."""
    handle = open_file(root, path)
    if handle is None:
        return False
    handle.close()
    return True


def move_file(root: Path, source: str, target: str) -> bool:
    """Move root/source to root/target (parents created) if source is a safe file; never replaces.

    Both ends are reached without following links; the rename moves the entry itself, so even
    a file swapped for a link meanwhile lands inside the run, where reads refuse it.
    """
    source_parts, target_parts = parts(source), parts(target)
    if source_parts is None or target_parts is None:
        return False
    try:
        with (
            _directory(root, source_parts[:-1]) as source_dir,
            _directory(root, target_parts[:-1], create=True) as target_dir,
        ):
            if not _is_safe_file(os.stat(source_parts[-1], dir_fd=source_dir, follow_symlinks=False)):
                return False
            if _exists(target_parts[-1], target_dir):
                return False  # keep both
            os.rename(source_parts[-1], target_parts[-1], src_dir_fd=source_dir, dst_dir_fd=target_dir)
    except OSError:
        return False
    return True


def _exists(name: str, dir_fd: int) -> bool:
    """Whether anything (a link included) is called `name` in the directory `dir_fd`."""
    try:
        os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return True


def move_directory_in(root: Path, source: Path, target: str) -> bool:
    """Move `source`, a directory of the service's own outside the run (on the same filesystem),
    to root/target, its parents created and reached without links; never replaces anything.

    False when something is already at target or the walk is refused. The folder arrives in one
    rename, whole, so the agent never sees part of it. Parents are made readable to all: a
    sandboxed agent may run as a uid of its own (engines.sandbox) while its process lives on.
    """
    components = parts(target)
    if components is None:
        return False
    try:
        with _directory(root, components[:-1], create=True, mode=0o755) as parent:
            if _exists(components[-1], parent):
                return False
            os.rename(source, components[-1], dst_dir_fd=parent)
    except OSError:
        return False
    return True


def move_directory_out(root: Path, source: str, destination: Path) -> bool:
    """Undo move_directory_in: root/source, reached without links, back to `destination` (which
    must not exist). Whatever the agent put there meanwhile moves out with it."""
    components = parts(source)
    if components is None:
        return False
    try:
        with _directory(root, components[:-1]) as parent:
            os.rename(components[-1], destination, src_dir_fd=parent)
    except OSError:
        return False
    return True


def write_new_file(root: Path, path: str, content: bytes) -> bool:
    """Create root/path (parents created, all reached without links) holding `content`; never
    replaces anything. False when something is already there or the walk is refused."""
    components = parts(path)
    if components is None:
        return False
    try:
        with _directory(root, components[:-1], create=True) as parent:
            fd = os.open(components[-1], _CREATE_FLAGS, 0o600, dir_fd=parent)
    except OSError:
        return False
    with os.fdopen(fd, "wb") as target:
        target.write(content)
    return True


def rewrite_file(root: Path, path: str, rewrite: Callable[[BinaryIO, BinaryIO], None]) -> bool:
    """Replace root/path, a safe file, with what `rewrite(source, target)` writes from it.

    The new file is made beside it (its directory reached without links, the file created
    exclusively, with the old one's permissions) and renamed over its entry: nothing is ever written
    through a link, even one the agent swapped in meanwhile. False, nothing changed, when refused.
    """
    components = parts(path)
    if components is None:
        return False
    name = components[-1]
    try:
        with _directory(root, components[:-1]) as parent:
            source = _open_in(parent, name)
            if source is None:
                return False
            partial = f".rewrite-{secrets.token_hex(8)}.partial"  # short: any name may be NAME_MAX long
            with source:
                fd = os.open(partial, _CREATE_FLAGS, 0o600, dir_fd=parent)
                try:
                    with os.fdopen(fd, "wb") as target:
                        os.fchmod(fd, stat.S_IMODE(os.fstat(source.fileno()).st_mode))
                        rewrite(source, target)
                    os.rename(partial, name, src_dir_fd=parent, dst_dir_fd=parent)
                except BaseException:
                    with suppress(OSError):
                        os.unlink(partial, dir_fd=parent)
                    raise
    except OSError:
        return False
    return True


def remove_file(root: Path, path: str) -> bool:
    """Remove the entry root/path (a link is removed itself, never its target)."""
    components = parts(path)
    if components is None:
        return False
    try:
        with _directory(root, components[:-1]) as parent:
            os.unlink(components[-1], dir_fd=parent)
    except OSError:
        return False
    return True


def copy_files(source_root: Path, target_root: Path, paths: Iterable[str], max_bytes: int) -> list[str]:
    """Copy the safe files at `paths` from one run directory into another, keeping their paths.

    Returns the paths copied (a refused or missing one is left out). Raises CopyTooLarge, having
    copied part, once the total would pass `max_bytes`; the caller discards the target then.
    """
    copied: list[str] = []
    total = 0
    for path in paths:
        source = open_file(source_root, path)
        if source is None:
            continue
        with source:
            if total + os.fstat(source.fileno()).st_size > max_bytes:
                raise CopyTooLarge(f"the files to copy exceed {max_bytes} bytes")
            components = parts(path)
            assert components is not None  # open_file checked it
            with _directory(target_root, components[:-1], create=True) as target_dir:
                fd = os.open(components[-1], _CREATE_FLAGS, 0o600, dir_fd=target_dir)
            with os.fdopen(fd, "wb") as target:
                while chunk := source.read(COPY_CHUNK):
                    total += len(chunk)
                    if total > max_bytes:  # the file grew after fstat
                        raise CopyTooLarge(f"the files to copy exceed {max_bytes} bytes")
                    target.write(chunk)
        copied.append(path)
    return copied
