"""Registries of named plug-ins (the lm-evaluation-harness / trl way): a decorator registers a class under a name,
and a lookup by an unknown name fails listing the known ones.

A registry knows its package: the first lookup imports every module in it, so a plug-in in a new file of
``inference/dynamic_rag/triggers/`` or ``inference/dynamic_rag/queries/`` is found without an edit anywhere else.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class Registry(Generic[T]):
    """Plug-in classes of one kind (``trigger``, ``query``) by name; each is instantiated once, on registration."""

    def __init__(self, kind: str, package: str):
        self.kind, self.package = kind, package
        self._items: dict[str, T] = {}
        self._discovered = False

    def register(self, name: str) -> Callable[[type[T]], type[T]]:
        """Class decorator: ``@register_trigger("rind")``. A name may be registered once."""

        def add(cls: type[T]) -> type[T]:
            if name in self._items and type(self._items[name]) is not cls:
                raise ValueError(f"{self.kind} '{name}' is already registered by {type(self._items[name]).__name__}")
            cls.name = name  # type: ignore[attr-defined]
            self._items[name] = cls()
            return cls

        return add

    def unregister(self, name: str) -> None:
        """Remove a plug-in (tests that register one of their own clean up with this)."""
        self._items.pop(name, None)

    def discover(self) -> None:
        """Import every module of the package once, so that their decorators run."""
        if self._discovered:
            return
        self._discovered = True
        pkg = importlib.import_module(self.package)
        for info in sorted(pkgutil.iter_modules(pkg.__path__), key=lambda i: i.name):
            if not info.name.startswith("_"):
                importlib.import_module(f"{self.package}.{info.name}")

    def get(self, name: str) -> T:
        self.discover()
        if name not in self._items:
            raise ValueError(f"unknown {self.kind} '{name}' (known: {', '.join(self.names())})")
        return self._items[name]

    def names(self) -> list[str]:
        self.discover()
        return list(self._items)

    def items(self) -> list[tuple[str, T]]:
        self.discover()
        return list(self._items.items())
