"""Compiled kernels of this process, one per (process, device, kernel), for every family's
real-GPU launcher.

A kernel compiles on its first use, in the device compile environment (arch pinned, FlyDSL's
disk cache routed); later uses take it without a lock. A first use while the current stream
captures a CUDA graph is refused (``CaptureRefused``): neither compiling nor loading a module
belongs in a graph capture, in any mode; the op keeps PyTorch's path for that call, and a run
before capture (vLLM's warm-up) makes the kernel available to later captures. A compile that failed is remembered
and raises the same error again without recompiling: a warm graph whose toolchain broke must
not re-trace on every call before the op falls back to PyTorch.

The compile itself runs in a worker process (``runtime.isolated``): ``dispatch`` has it fill
FlyDSL's disk cache first, so the ``flyc.compile`` here only traces and loads, and an LLVM
abort kills a worker, not the caller.
"""

from __future__ import annotations

import os
import threading
from typing import Any

class CaptureRefused(RuntimeError):
    """A kernel's first use in this process came while a CUDA graph was being captured."""


_COMPILED: dict = {}
_FAILED: dict = {}  # key -> the error of its failed compile
_LOCK = threading.Lock()


def launch_key(jit_fn, device) -> tuple:
    # A compiled kernel belongs to one process (fork safety) and one device (module loads).
    return (os.getpid(), device.index or 0, jit_fn)


def first_use(key, compile_fn, prebuild=None) -> tuple[Any, bool]:
    """``(result, ran_now)``: ``compile_fn()`` run once per key, under ``device_compile_env``.
    ``prebuild(setup)``, given the ``DeviceCompile`` in force, runs just before it unless
    run-only mode forbids compiling (``dispatch`` compiles in a worker there)."""
    hit = _COMPILED.get(key)  # hot path: no lock once compiled
    if hit is not None:
        return hit, False
    from .arch import device_arch
    from .compile import device_compile_env

    if _capturing():
        raise CaptureRefused("FlyDSL kernel not yet loaded in this process and the current stream is capturing a "
                             "CUDA graph: torch_flydsl never compiles or loads kernels during capture (run the op "
                             "once before capturing, as vLLM's warm-up does)")
    with _LOCK:
        hit = _COMPILED.get(key)
        if hit is not None:
            return hit, False
        if key in _FAILED:
            raise _FAILED[key]
        try:
            with device_compile_env(device_arch(key[1]) or "gfx950") as setup:
                built = prebuild is not None and not setup.run_only and prebuild(setup)
                hit = _load(compile_fn, key) if built else compile_fn()
        except Exception as e:
            _FAILED[key] = e
            raise
        _COMPILED[key] = hit
        return hit, True


def _load(compile_fn, key):
    """``compile_fn()`` after a worker built the binary: in run-only mode, so that this process
    only traces and loads. Should FlyDSL not find the worker's binary under the key it computes
    here (a toolchain the two processes see differently), the kernel compiles here after all, with
    one warning: slower to find out, never a kernel lost."""
    from .compile import patched_env

    try:
        with patched_env({"FLYDSL_RUNTIME_RUN_ONLY": "1"}):
            return compile_fn()
    except RuntimeError as e:
        if "FLYDSL_RUNTIME_RUN_ONLY" not in str(e):
            raise
        from torch_flydsl_boot import warn_once

        name = getattr(getattr(key[2], "func", None), "__name__", "a kernel")
        warn_once(f"handover-{name}", f"torch_flydsl: {name} was compiled in a worker process, but this process "
                                      f"did not find that binary ({e}); compiling it here instead")
        return compile_fn()


def _capturing() -> bool:
    import torch

    try:
        return torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()
    except Exception:
        return False


def _prebuild(jit_fn, args: tuple):
    """``prebuild(setup) -> bool``: the kernel built in a worker (False: it has no recipe and
    compiles in this process)."""
    from . import isolated

    return lambda setup: isolated.build_for_device(jit_fn, args, setup.cache_dir, setup.arch)


def compiled_for(jit_fn, args: tuple, device):
    """FlyDSL 0.4+'s ``CompiledFunction`` for ``jit_fn(*args)`` on ``device``, compiled once per
    process and device (in a worker, into FlyDSL's disk cache, which this process loads from);
    calling it skips the per-call retrace."""
    import flydsl.compiler as flyc

    compiled, _ = first_use(launch_key(jit_fn, device), lambda: flyc.compile(jit_fn, *args), _prebuild(jit_fn, args))
    return compiled


def dispatch(jit_fn, args: tuple, device) -> None:
    """Run ``jit_fn(*args)`` on ``device`` (see ``compiled_for``)."""
    from .probe import flydsl_has_cpu_safe_compile

    if flydsl_has_cpu_safe_compile():
        compiled_for(jit_fn, args, device)(*args)
        return
    # 0.3.x: the jit function compiles on its first call, which also launches it; later calls
    # dispatch by argument types.
    _, launched = first_use(launch_key(jit_fn, device), lambda: jit_fn(*args) or True, _prebuild(jit_fn, args))
    if not launched:
        jit_fn(*args)
