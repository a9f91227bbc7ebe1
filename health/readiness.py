"""The checks /readyz walks. The database's is the project's own; each app registers its own
check in its AppConfig.ready, so health asks the apps without importing them."""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import NamedTuple

from django.db import connection

OK = "ok"


class _Check(NamedTuple):
    answer: Callable[[], str]
    also_ready: frozenset[str]


def _database() -> str:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
    return OK


_checks: list[tuple[str, _Check]] = [("database", _Check(_database, frozenset()))]


def register(
    name: str, check: Callable[[], str], *, also_ready: Collection[str] = (), before: str | None = None
) -> None:
    """`check` answers "ok" when ready, else why not; an answer in `also_ready` is not "ok" but
    counts as ready. The answers are listed in the order registered, or before the check named
    `before` when it is registered already. Registering a name again (a second ready()) replaces
    its check in place."""
    entry = (name, _Check(check, frozenset(also_ready)))
    names = [registered for registered, _ in _checks]
    if name in names:
        _checks[names.index(name)] = entry
    elif before in names:
        _checks.insert(names.index(before), entry)
    else:
        _checks.append(entry)


def check_all() -> tuple[bool, dict[str, str]]:
    """Every check's answer by name, and whether all of them count as ready. A check that
    raises answers "error: <its exception type>"."""
    answers = {}
    ready = True
    for name, check in _checks:
        try:
            answer = check.answer()
        except Exception as exc:  # a database driver's error, or any check's: not ready
            answer = f"error: {type(exc).__name__}"
        answers[name] = answer
        ready = ready and (answer == OK or answer in check.also_ready)
    return ready, answers
