"""R-SK7: a skill's runtime.dependencies become a uv-built environment, built once and reused.

These build real environments from the package index (this machine reaches it) with a tiny
pure-Python package, and try one that does not exist.
"""

from __future__ import annotations

import fcntl
import subprocess
import threading

import pytest

from enginehost import dependencies
from enginehost.dependencies import DependencyBuildError, environment_key, prepare_environment

TINY = "pyjokes==0.8.3"
MISSING = "skillrunner-no-such-package-7f3c"


def test_key_ignores_order_and_duplicates():
    assert environment_key(["b", "a", "a"]) == environment_key(["a", "b"])
    assert environment_key(["a"]) != environment_key(["a", "b"])


def test_environment_is_built_with_the_package_and_reused(settings, monkeypatch):
    env = prepare_environment([TINY])
    imported = subprocess.run(
        [str(env.bin_dir / "python"), "-c", "import importlib.metadata as m, pyjokes; print(m.version('pyjokes'))"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert imported.stdout.strip() == "0.8.3", imported.stderr
    assert env.root.parent == settings.DATA_DIR / "skill-envs"
    assert env.root in env.readonly_paths

    def no_build(*args, **kwargs):
        raise AssertionError("a ready environment was built again")

    monkeypatch.setattr(dependencies, "_build", no_build)
    assert prepare_environment([TINY, TINY]) == env


def test_two_workers_build_the_same_environment_once(monkeypatch):
    builds = []
    real_build = dependencies._build

    def counting_build(*args, **kwargs):
        builds.append(args[0])
        real_build(*args, **kwargs)

    monkeypatch.setattr(dependencies, "_build", counting_build)
    results: list = []
    threads = [threading.Thread(target=lambda: results.append(prepare_environment([TINY]))) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert len(results) == 2 and results[0] == results[1]
    assert len(builds) == 1


def test_a_package_that_does_not_exist_fails_and_leaves_nothing(settings):
    with pytest.raises(DependencyBuildError) as caught:
        prepare_environment([MISSING])
    assert MISSING in str(caught.value)
    root = settings.DATA_DIR / "skill-envs"
    assert [p.name for p in root.iterdir() if not p.name.endswith(".lock")] == []


def test_waiting_on_a_stuck_builder_is_bounded(settings):
    """Another worker holding the build lock past the bound: a clear error, not a hang."""
    settings.SKILLRUNNER_DEPENDENCY_BUILD_TIMEOUT = 1
    root = settings.DATA_DIR / "skill-envs"
    root.mkdir(parents=True)
    with open(root / f"{environment_key([TINY])}.lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        with pytest.raises(DependencyBuildError, match="still building"):
            prepare_environment([TINY])
