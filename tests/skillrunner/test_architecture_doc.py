"""docs/architecture.md names functions, classes and modules of the code: each must exist, so the
paths it describes stay the code's paths."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[2] / "docs" / "architecture.md"
PACKAGES = (
    "accounts",
    "enginehost",
    "engines",
    "live",
    "metrics",
    "notifications",
    "runs",
    "skills",
    "skillrunner",
    "upstream",
    "kernel",
    "processes",
    "health",
    "worker",
)
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


# The project's wiring, which names every app's URLs and consumers: the one place that may import any app.
WIRING = {"skillrunner/urls.py", "skillrunner/asgi.py"}
TABLE_ROW = re.compile(r"^\| `(\w+)/` \|.*\| ([^|]+) \|$", re.MULTILINE)


def _allowed_imports() -> dict[str, set[str]]:
    """Each app's "may import" cell: the apps it names before any further sentence."""
    return {app: set(re.findall(r"`(\w+)`", cell.split(". ")[0])) for app, cell in TABLE_ROW.findall(DOC.read_text())}


def _imported_apps(app: str) -> set[tuple[str, str]]:
    """(app, file) for every import of another project app in `app`'s code, migrations aside."""
    root = DOC.parent.parent
    found = set()
    for path in (root / app).rglob("*.py"):
        relative = path.relative_to(root).as_posix()
        if {"migrations", "node_modules"} & set(path.parts) or relative in WIRING:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            found |= {(name.split(".")[0], relative) for name in names if name.split(".")[0] in PACKAGES}
    return {(other, relative) for other, relative in found if other != app}


def test_the_table_lists_every_app():
    assert set(_allowed_imports()) == set(PACKAGES)


@pytest.mark.parametrize("app", PACKAGES)
def test_no_app_imports_a_higher_layer(app):
    """The import graph is the table's: an app imports only the apps its row allows."""
    allowed = _allowed_imports()[app]
    assert {(other, path) for other, path in _imported_apps(app) if other not in allowed} == set()


@pytest.mark.parametrize("app", PACKAGES)
def test_each_row_allows_only_what_its_app_imports(app):
    """The rows are as tight as the code: an allowance no import uses is taken out of the table."""
    assert _allowed_imports()[app] - {other for other, _ in _imported_apps(app)} == set()
