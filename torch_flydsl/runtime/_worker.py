"""The compile worker's main loop: ``python -m torch_flydsl.runtime._worker REQ_FD REPLY_FD``.

Started by ``runtime.workers`` (never by a user). It reads length-prefixed pickled requests
``(function reference, args, env)`` from ``REQ_FD``, runs each, and writes
``(True, value)`` or ``(False, (exception module, exception name, message))`` to ``REPLY_FD``. Everything that can kill a
process (an LLVM ``abort()``, a segfault, running out of memory) kills only this one; the
parent sees the pipe close and reads the signal and the last lines of our stderr.

The protocol has its own pipes, not stdout: FlyDSL, MLIR and LLVM print to file descriptor 1,
which here goes to the same log file as stderr.

The worker exits when its parent is gone, however the parent died: the request pipe reaches
end of file between jobs, and a watchdog thread sees the parent process id change during a job
(a SIGKILLed parent runs no cleanup; its workers must not outlive it holding its stdout).
"""

from __future__ import annotations

import importlib
import os
import pickle
import struct
import sys
import threading
import time

_HEADER = struct.Struct("<Q")
WATCH_SECONDS = 0.2


def read_frame(fd: int):
    """One pickled object from ``fd``; None at end of file."""
    head = _read_exactly(fd, _HEADER.size)
    if head is None:
        return None
    body = _read_exactly(fd, _HEADER.unpack(head)[0])
    if body is None:
        return None
    return pickle.loads(body)


def write_frame(fd: int, obj) -> None:
    body = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    data = memoryview(_HEADER.pack(len(body)) + body)
    while data:
        data = data[os.write(fd, data):]


def _read_exactly(fd: int, n: int):
    chunks, got = [], 0
    while got < n:
        chunk = os.read(fd, n - got)
        if not chunk:
            return None
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def resolve(ref: str):
    """``"package.module:function"`` -> the function."""
    module, _, name = ref.partition(":")
    obj = importlib.import_module(module)
    for part in name.split("."):
        obj = getattr(obj, part)
    return obj


def _watch_parent(parent: int) -> None:
    while True:
        if os.getppid() != parent:
            os._exit(3)
        time.sleep(WATCH_SECONDS)


def _run(ref: str, args: tuple, env: dict):
    from .compile import patched_env

    with patched_env(env):
        return resolve(ref)(*args)


def main(argv: list) -> int:
    req, reply, parent = int(argv[1]), int(argv[2]), int(argv[3])
    if os.getppid() != parent:
        return 3  # the parent died before we started
    threading.Thread(target=_watch_parent, args=(parent,), daemon=True, name="parent-watch").start()
    os.dup2(2, 1)  # stray prints (LLVM, FlyDSL) go to the log, never into the reply pipe
    sys.stdout = sys.stderr
    while True:
        request = read_frame(req)
        if request is None:
            return 0  # the parent closed the pipe (or died)
        ref, args, env = request
        try:
            answer = (True, _run(ref, args, env))
        except BaseException as e:  # noqa: BLE001 - every failure becomes the job's answer
            answer = (False, (type(e).__module__, type(e).__qualname__, str(e)))
        try:
            write_frame(reply, answer)
        except BrokenPipeError:
            return 0
        except Exception as e:  # an unpicklable result
            write_frame(reply, (False, ("builtins", "RuntimeError",
                                        f"the worker could not send its result back ({type(e).__name__}: {e})")))
        sys.stderr.flush()


if __name__ == "__main__":
    sys.exit(main(sys.argv))
