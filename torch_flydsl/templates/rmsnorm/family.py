"""The RMSNorm forward family as the glue sees it (``torch_flydsl.registry``).

Eager only: ``F.rms_norm`` / ``torch.rms_norm`` is ``aten::rms_norm``, a CompositeImplicitAutograd
op on every torch from 2.11 to 2.15, whose C++ body calls ``aten::_fused_rms_norm`` for GPU
tensors. ``_fused_rms_norm`` has a CUDA (ROCm: HIP) kernel and its own autograd formula
(``_fused_rms_norm_backward``, reading the saved input, weight and fp32 ``rstd``): overriding its
CUDA-key kernel below autograd keeps PyTorch's backward, so the family returns ``(y, rstd)``
exactly as PyTorch's kernel does. torch 2.15's in-tree FlyDSL override sits on the same op and
key; the coexistence rule (``serving``, applied by ``torch_flydsl.eager``) decides who
registers and who serves each device.

On a CPU (``TORCH_FLYDSL_EXECUTOR=emulator`` / ``reference-standin``) the CPU stands for the
gfx950: CPU's ``rms_norm`` composite does the math inline instead of calling
``_fused_rms_norm``, so ``cpu_standin_kernels`` installs what a ROCm build has natively: an
``AutogradCPU`` kernel for ``rms_norm`` that calls ``_fused_rms_norm`` (as the GPU branch of the
composite does), and a CPU ``_fused_rms_norm_backward`` from PyTorch's own decomposition (the
GPU has a native kernel for it). Only those executors install them; no ROCm process does.

Under ``torch.compile`` Inductor decomposes ``rms_norm`` / ``_fused_rms_norm`` itself (Triton
code): the eager override is not in compiled graphs, and FakeTensors never reach it (they are
handled at the Python key, above the backend keys it is registered on).

Module level holds only the class; its methods import the family's code lazily.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..family import EagerOverride, KernelFamily
from ..vocabulary import Field, UserOp, torch_dtype

_DTYPES = Field("dtype", str, "bfloat16", ("bfloat16", "float16", "float32"),
                {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"})
RMS_NORM = UserOp(
    "rms_norm", "eager F.rms_norm over the last dim of a contiguous [ROWS, N] tensor",
    (Field("rows"), Field("n")),
    (_DTYPES, Field("weight", bool, True, flag="--no-weight", invert=True, help="weight=None")),
    bench="torch_flydsl.bench.rms_norm",
)

_ARGS = ("input", "normalized_shape", "weight", "eps")
# Per-call decisions by call metadata (shapes, strides, dtypes, offsets, device, eps; the
# device and coexistence rules are torch_flydsl.eager's, applied before this):
# the decline path of a repeated call is one dict lookup. Bounded: cleared when full.
_DECISIONS: dict = {}
_DECISIONS_MAX = 4096


@dataclass
class RmsNormCall:
    x: Any
    weight: Any
    eps: Any
    out: Any  # y
    rstd: Any


def _decide(x, normalized_shape, weight, eps):
    """``(config, problem)`` or a Decline for this call's metadata (uncached)."""
    from ..base import Decline
    from .config import configs_for
    from .eligibility import check_tensors

    problem = check_tensors(x, normalized_shape, weight, eps)
    if isinstance(problem, Decline):
        return problem
    fitting, declined = configs_for(problem, "baseline")
    if not fitting:
        return declined[0][1]
    return fitting[0], problem


# Decline and launcher.outputs_for, bound on the first call (not at ``import torch``).
_lazy: Any = None
_outputs_for: Any = None


def _bind() -> None:
    global _lazy, _outputs_for
    from ..base import Decline
    from .launcher import outputs_for

    _outputs_for = outputs_for
    _lazy = Decline


# ---- CPU stand-ins for what a ROCm build routes natively (emulator / reference-standin only) ----


def _rms_norm_via_fused(keyset, input, normalized_shape, weight=None, eps=None):
    """``aten::rms_norm`` as its composite's GPU branch: ``_fused_rms_norm(...)[0]``."""
    import torch

    return torch.ops.aten._fused_rms_norm.default(input, list(normalized_shape), weight, eps)[0]


