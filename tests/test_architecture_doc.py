"""docs/architecture.md names functions, classes and modules of the code: each must exist, so the
paths it describes stay the code's paths."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parent.parent / "docs" / "architecture.md"
PACKAGES = ("accounts", "enginehost", "engines", "live", "notifications", "runs", "skills", "skillrunner", "upstream", "worker")
DOTTED = re.compile(r"`((?:" + "|".join(PACKAGES) + r")(?:\.\w+)+)`")


def _named() -> list[str]:
    return sorted(set(DOTTED.findall(DOC.read_text())))


def _resolve(dotted: str) -> object:
    """The module, or the attribute of the longest importable module prefix."""
    parts = dotted.split(".")
    for split in range(len(parts), 0, -1):
        try:
            found: object = importlib.import_module(".".join(parts[:split]))
        except ModuleNotFoundError:
            continue
        for attribute in parts[split:]:
            found = getattr(found, attribute)
        return found
    raise ModuleNotFoundError(dotted)


def test_the_document_names_code():
    assert len(_named()) > 40  # the paths are spelled out, not summarised


@pytest.mark.parametrize("dotted", _named())
def test_each_name_exists(dotted):
    assert _resolve(dotted) is not None
