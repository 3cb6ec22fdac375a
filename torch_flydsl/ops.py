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


def _fall_back(cfg_key: str, why: str, a, b, out, bias, alpha, beta) -> None:
    from ._log import log

    if getattr(_local, "strict", False):
        raise KernelNotRun(f"FlyDSL {cfg_key} cannot run these operands here: {why}")
    if (cfg_key, why) not in _warned:
        _warned.add((cfg_key, why))
        log.warning("FlyDSL %s not used for these operands, PyTorch computes them: %s", cfg_key, why)
    _torch_fallback(a, b, out, bias, alpha, beta)


def _torch_fallback(a, b, out, bias, alpha, beta) -> None:
    import torch

    if bias is None:
        torch.mm(a, b, out=out)
    else:
        torch.addmm(bias.expand(out.shape), a, b, beta=beta, alpha=alpha, out=out)


def _run_dense(cfg_key: str, a, b, out, bias, alpha: float, beta: float) -> None:
    from .emulator.errors import EmulatorError
    from .runtime.compile import CompileError
    from .runtime.launch_guard import LaunchRefused, executor_for
    from .templates.base import Decline, TensorMeta
    from .templates.dense_gemm.config import DenseGemmConfig, config_fits
    from .templates.dense_gemm.eligibility import check_problem

    try:
        executor = executor_for(out.device)
        cfg = DenseGemmConfig.from_key(cfg_key)
    except (LaunchRefused, ValueError) as e:  # no usable FlyDSL/device here, or a key from elsewhere
        return _fall_back(cfg_key, str(e), a, b, out, bias, alpha, beta)
    # Layouts chosen at compile time can still differ at run time (a cached graph fed other
    # strides, an input whose flexible layout was fixed later): re-check, and keep PyTorch's
    # result when the kernel would not be exact.
    meta = lambda t: None if t is None else TensorMeta.of(t)  # noqa: E731
    problem = check_problem(meta(a), meta(b), meta(out), meta(bias))
    why = problem if isinstance(problem, Decline) else config_fits(cfg, problem)
    if why is not None:
        return _fall_back(cfg_key, str(why), a, b, out, bias, alpha, beta)
    try:
        _execute(executor, cfg, problem, a, b, out, bias, alpha, beta)
    except EmulatorError as e:
        if not isinstance(e.__cause__, CompileError):
            raise  # the emulator found the kernel wrong (race, out of bounds): never hide that
        _fall_back(cfg_key, f"compile failed: {e.__cause__}", a, b, out, bias, alpha, beta)
    except Exception as e:  # compile failed (toolchain gone, cache dir broken, ...), or the launch raised
        _fall_back(cfg_key, f"{type(e).__name__}: {e}", a, b, out, bias, alpha, beta)


def _execute(executor: str, cfg, problem, a, b, out, bias, alpha: float, beta: float) -> None:
    """Run the checked ``problem`` (the family gate ran once for this call, above)."""
    if executor == "reference-standin":
        # Plumbing tests only (named so in every test that uses it): not a FlyDSL kernel.
        from .templates.dense_gemm.reference import reference

        out.copy_(reference(a, b, bias, alpha, beta, device=out.device).to(out.dtype))
    elif executor == "emulator":
        from .templates.dense_gemm.emulated import run_emulated

        run_emulated(cfg, a, b, out, bias, alpha, beta, problem=problem)
    else:
        from .templates.dense_gemm.launcher import launch

        launch(cfg, a, b, out, bias=bias, alpha=alpha, beta=beta, problem=problem)


def _dense_mm_out(a: "torch.Tensor", b: "torch.Tensor", *, cfg: str, out: "torch.Tensor") -> None:
    _run_dense(cfg, a, b, out, None, 1.0, 0.0)


def _dense_addmm_out(
    bias: "torch.Tensor", a: "torch.Tensor", b: "torch.Tensor", *, alpha: float = 1.0, beta: float = 1.0,
    cfg: str, out: "torch.Tensor",
) -> None:
    _run_dense(cfg, a, b, out, bias, float(alpha), float(beta))


def _noop_meta(*args, **kwargs) -> None:
    return None


SCHEMAS = {
    "dense_mm_out": ("(Tensor a, Tensor b, *, str cfg, Tensor(a!) out) -> ()", _dense_mm_out),
    "dense_addmm_out": (
        "(Tensor bias, Tensor a, Tensor b, *, float alpha=1.0, float beta=1.0, str cfg, Tensor(a!) out) -> ()",
        _dense_addmm_out,
    ),
}


def register() -> None:
    """Define the ops once per process (idempotent)."""
    global _lib
    if _lib is not None or _defined():
        return
    import torch

    lib = torch.library.Library(NAMESPACE, "DEF")
    for name, (schema, impl) in SCHEMAS.items():
        lib.define(name + schema)
        lib.impl(name, impl, "CompositeExplicitAutograd")
        lib.impl(name, _noop_meta, "Meta")
    _lib = lib


def _defined() -> bool:
    import torch

    try:
        return all(torch._C._dispatch_has_kernel(f"{NAMESPACE}::{n}") for n in SCHEMAS)
    except Exception:
        return False


def op(name: str):
    import torch

    return getattr(getattr(torch.ops, NAMESPACE), name).default


def call_name(name: str) -> str:
    return f"torch.ops.{NAMESPACE}.{name}.default"
