"""Fixtures of the upstream-client suite: the interactive suite's sticky_process runs (the real
Claude Code against the scripted model server) and its trip-planner skill."""

from tests.interactive.conftest import background_runs, claude, model_server, trip  # noqa: F401  (fixtures)
