"""kernel.archives.extract_zip, the one zip reader behind skill installs and input uploads (R-SK5)."""

from __future__ import annotations

import io
import os
import zipfile

import pytest

from kernel.archives import ArchiveError, ArchiveLimits, extract_zip
from tests.support.jobs import make_zip, tree_state

LIMITS = ArchiveLimits(max_members=50, max_total_bytes=1024 * 1024, max_ratio=100)


def _extract(tmp_path, content: bytes, limits: ArchiveLimits = LIMITS):
    return extract_zip(io.BytesIO(content), tmp_path / "out", limits)


def _refused(tmp_path, content: bytes, limits: ArchiveLimits = LIMITS) -> ArchiveError:
    outside = tree_state(tmp_path)
    with pytest.raises(ArchiveError) as info:
        _extract(tmp_path, content, limits)
    after = {k: v for k, v in tree_state(tmp_path).items() if not k.startswith("out")}
    assert after == {k: v for k, v in outside.items() if not k.startswith("out")}, (
        "something was written outside the destination"
    )
    return info.value


def test_safe_archive_is_extracted(tmp_path):
    names = _extract(tmp_path, make_zip({"pkg/SKILL.md": "hello", "pkg/assets/runner.json": "{}", "pkg/empty/": ""}))
    assert sorted(names) == ["pkg/SKILL.md", "pkg/assets/runner.json"]
    assert (tmp_path / "out" / "pkg" / "SKILL.md").read_text() == "hello"
    assert (tmp_path / "out" / "pkg" / "empty").is_dir()


@pytest.mark.parametrize(
    "name",
    ["/etc/passwd", "../up.txt", "pkg/../../up.txt", "pkg/a/../../../up.txt", "C:/windows/x", "pkg\\..\\..\\up.txt"],
)
def test_path_escapes_are_refused_before_anything_is_written(tmp_path, name):
    error = _refused(tmp_path, make_zip({"pkg/ok.txt": "ok", name: "pwned"}))
    assert error.code == "ARCHIVE_UNSAFE_ENTRY"
    assert name in error.message
    assert not (tmp_path / "out" / "pkg" / "ok.txt").exists()  # checked up front, not midway
    assert not (tmp_path / "up.txt").exists()


def test_symlinks_are_refused(tmp_path):
    error = _refused(tmp_path, make_zip({"pkg/ok.txt": "ok"}, symlinks={"pkg/link": "/etc/passwd"}))
    assert error.code == "ARCHIVE_UNSAFE_ENTRY"
    assert "pkg/link" in error.message
    assert not os.path.lexists(tmp_path / "out" / "pkg" / "link")


@pytest.mark.parametrize(
    "name",
    [
        "pkg/.codex/config.toml",
        "pkg/.gemini/settings.json",
        "pkg/.iflow/x",
        "pkg/.claude/settings.json",
        "pkg/.mcp.json",
        "pkg/.env",
        ".env",
        "pkg/sub/.codex/",
    ],
)
def test_engine_control_files_are_refused(tmp_path, name):
    error = _refused(tmp_path, make_zip({"pkg/ok.txt": "ok", name: "x"}))
    assert error.code == "ARCHIVE_UNSAFE_ENTRY"
    assert name.rstrip("/") in error.message


def test_similar_but_harmless_names_are_fine(tmp_path):
    names = _extract(
        tmp_path,
        make_zip(
            {"pkg/.envrc.example": "x", "pkg/codex/notes.md": "x", "pkg/my.env": "x", "pkg/.github/workflow.yml": "x"}
        ),
    )
    assert len(names) == 4


def test_every_offending_entry_is_named(tmp_path):
    error = _refused(tmp_path, make_zip({"pkg/.env": "x", "../a": "x", "pkg/.mcp.json": "x"}))
    for name in ("pkg/.env", "../a", "pkg/.mcp.json"):
        assert name in error.message


def test_duplicate_entries_are_refused(tmp_path):
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("pkg/a.txt", "one")
        with pytest.warns(UserWarning):
            archive.writestr("pkg/a.txt", "two")
    assert _refused(tmp_path, buffer.getvalue()).code == "ARCHIVE_UNSAFE_ENTRY"


def test_member_count_cap(tmp_path):
    limits = ArchiveLimits(max_members=3, max_total_bytes=LIMITS.max_total_bytes, max_ratio=LIMITS.max_ratio)
    assert len(_extract(tmp_path, make_zip({f"p/{i}": "x" for i in range(3)}), limits)) == 3
    second = tmp_path / "second"
    second.mkdir()
    assert _refused(second, make_zip({f"p/{i}": "x" for i in range(4)}), limits).code == "ARCHIVE_TOO_MANY_MEMBERS"


def test_total_size_cap_counts_real_bytes(tmp_path):
    limits = ArchiveLimits(max_members=10, max_total_bytes=10_000, max_ratio=10_000)
    content = make_zip({"p/a": os.urandom(6000), "p/b": os.urandom(6000)}, compression=zipfile.ZIP_STORED)
    assert _refused(tmp_path, content, limits).code == "ARCHIVE_TOO_LARGE"


def test_compression_ratio_cap(tmp_path):
    content = make_zip({"p/zeros": b"\0" * (4 * 1024 * 1024)})
    limits = ArchiveLimits(max_members=10, max_total_bytes=64 * 1024 * 1024, max_ratio=100)
    assert _refused(tmp_path, content, limits).code == "ARCHIVE_RATIO_EXCEEDED"


def test_compressible_but_small_files_pass_the_ratio_check(tmp_path):
    """Text compresses well; only big expanding members are bombs."""
    names = _extract(tmp_path, make_zip({"p/readme.md": "a" * 200_000}))
    assert names == ["p/readme.md"]


@pytest.mark.parametrize(
    "content",
    [b"", b"PK\x03\x04garbage", b"not a zip", make_zip({"a": "b"})[:-30]],
    # Named, not derived from the bytes: the truncated zip holds its build time, which would make
    # two collections of the suite (pytest-xdist's workers) disagree on the test ids.
    ids=["empty", "bad header", "not a zip", "truncated"],
)
def test_invalid_archives(tmp_path, content):
    assert _refused(tmp_path, content).code == "ARCHIVE_INVALID"


def test_corrupted_member_data(tmp_path):
    content = bytearray(make_zip({"p/data.txt": "hello world " * 100}, compression=zipfile.ZIP_STORED))
    index = content.find(b"hello world")
    content[index : index + 5] = b"HELLO"  # CRC no longer matches
    assert _refused(tmp_path, bytes(content)).code == "ARCHIVE_INVALID"
