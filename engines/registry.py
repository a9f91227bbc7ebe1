"""The engines this service can run: every concrete EngineAdapter defined in a module of this
package. Adding an engine is adding one module (see README.md)."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from types import ModuleType

from .base import EngineAdapter


def adapters_in(module: ModuleType) -> list[EngineAdapter]:
    """One instance of each concrete adapter class `module` defines (not merely imports)."""
    return [
        cls()
        for cls in vars(module).values()
        if inspect.isclass(cls)
        and issubclass(cls, EngineAdapter)
        and cls.__module__ == module.__name__
        and not inspect.isabstract(cls)
    ]


def discover(package_name: str) -> dict[str, EngineAdapter]:
    """The adapters of every module in the package, by name, in listing order."""
    package = importlib.import_module(package_name)
    found = [
        adapter
        for info in pkgutil.iter_modules(package.__path__)
        for adapter in adapters_in(importlib.import_module(f"{package_name}.{info.name}"))
    ]
    found.sort(key=lambda adapter: (adapter.listing_order, adapter.name))
    adapters: dict[str, EngineAdapter] = {}
    for adapter in found:
        if adapter.name in adapters:
            raise RuntimeError(f"two engine adapters are named {adapter.name!r}")
        adapters[adapter.name] = adapter
    return adapters


ADAPTERS: dict[str, EngineAdapter] = discover(__package__)
ENGINE_NAMES: tuple[str, ...] = tuple(ADAPTERS)
# What configures any of the CLIs: skill packages and uploads never bring their own (R-SK2).
CONTROL_NAMES: frozenset[str] = frozenset(name for adapter in ADAPTERS.values() for name in adapter.control_names())


def get_adapter(name: str) -> EngineAdapter:
    """The adapter for ``name``; KeyError names the known engines."""
    try:
        return ADAPTERS[name]
    except KeyError:
        raise KeyError(f"unknown engine {name!r}; known: {', '.join(ENGINE_NAMES)}") from None
