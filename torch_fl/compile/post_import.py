"""Run a callback right after a module finishes importing.

torch_fl registers ``flagos`` with dynamo and inductor, but importing either at
``import torch`` would more than double its cost (``torch._dynamo`` alone takes
over a second), so the registration waits for the first import of the module it
extends.  A meta-path finder recognises the watched name, lets the other finders
locate it as usual, and wraps the loader so that the callback sees the fully
executed module before the importer does.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import threading
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

Callback = Callable[[ModuleType], None]


class _Loader(importlib.abc.Loader):
    """The original loader, followed by the callbacks; every other attribute (get_source, get_code, ...) is
    the original's, so tracebacks and ``inspect`` (which dynamo uses) read the module's source as usual."""

    def __init__(self, loader: Any, callbacks: list[Callback]) -> None:
        self._loader = loader
        self._callbacks = callbacks

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self._loader.create_module(spec)  # type: ignore[no-any-return]

    def exec_module(self, module: ModuleType) -> None:
        self._loader.exec_module(module)
        for callback in self._callbacks:
            callback(module)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loader, name)


class _Finder(importlib.abc.MetaPathFinder):
    def __init__(self) -> None:
        self._pending: dict[str, list[Callback]] = {}
        self._lock = threading.Lock()

    def watch(self, name: str, callback: Callback) -> None:
        with self._lock:
            self._pending.setdefault(name, []).append(callback)

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        with self._lock:
            callbacks = self._pending.pop(fullname, None)
        if callbacks is None:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None:
                    spec.loader = _Loader(spec.loader, callbacks)
                return spec
        return None


_FINDER = _Finder()


def after_import(name: str, callback: Callback) -> None:
    """Call ``callback(module)`` once ``name`` is imported: now if it already is, else right after its import."""
    module = sys.modules.get(name)
    if module is not None:
        callback(module)
        return
    _FINDER.watch(name, callback)
    if _FINDER not in sys.meta_path:
        sys.meta_path.insert(0, _FINDER)
