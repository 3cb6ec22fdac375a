"""The plugin's custom ops: what generated code calls when a FlyDSL GEMM wins autotuning.

Registered at ``import torch`` by the entry point (cheap: schema strings and Python impls), so
a warm FX-graph cache in a fresh process finds ``torch.ops.torch_flydsl.*`` without
re-lowering. The op ABI (names, argument order, ``cfg`` as a config key string) is kept stable
across plugin versions: a stale cache entry can only be slow, never crash. Whenever the kernel
cannot run here (operands it would not compute exactly, no usable FlyDSL or linker, a compile
or launch that fails, a device it may not launch on), the op computes PyTorch's result instead
and says why once per (config, reason).

torch is imported inside the functions, not at module level: this module is imported by the
entry point that runs inside ``import torch``, and must also work when a user imports it first.
"""

from __future__ import annotations

import contextlib
import functools
import threading

NAMESPACE = "torch_flydsl"
_lib = None
_warned: set = set()  # (config, reason) pairs already logged: a fallback repeats every call
_local = threading.local()


class KernelNotRun(RuntimeError):
    """Raised instead of falling back while autotuning benchmarks a FlyDSL choice (``strict``)."""


@contextlib.contextmanager
def strict():
    """While autotuning times a FlyDSL choice, a fallback to PyTorch would time PyTorch under our
    name and could win; in this block the op raises instead, so the choice is dropped."""
    before = getattr(_local, "strict", False)
    _local.strict = True
    try:
        yield
    finally:
        _local.strict = before


def _fall_back(family, call, why: str) -> None:
    from ._log import log

    if getattr(_local, "strict", False):
        raise KernelNotRun(f"FlyDSL {call.cfg_key} cannot run these operands here: {why}")
    if (call.cfg_key, why) not in _warned:
        _warned.add((call.cfg_key, why))
        log.warning("FlyDSL %s not used for these operands, PyTorch computes them: %s", call.cfg_key, why)
    family.torch_fallback(call)


@functools.lru_cache(maxsize=None)
def _run_deps():
    """What ``run`` needs, imported once (function-level imports cost ~10 us per call)."""
    from .emulator.errors import EmulatorError
    from .runtime import launch_guard
    from .runtime.compile import CompileError
    from .templates.base import Decline

    return EmulatorError, CompileError, launch_guard, Decline


def run(family, custom_op: str, args: tuple, kwargs: dict) -> None:
    """The body of every custom op: check the operands it got, run the family's kernel on the
    executor this process allows, or compute PyTorch's result and say why."""
    call = family.parse_call(custom_op, args, kwargs)
    why = try_call(family, call)
    if why is not None:
        _fall_back(family, call, why)


def try_run(family, custom_op: str, args: tuple, kwargs: dict):
    """Run the family's kernel for this custom-op call if it can run here: None when it ran,
    else why not (then nothing was computed, and the caller picks its own path: vLLM's
    re-route keeps vLLM's kernel choice)."""
    return try_call(family, family.parse_call(custom_op, args, kwargs))


def try_call(family, call):
    EmulatorError, CompileError, launch_guard, Decline = _run_deps()
    try:
        executor = launch_guard.executor_for(call.out.device)
        checked = family.check_call(call)
    except (launch_guard.LaunchRefused, ValueError) as e:  # no usable FlyDSL/device here, or a key from elsewhere
        return str(e)
    if isinstance(checked, Decline):
        return str(checked)
    cfg, problem = checked
    try:
        family.execute(executor, cfg, problem, call)
    except EmulatorError as e:
        if not isinstance(e.__cause__, CompileError):
            raise  # the emulator found the kernel wrong (race, out of bounds): never hide that
        return f"compile failed: {e.__cause__}"
    except Exception as e:  # compile failed (toolchain gone, cache dir broken, ...), or the launch raised
        return f"{type(e).__name__}: {e}"
    return None


def _impl_for(family, custom_op: str, baseline: bool = False):
    def custom_op_impl(*args, **kwargs) -> None:
        if baseline:  # PyTorch's computation under our op's contract: nothing to check or run
            family.torch_fallback(family.parse_call(custom_op, args, kwargs))
        else:
            run(family, custom_op, args, kwargs)

    custom_op_impl.__name__ = custom_op
    return custom_op_impl


def _noop_meta(*args, **kwargs) -> None:
    return None


def custom_ops() -> dict:
    """Every custom op of every registered family: name -> (family, CustomOp)."""
    from .registry import families

    return {op.name: (f, op) for f in families() for op in f.custom_ops}


def register() -> None:
    """Define the ops once per process (idempotent)."""
    global _lib
    if _lib is not None or _defined():
        return
    import torch

    lib = torch.library.Library(NAMESPACE, "DEF")
    for name, (family, op) in custom_ops().items():
        lib.define(name + op.schema)
        lib.impl(name, _impl_for(family, name, op.baseline), "CompositeExplicitAutograd")
        lib.impl(name, _noop_meta, "Meta")
    _lib = lib
    register_native_fallbacks()


_native_lib = None


def register_native_fallbacks() -> None:
    """With the C++ launcher loaded (``torch_flydsl.native``; a built one is loaded here on a
    ROCm torch), the GEMM ops it serves have its kernel at the CUDA dispatch key, which takes
    ROCm tensors ahead of the CompositeExplicitAutograd impl above (that one keeps every other
    device: one registration per key, none replaced). What the C++ side declines it hands to
    ``torch_flydsl_native::python_<op>``, defined here with the same schema and this module's
    impl, so a decline costs speed, never the result."""
    global _native_lib
    from .native import loader

    if _native_lib is not None or not loader.load_built():
        return
    import torch

    from .native.build import SERVED_OPS

    lib = torch.library.Library("torch_flydsl_native", "FRAGMENT")
    for name, (family, op) in custom_ops().items():
        if name in SERVED_OPS:
            lib.define(f"python_{name}{op.schema}")
            lib.impl(f"python_{name}", _impl_for(family, name, op.baseline), "CompositeExplicitAutograd")
    _native_lib = lib


def _defined() -> bool:
    import torch

    try:
        return all(torch._C._dispatch_has_kernel(f"{NAMESPACE}::{n}") for n in custom_ops())
    except Exception:
        return False


def op(name: str):
    import torch

    return getattr(getattr(torch.ops, NAMESPACE), name).default


def call_name(name: str) -> str:
    return f"torch.ops.{NAMESPACE}.{name}.default"
