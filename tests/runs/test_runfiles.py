"""R-SB7: runs.runfiles reads an agent's run directory without following anything it left there."""

from __future__ import annotations

import os
import threading

import pytest

from runs import runfiles

SECRET = b"SECRET-OUTSIDE-THE-RUN"


@pytest.fixture
def run(tmp_path):
    """A run directory with one real artifact, and a secret file beside the run."""
    root = tmp_path / "runs" / "r1"
    (root / "artifacts" / "sub").mkdir(parents=True)
    (root / "artifacts" / "ok.txt").write_bytes(b"fine")
    (root / "artifacts" / "sub" / "deep.txt").write_bytes(b"deep")
    secret = tmp_path / "secret_key"
    secret.write_bytes(SECRET)
    return root, secret


def _read(root, path):
    handle = runfiles.open_file(root, path)
    if handle is None:
        return None
    with handle:
        return handle.read()


def test_regular_files_are_read(run):
    root, _ = run
    assert _read(root, "artifacts/ok.txt") == b"fine"
    assert _read(root, "artifacts/sub/deep.txt") == b"deep"
    assert runfiles.list_files(root, "artifacts") == ["artifacts/ok.txt", "artifacts/sub/deep.txt"]


@pytest.mark.parametrize("path", ["", "/etc/passwd", "artifacts/../secret", "./artifacts/ok.txt", "a//b", "a\0b"])
def test_paths_that_are_not_plain_relative_ones_are_refused(run, path):
    root, _ = run
    assert runfiles.parts(path) is None
    assert runfiles.open_file(root, path) is None


def test_a_link_at_any_level_is_refused(run):
    """R-SB7: the root of artifacts/ included — `artifacts -> ../..` lists and serves nothing."""
    root, secret = run
    (root / "artifacts" / "leak.txt").symlink_to(secret)
    (root / "artifacts" / "up").symlink_to(secret.parent, target_is_directory=True)
    assert _read(root, "artifacts/leak.txt") is None
    assert _read(root, "artifacts/up/secret_key") is None
    assert runfiles.list_files(root, "artifacts") == ["artifacts/ok.txt", "artifacts/sub/deep.txt"]

    (root / "artifacts").rename(root / "real-artifacts")
    (root / "artifacts").symlink_to("../..", target_is_directory=True)
    assert runfiles.list_files(root, "artifacts") == []
    assert _read(root, "artifacts/secret_key") is None
    assert _read(root, "artifacts/runs/r1/real-artifacts/ok.txt") is None


def test_hard_links_and_special_files_are_refused(run):
    root, secret = run
    os.link(secret, root / "artifacts" / "hard.txt")
    os.mkfifo(root / "artifacts" / "pipe")
    assert _read(root, "artifacts/hard.txt") is None
    assert _read(root, "artifacts/pipe") is None  # and did not block on the FIFO
    assert _read(root, "artifacts/sub") is None
    assert runfiles.list_files(root, "artifacts") == ["artifacts/ok.txt", "artifacts/sub/deep.txt"]


def test_the_check_is_on_the_open_handle(run):
    """A file swapped for a link between listing and opening is still refused (no TOCTOU)."""
    root, secret = run
    assert "artifacts/ok.txt" in runfiles.list_files(root, "artifacts")
    (root / "artifacts" / "ok.txt").unlink()
    (root / "artifacts" / "ok.txt").symlink_to(secret)
    assert _read(root, "artifacts/ok.txt") is None


def test_run_relative_is_lexical_and_stays_inside(run):
    root, _ = run
    assert runfiles.run_relative(root, "artifacts/a.md") == "artifacts/a.md"
    assert runfiles.run_relative(root, f"{root}/out/a.md") == "out/a.md"
    assert runfiles.run_relative(root, f"{root}/../r2/a.md") is None
    assert runfiles.run_relative(root, f"{root}2/a.md") is None
    assert runfiles.run_relative(root, "/etc/passwd") is None


def test_move_file_moves_safe_files_only_and_never_replaces(run):
    root, secret = run
    (root / "out.md").write_bytes(b"made")
    (root / "link.md").symlink_to(secret)
    assert runfiles.move_file(root, "out.md", "artifacts/new/out.md")
    assert (root / "artifacts" / "new" / "out.md").read_bytes() == b"made"
    assert not runfiles.move_file(root, "link.md", "artifacts/link.md")
    assert not (root / "artifacts" / "link.md").is_symlink()
    (root / "again.md").write_bytes(b"again")
    assert not runfiles.move_file(root, "again.md", "artifacts/ok.txt")
    assert (root / "artifacts" / "ok.txt").read_bytes() == b"fine"


def test_move_file_never_writes_through_a_linked_target_directory(run, tmp_path):
    root, _ = run
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (root / "artifacts" / "out").symlink_to(elsewhere, target_is_directory=True)
    (root / "x.md").write_bytes(b"x")
    assert not runfiles.move_file(root, "x.md", "artifacts/out/x.md")
    assert list(elsewhere.iterdir()) == []


def test_rewrite_file_replaces_safe_files_only_and_never_writes_through_a_link(run):
    root, secret = run
    (root / "artifacts" / "ok.txt").chmod(0o640)

    def upper(source, target):
        target.write(source.read().upper())

    assert runfiles.rewrite_file(root, "artifacts/ok.txt", upper)
    assert (root / "artifacts" / "ok.txt").read_bytes() == b"FINE"
    assert (root / "artifacts" / "ok.txt").stat().st_mode & 0o777 == 0o640
    (root / "artifacts" / "leak.txt").symlink_to(secret)
    os.link(secret, root / "artifacts" / "hard.txt")
    (root / "artifacts" / "up").symlink_to(secret.parent, target_is_directory=True)
    for path in ("artifacts/leak.txt", "artifacts/hard.txt", "artifacts/up/secret_key", "artifacts/sub"):
        assert not runfiles.rewrite_file(root, path, upper), path
    assert secret.read_bytes() == SECRET and (root / "artifacts" / "leak.txt").is_symlink()

    def fails(source, target):
        raise OSError("disk full")

    assert not runfiles.rewrite_file(root, "artifacts/sub/deep.txt", fails)
    assert sorted(os.listdir(root / "artifacts" / "sub")) == ["deep.txt"]  # no partial file left behind


def test_copy_files_copies_only_safe_files_within_the_cap(run, tmp_path):
    root, secret = run
    (root / "artifacts" / "leak.txt").symlink_to(secret)
    target, capped = tmp_path / "r2", tmp_path / "r3"
    target.mkdir()
    capped.mkdir()
    paths = ["artifacts/ok.txt", "artifacts/sub/deep.txt", "artifacts/leak.txt"]
    assert runfiles.copy_files(root, target, paths, 100) == ["artifacts/ok.txt", "artifacts/sub/deep.txt"]
    assert (target / "artifacts" / "sub" / "deep.txt").read_bytes() == b"deep"
    assert not (target / "artifacts" / "leak.txt").exists()
    with pytest.raises(runfiles.CopyTooLarge):
        runfiles.copy_files(root, capped, ["artifacts/ok.txt", "artifacts/sub/deep.txt"], 6)


def test_a_fifo_is_never_opened_blocking(run):
    """Opening a FIFO with no writer would hang a plain open(); here it returns at once."""
    root, _ = run
    os.mkfifo(root / "artifacts" / "slow")
    result = []
    reader = threading.Thread(target=lambda: result.append(_read(root, "artifacts/slow")), daemon=True)
    reader.start()
    reader.join(timeout=5)
    assert result == [None]
