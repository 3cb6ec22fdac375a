"""Eager overrides: a family's kernel serves the eligible calls of an aten op; PyTorch's own
kernel for that op and dispatch key (captured before ours is registered) serves every other.

A family lists its overrides in ``KernelFamily.eager_overrides`` and implements
``eager_call(target, args, kwargs) -> (call, config, problem) | Decline`` (allocating the
output) plus the usual executors. This module alone applies the device rule and the
coexistence rule to each call (``_device_gate``); families decide eligibility only. Overrides are registered at ``enable()`` only where a call
could be ours: the CUDA key on ROCm builds (the device's arch is checked per call), and the
CPU key under the emulator / reference-standin executors, so tests and the demo drive the real
dispatch path on CPU. Registration imports neither FlyDSL nor Inductor.

``disabled()`` (thread-local, restores on exit) sends every call to PyTorch's kernel;
``TORCH_FLYDSL_EAGER=0`` keeps the overrides from being registered at all (read at start-up);
``eager_enabled()`` says whether this thread's calls can reach them. With the logger at debug
(``TORCH_FLYDSL_LOG=debug``) every overridden call logs one line naming who served it
(``FlyDSL <config>`` or ``PyTorch's kernel: <reason>``); without it the decline path costs no
formatting. A kernel that cannot run here (compile failure, no gfx950) falls back to PyTorch's
kernel with one warning per reason; the emulator finding a kernel wrong (race, out of bounds)
raises.

A family may also override ``cpu_standin_kernels() -> ((op, key, kernel), ...)``: what a ROCm
build routes natively but a CPU build does not (e.g. a composite op's GPU branch), installed
only under the CPU executors so that the CPU stands for the gfx950 on the real dispatch path.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import warnings
from typing import Any, Optional

from ._log import log

DEBUG = logging.DEBUG
Decline: Any = None  # templates.base.Decline, bound on the first call (_take)

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


def eager_enabled() -> bool:
    """Whether eager calls in this thread can reach the plugin's kernels: overrides registered
    in this process (plugin enabled, ``TORCH_FLYDSL_EAGER`` not off, a dispatch key that could
    be ours) and not inside ``disabled()``."""
    return bool(_registered) and not is_disabled()


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


def _deferred(override, key: str, index: Optional[int] = None) -> Optional[str]:
    """Why the plugin leaves this override's op to torch's in-tree FlyDSL override (torch 2.15+)
    on ``key`` (and, per call, CUDA device ``index``), following the coexistence rule
    (``serving``); None: ours serves. On the CUDA key only an in-tree override that really
    registered the op counts (at registration no device is queried); under the CPU executors
    the CPU stands for the gfx950, so the install-level answer decides, as everywhere else."""
    from . import serving

    if key == "CPU":
        return serving.deferral(override.serving, "cpu")
    why = serving.deferral(override.serving, "cuda", index or 0, assume_gfx950=index is None)
    if why:
        from .runtime import intree

        registered = intree._registered_eager_ops()
        aten = intree.EAGER_ATEN.get(override.serving, override.target)
        if registered is not None and aten not in registered:
            return None
    return why


def register() -> None:
    """Install every family's overrides for this process's keys (idempotent). Nothing with
    ``TORCH_FLYDSL_EAGER=0``."""
    import torch

    from . import config
    from .registry import families

    if not config.eager_on():
        return
    for family in families():
        for override in family.eager_overrides:
            for key in dispatch_keys():
                if (override.target, key) in _registered:
                    continue
                why = _deferred(override, key)
                if why:
                    log.debug("aten.%s on %s: not overridden: %s", override.target, key, why)
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
                if key == "CPU":
                    _register_cpu_standins(family)


def _register_cpu_standins(family) -> None:
    import torch

    for op, key, kernel in family.cpu_standin_kernels():
        if (op, key) in _registered:
            continue
        lib = torch.library.Library("aten", "IMPL")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            lib.impl(op, kernel, key, with_keyset=True)
        _libs.append(lib)
        _registered[(op, key)] = None


def _router(family, override, key: str, original):
    def route(keyset, *args, **kwargs):
        if not is_disabled():
            out = _take(family, override, args, kwargs)
            if out is not None:
                return out
        elif log.isEnabledFor(DEBUG):
            log.debug("aten.%s: PyTorch's kernel: torch_flydsl.disabled()", override.target)
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


# Per (serving name, device, executor): why the plugin's kernels do not serve calls there, or
# None. The one place eager calls meet the device and coexistence rules (families decide
# eligibility only); a repeated call pays one dict probe. Bounded: cleared when full.
_DEVICE_GATES: dict = {}
_DEVICE_GATES_MAX = 256
_MISS = object()
_environ = os.environ


def _device_gate(override, args: tuple, kwargs: dict) -> Optional[str]:
    """Why this call's device is not the plugin's (no gfx950, the wrong executor) or why the
    coexistence rule leaves the op to torch's in-tree backend on it; None: the family decides.
    The device is the first argument's (every overridden op's first operand is a tensor). A
    repeated call costs one dict probe, keyed by the executor setting as spelled in the
    environment (validating it is left to the miss)."""
    first = args[0] if args else next(iter(kwargs.values()), None)
    device = getattr(first, "device", None)
    if device is None:
        return None
    key = (override.serving, device, _environ.get("TORCH_FLYDSL_EXECUTOR"))
    why = _DEVICE_GATES.get(key, _MISS)
    if why is not _MISS:
        return why
    from .runtime.launch_guard import device_decline

    why = device_decline(device)
    if why is not None:
        why = f"[device] {why}"
    else:
        deferred = _deferred(override, "CPU" if device.type == "cpu" else "CUDA", device.index or 0)
        why = None if deferred is None else f"[version] {deferred}"
    if len(_DEVICE_GATES) >= _DEVICE_GATES_MAX:
        _DEVICE_GATES.clear()
    _DEVICE_GATES[key] = why
    return why


def _take(family, override, args: tuple, kwargs: dict) -> Optional[Any]:
    """Our kernel's output for this call, or None for PyTorch's kernel."""
    global Decline
    if Decline is None:  # bound on the first call: this module loads inside ``import torch``
        from .templates.base import Decline
    why = _device_gate(override, args, kwargs)
    if why is not None:
        if log.isEnabledFor(DEBUG):
            log.debug("aten.%s: PyTorch's kernel: %s", override.target, why)
        return None
    try:
        taken = family.eager_call(override.target, args, kwargs)
    except Exception as e:  # a bug of ours must never fail the user's call: PyTorch's kernel runs
        _say(logging.WARNING, (override.target, type(e).__name__), "aten.%s: PyTorch's kernel runs: %s: %s",
             override.target, type(e).__name__, e)
        return None
    if isinstance(taken, Decline):
        if log.isEnabledFor(DEBUG):
            log.debug("aten.%s: PyTorch's kernel: %s", override.target, taken)
        return None
    return _run(family, override, *taken)


def _run(family, override, call, cfg, problem) -> Optional[Any]:
    from .emulator.errors import EmulatorError
    from .runtime.compile import CompileError
    from .runtime.launch_guard import LaunchRefused, executor_for

    out = call.out
    try:
        executor = executor_for((out[0] if isinstance(out, tuple) else out).device)
        family.execute(executor, cfg, problem, call)
    except LaunchRefused as e:
        if log.isEnabledFor(DEBUG):
            log.debug("aten.%s: PyTorch's kernel: %s", override.target, e)
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
    if log.isEnabledFor(DEBUG):
        log.debug("aten.%s: FlyDSL %s", override.target, cfg.key())
    return out


def _override(target: str):
    from .registry import families

    return next(((f, o) for f in families() for o in f.eager_overrides if o.target == target), (None, None))


def serve(target: str, args: tuple, kwargs: Optional[dict] = None) -> Optional[Any]:
    """For an integration that picks per call between the plugin and its own code (e.g.
    ``integrations.transformers``): a call of ``aten.<target>`` taken below autograd exactly as
    the registered override takes it (device and coexistence rules, the family's eligibility,
    the launch and its fallbacks): the plugin's output, or None where PyTorch's kernel would
    serve it (the reason logged at debug). ``disabled()`` is the caller's to honour."""
    family, override = _override(target)
    return None if family is None else _take(family, override, args, kwargs or {})


def decline(target: str, args: tuple, kwargs: Optional[dict] = None) -> Optional[str]:
    """Why a dispatched call of ``aten.<target>`` with these arguments would run PyTorch's
    kernel (None: the plugin's would take it), decided as ``serve`` decides but running nothing
    (the family allocates its outputs to decide; they are dropped)."""
    global Decline
    family, override = _override(target)
    if family is None:
        return f"aten.{target} has no eager override"
    if Decline is None:
        from .templates.base import Decline
    why = _device_gate(override, args, kwargs or {})
    if why is not None:
        return why
    try:
        taken = family.eager_call(override.target, args, kwargs or {})
    except Exception as e:  # as in _take: a bug of ours leaves the call to PyTorch's kernel
        return f"{type(e).__name__}: {e}"
    return str(taken) if isinstance(taken, Decline) else None
