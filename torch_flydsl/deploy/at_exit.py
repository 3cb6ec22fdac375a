"""Run a save when the process that recorded something ends, in every kind of process a model
server starts, and soon after something new was recorded, for the processes that are ended
without any exit hook.

At the end: ``atexit`` alone is not enough: a ``multiprocessing`` child (vLLM's workers are
forked ones) ends with ``os._exit`` after its target returns, which skips ``atexit``. What such a
child does run is ``multiprocessing.util._exit_function``, the same function ``multiprocessing``
registers with ``atexit`` in the main process, and it runs the registered finalizers
(``multiprocessing.util.Finalize`` with an exit priority). So a save registered with ``on_exit``
runs once at the end of the main process and of fork, spawn and forkserver children alike.

Soon: a Ray actor (vLLM's Ray executor ends its workers with ``ray.kill``), or any process ended
by SIGKILL, runs no Python code at its end. ``soon(key)`` (the caller has something new) has
``key``'s save run by a background thread within ``DELAY_S``: the first request of a quiet
process saves at once, later ones are gathered and saved once per ``DELAY_S``. The thread lives
only while requests keep coming (it ends after a quiet ``DELAY_S``), so a process that recorded
its shapes during warm-up carries no extra thread while it serves. A process killed without
warning loses at most what it recorded in its last ``DELAY_S`` (plus one write).

Every save runs under one lock (``_io``): the thread's and the final one never overlap. A fork
waits for a save in flight (``os.register_at_fork``), so no child starts with a file lock its
parent's thread held (``fcntl.flock`` locks belong to the open file, which a child inherits).

A forked child inherits its parent's state but not its finalizers or threads
(``multiprocessing`` clears the finalizers in the child), so ``on_exit`` registers again in a
process whose pid differs from the one that registered, and ``registered_here`` tells a caller
to start its own buffer there.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any, Callable, Optional

DELAY_S = 1.0  # the longest a save asked for with soon() waits (plus one write in flight)

_registered: dict = {}  # key -> (the pid that registered it, fn, args)
_lock = threading.Lock()  # guards _registered, _pending, _thread
_io = threading.RLock()  # held around every save
_pending: set = set()  # keys soon() asked for that the thread has not saved yet
_thread: Optional[threading.Thread] = None  # this process's saver thread, while it runs
_thread_pid = 0


def registered_here(key: str) -> bool:
    """Whether ``key``'s save is registered in this very process (not only in a parent)."""
    entry = _registered.get(key)
    return entry is not None and entry[0] == os.getpid()


def on_exit(key: str, fn: Callable[..., Any], *args: Any) -> None:
    """Run ``fn(*args)`` once when this process ends (main process or ``multiprocessing``
    child, any start method), and whenever ``soon(key)`` asks; a second call with the same
    ``key`` in the same process does nothing."""
    if registered_here(key):
        return
    with _lock:
        if registered_here(key):
            return
        from multiprocessing import util  # registers its exit function with atexit on import

        util.Finalize(None, _run, args=(key,), exitpriority=10)
        _registered[key] = (os.getpid(), fn, args)


def soon(key: str) -> None:
    """Have ``key``'s save (registered in this process by ``on_exit``) run within ``DELAY_S``,
    on the saver thread (started here when none runs). About a microsecond when a thread runs;
    never raises (at interpreter shutdown no thread starts: the final save covers it)."""
    global _thread, _thread_pid
    if not registered_here(key):
        return
    with _lock:
        _pending.add(key)
        pid = os.getpid()
        if _thread is not None and _thread_pid == pid:
            return
        thread = threading.Thread(target=_saver, name="torch_flydsl-save", daemon=True)
        try:
            thread.start()
        except Exception:  # noqa: BLE001 - "can't create new thread at interpreter shutdown"
            return
        _thread, _thread_pid = thread, pid


def _saver() -> None:
    global _thread
    while True:
        with _lock:
            keys = sorted(_pending)
            _pending.clear()
            if not keys:
                _thread = None  # under the lock: a soon() after this starts another thread
                return
        for key in keys:
            _run(key)
        time.sleep(DELAY_S)  # what is asked for meanwhile is saved in the next round


def _run(key: str) -> None:
    entry = _registered.get(key)
    if entry is None or entry[0] != os.getpid():
        return
    _, fn, args = entry
    with _io:
        fn(*args)


def _before_fork() -> None:
    _io.acquire()  # a save in flight finishes first (its file lock is released before the fork)


def _after_fork_in_parent() -> None:
    _io.release()


def _after_fork_in_child() -> None:
    # The parent's thread is not in the child, and the locks may have been held by one of its
    # threads: the child starts with its own. Its keys are registered again by their callers.
    global _lock, _io, _thread, _pending
    _lock, _io, _thread, _pending = threading.Lock(), threading.RLock(), None, set()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_before_fork, after_in_parent=_after_fork_in_parent,
                        after_in_child=_after_fork_in_child)
