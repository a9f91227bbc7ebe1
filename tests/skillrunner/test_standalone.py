"""R-OP6: the suite reads nothing outside the checkout; tests/conftest.py installs the guard."""

from __future__ import annotations

import os

import pytest

from tests.conftest import OUTSIDE_READS, REPO
from tests.support.outside_reads import OutsideReadError


# Any folder beside the checkout (a sibling checkout, a reading folder) is out of bounds.
@pytest.mark.parametrize("path", [REPO.parent / "sibling" / "SPEC.md", "../sibling/skills"])
def test_a_read_beside_the_checkout_is_refused(path, monkeypatch):
    monkeypatch.chdir(REPO)
    with OUTSIDE_READS.unrecorded():
        with pytest.raises(OutsideReadError, match="outside the checkout"):
            open(path)  # noqa: SIM115
        with pytest.raises(OutsideReadError):
            os.listdir(path)


def test_reads_inside_the_checkout_and_the_temp_dir_are_not(tmp_path):
    (tmp_path / "x.txt").write_text("x")
    assert (tmp_path / "x.txt").read_text() == "x"
    assert "tests" in os.listdir(REPO)
    assert (REPO / "pyproject.toml").read_text()
    assert OUTSIDE_READS.violations == []
