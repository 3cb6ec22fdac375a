"""Run a save when the process that recorded something ends, in every kind of process a model
server starts.

``atexit`` alone is not enough: a ``multiprocessing`` child (vLLM's workers are forked ones)
ends with ``os._exit`` after its target returns, which skips ``atexit``. What such a child does
run is ``multiprocessing.util._exit_function``, the same function ``multiprocessing`` registers
with ``atexit`` in the main process, and it runs the registered finalizers
(``multiprocessing.util.Finalize`` with an exit priority). So a save registered here runs once
at the end of the main process and of fork, spawn and forkserver children alike.

A forked child inherits its parent's state but not its finalizers (``multiprocessing`` clears
them in the child), so ``on_exit`` registers again in a process whose pid differs from the one
that registered, and ``fresh_in_child`` tells a caller to start its own buffer there.
"""

from __future__ import annotations

import os
import threading
from typing import Any, Callable

_registered: dict = {}  # key -> the pid that registered it
_lock = threading.Lock()


def registered_here(key: str) -> bool:
    """Whether ``key``'s save is registered in this very process (not only in a parent)."""
    return _registered.get(key) == os.getpid()


def on_exit(key: str, fn: Callable[..., Any], *args: Any) -> None:
    """Run ``fn(*args)`` once when this process ends (main process or ``multiprocessing``
    child, any start method); a second call with the same ``key`` in the same process does
    nothing."""
    if registered_here(key):
        return
    with _lock:
        if registered_here(key):
            return
        from multiprocessing import util  # registers its exit function with atexit on import

        util.Finalize(None, fn, args=args, exitpriority=10)
        _registered[key] = os.getpid()
