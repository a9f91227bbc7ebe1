"""The tests are laid out like the code (docs/architecture.md, "The tests"): a folder per package,
four folders for what needs more than the embedded default, and no file name twice."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from tests.skillrunner.test_architecture_doc import PACKAGES

TESTS = Path(__file__).resolve().parents[1]
NEEDS_MORE = {"real_engines", "browser", "scaleout", "end_to_end"}
SHARED = {"support"}


def _test_files() -> list[Path]:
    return [path for path in TESTS.rglob("test_*.py") if "vendor" not in path.parts]


def test_every_test_folder_is_a_package_or_names_what_it_needs():
    folders = {path.parent.relative_to(TESTS).parts[0] for path in _test_files() if path.parent != TESTS}
    assert folders <= set(PACKAGES) | NEEDS_MORE | SHARED, folders - set(PACKAGES) - NEEDS_MORE - SHARED


def test_no_test_lies_outside_a_folder():
    assert [path.name for path in _test_files() if path.parent == TESTS] == []


def test_support_holds_no_tests():
    assert [str(path) for path in _test_files() if path.relative_to(TESTS).parts[0] in SHARED] == []


def test_every_test_file_name_is_unique():
    counts = Counter(path.name for path in _test_files())
    assert {name: count for name, count in counts.items() if count > 1} == {}