def _fused_rms_norm_backward_decomposed(keyset, *args):
    """PyTorch's own ``_fused_rms_norm_backward`` formula (its decomposition), standing in for
    the GPU kernel that CPU builds lack."""
    import torch
    from torch._decomp import decomposition_table

    return decomposition_table[torch.ops.aten._fused_rms_norm_backward.default](*args)


class RmsNorm(KernelFamily):
    name = "rmsnorm"
    package = __package__
    config_class = "RmsNormConfig"
    eager_overrides = (EagerOverride("_fused_rms_norm", "rms_norm"),)
    user_ops = (RMS_NORM,)

    def problem_for(self, op: str, values: dict):
        return self.explain_problem(values["rows"], values["n"], values["dtype"], values["weight"])

    def describe(self, op: str, values: dict) -> str:
        weight = " with weight" if values["weight"] else ""
        return f"dtype={values['dtype']}{weight} (last dim of a contiguous [ROWS, N] tensor)"

    def eager_call(self, target: str, args: tuple, kwargs: dict):
        """``(call, config, problem)`` for an eligible ``_fused_rms_norm`` call (outputs allocated),
        or a Decline with the reason."""
        if _lazy is None:
            _bind()
        Decline = _lazy
        if kwargs:
            v = dict(zip(_ARGS, args), **kwargs)
            x, shape, weight, eps = v["input"], v["normalized_shape"], v.get("weight"), v.get("eps")
        else:
            x, shape, weight, eps = (tuple(args) + (None, None))[:4]
        w_key = None if weight is None else (weight.shape, weight.stride(), weight.dtype, weight.device,
                                             weight.storage_offset())
        key = (x.shape, x.stride(), x.dtype, x.device, x.storage_offset() % 16, tuple(shape), w_key, eps)
        decided = _DECISIONS.get(key)
        if decided is None:
            decided = _decide(x, shape, weight, eps)
            if len(_DECISIONS) >= _DECISIONS_MAX:
                _DECISIONS.clear()
            _DECISIONS[key] = decided
        if isinstance(decided, Decline):
            return decided
        cfg, problem = decided
        y, rstd = _outputs_for(x)
        return RmsNormCall(x, weight, eps, (y, rstd), rstd), cfg, problem

    def run_reference(self, cfg, problem, call: RmsNormCall) -> None:
        from .reference import reference

        y, rstd = call.out
        ry, rr = reference(call.x, call.weight, call.eps)
        y.copy_(ry.to(y.dtype))
        rstd.copy_(rr.to(rstd.dtype))

    def run_emulated(self, cfg, problem, call: RmsNormCall):
        from .launcher import run_emulated

        y, rstd = call.out
        return run_emulated(cfg, call.x, call.weight, y, rstd, call.eps, problem=problem)

    def launch(self, cfg, problem, call: RmsNormCall) -> None:
        from .launcher import launch

        y, rstd = call.out
        launch(cfg, call.x, call.weight, y, rstd, call.eps, problem=problem)

    def explain_problem(self, rows: int, n: int, dtype="bf16", weight: bool = True):
        """The problem (or Decline) for a contiguous ``[rows, n]`` input, as if on gfx950."""
        import torch

        from ..base import TensorMeta
        from .eligibility import check_problem

        dt = torch_dtype(_DTYPES.coerce(dtype)) if isinstance(dtype, str) else dtype
        x = TensorMeta.contiguous((rows, n), dt)
        w = TensorMeta.contiguous((n,), dt) if weight else None
        return check_problem(x, (n,), w, None)

    def lds_bytes(self, cfg, problem) -> int:
        """Static LDS: two buffers of one fp32 partial per wave when a row has several waves."""
        return 2 * cfg.waves * 4 if cfg.waves > 1 else 0

    def workgroups(self, cfg, problem) -> int:
        from .launcher import workgroups_for

        return workgroups_for(cfg, problem.rows)

    def cpu_standin_kernels(self) -> tuple:
        """What a ROCm build routes natively, for the CPU executors."""
        return (
            ("rms_norm", "AutogradCPU", _rms_norm_via_fused),
            ("_fused_rms_norm_backward", "CPU", _fused_rms_norm_backward_decomposed),
        )


FAMILY = RmsNorm()
