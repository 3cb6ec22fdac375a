"""Run a callback right after a module finishes executing, without importing it ourselves.

The Inductor glue must install after ``torch._inductor.lowering`` (which ends by importing every
built-in lowering) and before the first lowering runs, yet importing Inductor at ``import torch``
costs seconds. A ``sys.meta_path`` finder wraps that one module's loader instead.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import threading
from typing import Callable

_lock = threading.Lock()
_callbacks: dict[str, list[Callable[[], None]]] = {}


class _WrappedLoader(importlib.abc.Loader):
    def __init__(self, inner: importlib.abc.Loader, name: str):
        self._inner = inner
        self._name = name

    def create_module(self, spec):
        return self._inner.create_module(spec)

    def exec_module(self, module) -> None:
        self._inner.exec_module(module)
        _fire(self._name)

    def __getattr__(self, item):  # get_source, get_code, is_package, ... for tools that ask
        return getattr(self._inner, item)


class _PostImportFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path, target=None):
        if fullname not in _callbacks:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return None
        spec.loader = _WrappedLoader(spec.loader, fullname)
        return spec


_finder = _PostImportFinder()


def _fire(name: str) -> None:
    with _lock:
        callbacks = _callbacks.pop(name, [])
        if not _callbacks and _finder in sys.meta_path:
            sys.meta_path.remove(_finder)
    for cb in callbacks:
        cb()


def when_imported(name: str, callback: Callable[[], None]) -> None:
    """Call ``callback`` once ``name`` has been imported (now, if it already is)."""
    if name in sys.modules:
        callback()
        return
    with _lock:
        _callbacks.setdefault(name, []).append(callback)
        if _finder not in sys.meta_path:
            sys.meta_path.insert(0, _finder)
