"""Eager overrides: a family's kernel serves the eligible calls of an aten op; PyTorch's own
kernel for that op and dispatch key (captured before ours is registered) serves every other.

A family lists its overrides in ``Family.eager_overrides`` and implements
``eager_call(target, args, kwargs) -> (call, config, problem) | Decline`` (allocating the
output) plus the usual ``execute``. Overrides are registered at ``enable()`` only where a call
could be ours: the CUDA key on ROCm builds (the device's arch is checked per call), and the
CPU key under the emulator / reference-standin executors, so tests and the demo drive the real
dispatch path on CPU. Registration imports neither FlyDSL nor Inductor.

``disabled()`` (thread-local, restores on exit) sends every call to PyTorch's kernel. A
decline is logged at debug once per reason; a kernel that cannot run here (compile failure,
no gfx950) falls back to PyTorch's kernel with one warning per reason; the emulator finding a
kernel wrong (race, out of bounds) raises.
"""

from __future__ import annotations

import contextlib
import threading
import warnings
from typing import Any, Optional

from ._log import log

_local = threading.local()
_libs: list = []  # keep the torch.library.Library objects alive
_registered: dict = {}  # (target, dispatch key) -> PyTorch's kernel (or None: it had none)
_said: set = set()


@contextlib.contextmanager
def disabled():
    """Within this block (this thread), every overridden op runs PyTorch's own kernel."""
    before = getattr(_local, "off", False)
    _local.off = True
    try:
        yield
    finally:
        _local.off = before


def is_disabled() -> bool:
    return getattr(_local, "off", False)


def dispatch_keys() -> tuple[str, ...]:
    """The keys whose calls could be ours in this process."""
    import torch

    from . import config

    keys = []
    if torch.version.hip:
        keys.append("CUDA")
    if config.executor() in ("emulator", "reference-standin"):
        keys.append("CPU")
    return tuple(keys)


def register() -> None:
    """Install every family's overrides for this process's keys (idempotent)."""
    import torch

    from .registry import families

    for family in families():
        for override in family.eager_overrides:
            for key in dispatch_keys():
                if (override.target, key) in _registered:
                    continue
                qualified = f"aten::{override.target}"
                try:
                    original = torch.library.get_kernel(qualified, key)
                except RuntimeError:  # no kernel for this key: PyTorch's answer is "not implemented"
                    original = None
                lib = torch.library.Library("aten", "IMPL")
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")  # "overriding a previously registered kernel": we chain to it
                    lib.impl(override.target, _router(family, override, key, original), key, with_keyset=True)
                _libs.append(lib)
                _registered[(override.target, key)] = original


def _router(family, override, key: str, original):
    def route(keyset, *args, **kwargs):
        if not is_disabled():
            out = _take(family, override, args, kwargs)
            if out is not None:
                return out
        if original is None:
            raise NotImplementedError(f"Could not run 'aten::{override.target}' with arguments from the '{key}' "
                                      "backend (PyTorch has no kernel for it there)")
        return original.call_boxed(keyset, *args, **kwargs)

    route.__name__ = f"torch_flydsl_{override.target}"
    return route


def _say(level, key, msg, *args) -> None:
    if key not in _said:
        _said.add(key)
        log.log(level, msg, *args)


def _take(family, override, args: tuple, kwargs: dict) -> Optional[Any]:
    """Our kernel's output for this call, or None for PyTorch's kernel."""
    import logging

    from .emulator.errors import EmulatorError
    from .runtime.compile import CompileError
    from .runtime.launch_guard import LaunchRefused, executor_for
    from .templates.base import Decline

    impl = family.impl()
    try:
        taken = impl.eager_call(override.target, args, kwargs)
    except Exception as e:  # a bug of ours must never fail the user's call: PyTorch's kernel runs
        _say(logging.WARNING, (override.target, type(e).__name__), "aten.%s: PyTorch's kernel runs: %s: %s",
             override.target, type(e).__name__, e)
        return None
    if isinstance(taken, Decline):
        _say(logging.DEBUG, (override.target, str(taken)), "aten.%s: PyTorch's kernel: %s", override.target, taken)
        return None
    call, cfg, problem = taken
    try:
        executor = executor_for(call.out.device)
        impl.execute(executor, cfg, problem, call)
    except LaunchRefused as e:
        _say(logging.DEBUG, (override.target, str(e)), "aten.%s: PyTorch's kernel: %s", override.target, e)
        return None
    except EmulatorError as e:
        if not isinstance(e.__cause__, CompileError):
            raise  # the emulator found the kernel wrong: never hide that
        _say(logging.WARNING, (cfg.key(), "compile"), "FlyDSL %s not used, PyTorch's kernel runs: compile failed: %s",
             cfg.key(), e.__cause__)
        return None
    except Exception as e:  # compile failed (toolchain gone, cache dir broken, ...) or the launch raised
        _say(logging.WARNING, (cfg.key(), type(e).__name__), "FlyDSL %s not used, PyTorch's kernel runs: %s: %s",
             cfg.key(), type(e).__name__, e)
        return None
    log.debug("aten.%s: FlyDSL %s", override.target, cfg.key())
    return call.out
