"""Host side of the RMSNorm kernel: argument packing, launch, and the emulator run.

Launch: grid ``(min(ceil(rows / rows_per_block), MAX_WORKGROUPS), 1, 1)`` (workgroups loop over
the rest of the rows), block ``(threads, 1, 1)``, static LDS only (partials when a row has
several waves). Arguments: ``y, rstd, x, w`` as 1-D views, then ``rows, n, float(n), eps,
workgroups, stream``.
"""

from __future__ import annotations

import functools
from typing import Any, Optional

import torch

from ..base import Decline
from .config import MAX_WORKGROUPS, RmsNormConfig
from .eligibility import check_tensors
from .problem import RmsNormProblem, default_eps


@functools.lru_cache(maxsize=None)
def _kernel(cfg: RmsNormConfig, dtype: torch.dtype, has_weight: bool):
    from .kernel import KernelSpec, build

    return build(KernelSpec(cfg, dtype, has_weight))


def checked_problem(x, weight, eps) -> RmsNormProblem:
    problem = check_tensors(x, (x.shape[-1],), weight, eps)
    if isinstance(problem, Decline):
        raise ValueError(f"RMSNorm declines these operands: {problem}")
    return problem


def workgroups_for(cfg: RmsNormConfig, rows: int, cap: Optional[int] = None) -> int:
    return max(1, min(-(-rows // cfg.rows_per_block), cap or MAX_WORKGROUPS))


def compile_args(cfg: RmsNormConfig, x, weight, y, rstd, eps=None, stream: Any = None,
                 problem: Optional[RmsNormProblem] = None, workgroups: Optional[int] = None):
    """``(jit_fn, args)`` for ``flyc.compile`` / the emulator; ``y`` and ``rstd`` are the
    contiguous outputs (``rstd`` any shape with ``rows`` fp32 elements)."""
    problem = problem or checked_problem(x, weight, eps)
    jit_fn = _kernel(cfg, problem.dtype, problem.has_weight)
    x_flat = x.reshape(-1) if x.is_contiguous() else x.as_strided((problem.rows * problem.n,), (1,))
    if stream is None:
        import flydsl.expr as fx

        stream = fx.Stream(None)
    args = (y.view(-1), rstd.view(-1), x_flat, weight if weight is not None else x_flat,
            int(problem.rows), int(problem.n), float(problem.n), float(default_eps(eps)),
            workgroups_for(cfg, problem.rows, workgroups), stream)
    return jit_fn, args


def outputs_for(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(y, rstd)`` as ``_fused_rms_norm`` returns them: ``y`` contiguous like ``x``, ``rstd``
    fp32 ``x.shape[:-1] + (1,)``."""
    y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    rstd = torch.empty((*x.shape[:-1], 1), dtype=torch.float32, device=x.device)
    return y, rstd


def launch(cfg: RmsNormConfig, x, weight, y, rstd, eps=None, stream=None, problem=None):
    """Run on the current HIP stream (real GPU only; never without HIP)."""
    if not x.is_cuda:
        raise RuntimeError("rmsnorm.launch needs device tensors on a ROCm GPU")
    from ...runtime.kernel_cache import dispatch

    if stream is None:
        stream = torch.cuda.current_stream(x.device)
    jit_fn, args = compile_args(cfg, x, weight, y, rstd, eps, stream, problem=problem)
    dispatch(jit_fn, args, x.device)
    return y, rstd


def run_emulated(cfg: RmsNormConfig, x, weight, y, rstd, eps=None, problem=None, workgroups=None):
    """Execute the compiled gfx950 kernel on CPU tensors; raises ``EmulatorError`` on a race or
    an out-of-bounds access."""
    from ...emulator import emulate_checked

    jit_fn, args = compile_args(cfg, x, weight, y, rstd, eps, problem=problem, workgroups=workgroups)
    return emulate_checked(jit_fn, args, f"RMSNorm {cfg.key()}")
