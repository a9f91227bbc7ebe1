"""Engine adapters: run one agent-CLI turn and describe it engine-neutrally (SPEC §4, §6, §7).

This package knows nothing of Django, the database, HTTP or the task queue.
"""

from .registry import ADAPTERS, ENGINE_NAMES, get_adapter

__all__ = ["ADAPTERS", "ENGINE_NAMES", "get_adapter"]
