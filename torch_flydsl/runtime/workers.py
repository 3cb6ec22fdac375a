"""A small pool of persistent worker processes for work that can kill a process: FlyDSL compiles.

An LLVM fatal error is an ``abort()``, not an exception, and a FlyDSL compile can hit one
(seen downstream during CUDA-graph capture); a launch without HIP aborts too. So every compile
the plugin starts runs here, in a child process, and the user's process only ever loads what a
child produced. A child that crashes, aborts or runs past its time limit is an ``Outcome`` with
the reason (the signal, the last lines it printed); the pool replaces it and goes on.

Workers are fresh interpreters (``subprocess``, i.e. spawn semantics, never fork: a forked
child would inherit CUDA/HIP and MLIR state mid-use, and ``multiprocessing``'s spawn re-imports
the user's ``__main__``). They are kept between jobs, since starting one (Python, torch, FlyDSL)
costs about as much as a small compile; ``benchmarks/compile_isolation_cost.py`` measures both.
They exit when their parent is gone, however it died (``runtime._worker``).
"""

from __future__ import annotations

import atexit
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from . import _worker

LOG_TAIL_BYTES = 4096
LOG_TAIL_LINES = 8


@dataclass
class Outcome:
    """What one job in a worker came to: its value, or why there is none."""

    value: Any = None
    error: Optional[str] = None  # None: the job returned ``value``; else "Type: message" or the crash
    seconds: float = 0.0
    crashed: bool = False  # the worker died (signal, exit) or was killed at the time limit
    raised: Optional[tuple] = None  # the job's own exception: (module, name, message)

    @property
    def ok(self) -> bool:
        return self.error is None


def _worker_env() -> dict:
    env = dict(os.environ)
    # The worker imports only what a job names: not this plugin's entry point at `import torch`.
    env["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"
    # The package as this process imported it, wherever that is (a checkout on sys.path too).
    here = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join([here] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    return env


def _signal_name(returncode: int) -> str:
    if returncode < 0:
        try:
            return f"killed by signal {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exited with status {returncode}"


class Worker:
    """One child process and its two pipes."""

    def __init__(self):
        req_r, req_w = os.pipe()
        rep_r, rep_w = os.pipe()
        # O_APPEND: truncating the log between jobs keeps each crash report to its own job.
        self.log = tempfile.TemporaryFile(mode="a+b", prefix="torch_flydsl_worker_")
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "torch_flydsl.runtime._worker", str(req_r), str(rep_w), str(os.getpid())],
                pass_fds=(req_r, rep_w), stdin=subprocess.DEVNULL, stdout=self.log, stderr=self.log,
                env=_worker_env(),
            )
        finally:
            os.close(req_r)
            os.close(rep_w)
        self.req, self.rep = req_w, rep_r

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def call(self, ref: str, args: tuple, env: dict, timeout: Optional[float]) -> Outcome:
        t0 = time.perf_counter()
        self.log.seek(0)
        self.log.truncate()
        try:
            _worker.write_frame(self.req, (ref, args, env))
        except (BrokenPipeError, OSError):
            return self._died(t0)
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready, _, _ = select.select([self.rep], [], [], left)
            if ready:
                break
            if deadline is not None and time.monotonic() >= deadline:
                self.kill()
                return Outcome(error=f"ran past its time limit of {timeout:g} s and was killed{self._tail()}",
                               seconds=time.perf_counter() - t0, crashed=True)
        try:
            frame = _worker.read_frame(self.rep)
        except Exception:  # a torn frame: the worker died mid-write
            frame = None
        if frame is None:
            return self._died(t0)
        ok, value = frame
        seconds = time.perf_counter() - t0
        if ok:
            return Outcome(value=value, seconds=seconds)
        return Outcome(error=f"{value[1]}: {value[2]}", seconds=seconds, raised=tuple(value))

    def _died(self, t0: float) -> Outcome:
        try:
            rc = self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.kill()
            rc = self.proc.returncode
        return Outcome(error=f"the worker process {_signal_name(rc)}{self._tail()}",
                       seconds=time.perf_counter() - t0, crashed=True)

    def _tail(self) -> str:
        try:
            self.log.seek(0, os.SEEK_END)
            size = self.log.tell()
            self.log.seek(max(0, size - LOG_TAIL_BYTES))
            text = self.log.read().decode(errors="replace")
        except OSError:
            return ""
        lines = [ln.rstrip() for ln in text.splitlines() if ln.strip()][-LOG_TAIL_LINES:]
        return ("; last output: " + " | ".join(lines)) if lines else ""

    def kill(self) -> None:
        try:
            self.proc.kill()
            self.proc.wait(timeout=10)
        except Exception:
            pass

    def close(self) -> None:
        for fd in (self.req, self.rep):
            try:
                os.close(fd)
            except OSError:
                pass
        try:
            self.proc.wait(timeout=5)  # EOF on its request pipe ends the worker
        except subprocess.TimeoutExpired:
            self.kill()
        self.log.close()


class Pool:
    """At most ``size`` workers, started on demand and kept for later jobs."""

    def __init__(self, size: int):
        self.size = max(1, int(size))
        self._idle: list[Worker] = []
        self._lock = threading.Lock()
        self._slots = threading.BoundedSemaphore(self.size)
        self._executor: Optional[ThreadPoolExecutor] = None
        self._pid = os.getpid()
        self.started = 0  # workers started so far (tests and the cost benchmark read it)

    def run(self, ref: str, args: tuple = (), env: Optional[dict] = None, timeout: Optional[float] = None) -> Outcome:
        """Run ``ref(*args)`` (``"module:function"``) in a worker; blocks until it is done."""
        with self._slots:
            try:
                worker = self._take()
            except OSError as e:
                return Outcome(error=f"could not start a worker process ({type(e).__name__}: {e})", crashed=True)
            outcome = worker.call(ref, args, dict(env or {}), timeout)
            if worker.alive and not outcome.crashed:
                with self._lock:
                    self._idle.append(worker)
            else:
                worker.close()
            return outcome

    def submit(self, ref: str, args: tuple = (), env: Optional[dict] = None,
               timeout: Optional[float] = None) -> "Future[Outcome]":
        with self._lock:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(self.size, thread_name_prefix="torch_flydsl_compile")
            executor = self._executor
        return executor.submit(self.run, ref, args, env, timeout)

    def _take(self) -> Worker:
        with self._lock:
            while self._idle:
                worker = self._idle.pop()
                if worker.alive:
                    return worker
                worker.close()
        self.started += 1
        return Worker()

    def shutdown(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
            executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=False, cancel_futures=True)
        if os.getpid() != self._pid:
            return  # a forked child: those workers are the parent's
        for worker in idle:
            worker.close()


_shared: Optional[Pool] = None
_shared_lock = threading.Lock()


def default_size() -> int:
    return max(1, min(4, os.cpu_count() or 1))


def shared() -> Pool:
    """The process's pool (one per process: a forked child starts its own)."""
    global _shared
    with _shared_lock:
        if _shared is None or _shared._pid != os.getpid():
            _shared = Pool(default_size())
        return _shared


@atexit.register
def _shutdown_shared() -> None:
    pool = _shared
    if pool is not None and pool._pid == os.getpid():
        pool.shutdown()
