"""Host side of the MXFP8 grouped GEMM kernel: argument packing, launch, and the emulator run."""

from __future__ import annotations

from typing import Any, Optional

import torch

from ...runtime import kernel_cache
from ..base import Decline
from ..gemm.geometry import UNIT_BYTES
from ..gemm.persistent import persistent_grid, tile_upper_bound
from ..operands import flat_operand, reinterpret_span
from .config import ScaledGroupedConfig
from .eligibility import check_tensors
from .kernel import KernelSpec, build
from .problem import ScaledGroupedProblem


def checked_problem(a, b, scale_a, scale_b, offs, out) -> ScaledGroupedProblem:
    problem = check_tensors(a, b, scale_a, scale_b, offs, out)
    if isinstance(problem, Decline):
        raise ValueError(f"MXFP8 grouped GEMM declines these operands: {problem}")
    return problem


def workgroups_for(cfg: ScaledGroupedConfig, problem: ScaledGroupedProblem, workgroups: Optional[int] = None) -> int:
    """The persistent grid: the tile bound or what the GPU holds at once, whichever is smaller."""
    bound = tile_upper_bound(problem.tokens, problem.groups, problem.n, cfg.block_m, cfg.block_n)
    return persistent_grid(bound, cfg.lds_bytes(problem.a_fmt, problem.b_fmt, problem.out_dtype), workgroups)


def compile_args(cfg: ScaledGroupedConfig, a, b, scale_a, scale_b, offs, out, stream: Any = None,
                 problem: Optional[ScaledGroupedProblem] = None, workgroups: Optional[int] = None):
    """``(jit_fn, args)`` for ``flyc.compile`` / the emulator. Needs at least one token."""
    import flydsl.expr as fx

    problem = problem or checked_problem(a, b, scale_a, scale_b, offs, out)
    byte_stride = lambda t, dim: t.stride(dim) * t.element_size()  # noqa: E731
    blocks = problem.k // 32
    args = (
        flat_operand(out), reinterpret_span(a, torch.int16), reinterpret_span(b, torch.int16),
        reinterpret_span(scale_a, torch.int32),
        reinterpret_span(scale_b, torch.int32), flat_operand(offs),
        int(problem.tokens), int(problem.n), int(problem.k), int(problem.groups),
        byte_stride(a, 0) // UNIT_BYTES, byte_stride(b, 2) // UNIT_BYTES, byte_stride(b, 0) // UNIT_BYTES,
        byte_stride(scale_a, 0) // 4, blocks // 4, problem.n * blocks // 4, int(out.stride(0)),
        workgroups_for(cfg, problem, workgroups),
        stream if stream is not None else fx.Stream(None),
    )
    return build(KernelSpec(cfg, problem.a_fmt, problem.b_fmt, problem.out_dtype)), args


def launch(cfg, a, b, scale_a, scale_b, offs, out, stream=None, problem=None):
    """Run into ``out`` on the current HIP stream (real GPU only; never without HIP)."""
    if not a.is_cuda:
        raise RuntimeError("scaled_grouped_gemm.launch needs device tensors on a ROCm GPU")
    problem = problem or checked_problem(a, b, scale_a, scale_b, offs, out)
    if problem.tokens == 0:
        return out
    if stream is None:
        stream = torch.cuda.current_stream(a.device)
    jit_fn, args = compile_args(cfg, a, b, scale_a, scale_b, offs, out, stream, problem=problem)
    kernel_cache.dispatch(jit_fn, args, a.device)
    return out


def run_emulated(cfg, a, b, scale_a, scale_b, offs, out, problem=None, workgroups=None):
    """Execute the compiled gfx950 kernel on CPU tensors (``TORCH_FLYDSL_EXECUTOR=emulator``);
    raises ``EmulatorError`` on a race or an out-of-bounds access. No tokens: nothing runs."""
    from ...emulator import emulate_checked

    problem = problem or checked_problem(a, b, scale_a, scale_b, offs, out)
    if problem.tokens == 0:
        return None
    jit_fn, args = compile_args(cfg, a, b, scale_a, scale_b, offs, out, problem=problem, workgroups=workgroups)
    return emulate_checked(jit_fn, args, f"MXFP8 grouped GEMM {cfg.key()}")
