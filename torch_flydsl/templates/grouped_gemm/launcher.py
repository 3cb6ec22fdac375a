"""Host side of the grouped GEMM kernel: argument packing and launch.

Arguments, in order (what ``kernel.build(spec)`` takes): ``out, a, b, offs`` as 1-D unit-stride
views from each operand's first element to its last, then ``T, N, K, G``, ``lda`` (A's row
stride), ``ldb`` (one group's leading stride: row stride for row-major, column stride for
column-major), ``ldbg`` (stride between groups), ``ldc``, ``workgroups`` (the persistent grid),
``stream``. A problem with no tokens launches nothing (there is no row to write).
"""

from __future__ import annotations

from typing import Any, Optional

import torch

from ...runtime import kernel_cache
from ..base import Decline
from ..gemm.persistent import persistent_grid, resident_for_lds, tile_upper_bound
from ..operands import flat_operand, unread_tensor
from .config import GroupedGemmConfig
from .eligibility import check_tensors
from .kernel import KernelSpec, build
from .problem import GroupedGemmProblem


def checked_problem(a, b, offs, out) -> GroupedGemmProblem:
    """The family's gate for direct callers; raises ``ValueError`` with its reason."""
    problem = check_tensors(a, b, offs, out)
    if isinstance(problem, Decline):
        raise ValueError(f"grouped GEMM declines these operands: {problem}")
    return problem


def resident_per_cu(cfg: GroupedGemmConfig) -> int:
    """Workgroups of ``cfg`` one CU holds at once, as far as LDS decides (``gemm.persistent``;
    registers are not known before compiling, so this may overcount: extra workgroups only wait)."""
    return resident_for_lds(cfg.lds_bytes)


def grid_block(cfg: GroupedGemmConfig, tokens: int, groups: int, n: int, workgroups: Optional[int] = None,
               along_k: bool = False):
    """(grid, block) of a launch: as many workgroups as the GPU holds at once, or fewer when
    the tile bound (``gemm.persistent``) is smaller; ``workgroups`` overrides (tests use it to give
    every workgroup several tiles). Along K, every group has the same ``tokens`` (M) rows."""
    if along_k:
        bound = groups * -(-tokens // cfg.block_m) * -(-n // cfg.block_n)
    else:
        bound = tile_upper_bound(tokens, groups, n, cfg.block_m, cfg.block_n)
    return (persistent_grid(bound, cfg.lds_bytes, workgroups), 1, 1), (cfg.threads, 1, 1)


def compile_args(cfg: GroupedGemmConfig, a: torch.Tensor, b: torch.Tensor, offs: torch.Tensor, out: torch.Tensor,
                 stream: Any = None, problem: Optional[GroupedGemmProblem] = None,
                 workgroups: Optional[int] = None) -> tuple[Any, tuple]:
    """``(jit_fn, args)``: ``flyc.compile(jit_fn, *args)`` compiles, ``compiled(*args)`` runs
    ``out[rows of g] = a[rows of g] @ b[g]``. ``problem``: what the gate returned for exactly
    these operands (checked here when absent). Needs at least one token."""
    import flydsl.expr as fx

    if problem is None:
        problem = checked_problem(a, b, offs, out)
    if problem.along_k:  # A [M, T] M-contiguous, B [T, N] row-major, out [G, M, N]
        lda, ldb, ldbg, ldc = a.stride(1), b.stride(0), 0, out.stride(1)
    else:
        row = 1 if problem.batched else 0  # the row dimension of A and the output
        lda, ldc = a.stride(row), out.stride(row)
        ldb, ldbg = (b.stride(2) if problem.b_major == "col" else b.stride(1)), b.stride(0)
    args = (
        flat_operand(out), flat_operand(a), flat_operand(b),
        flat_operand(offs if offs is not None else unread_tensor(a.device, torch.int32)),
        int(problem.tokens), int(problem.n), int(problem.k), int(problem.groups), int(problem.group_rows),
        int(lda), int(ldb), int(ldbg), int(ldc),
        grid_block(cfg, problem.tokens, problem.groups, problem.n, workgroups, problem.along_k)[0][0],
        stream if stream is not None else fx.Stream(None),
    )
    return build(KernelSpec(cfg, problem.dtype, problem.b_major, problem.batched, problem.along_k)), args


def launch(cfg: GroupedGemmConfig, a, b, offs, out, stream: Any = None,
           problem: Optional[GroupedGemmProblem] = None) -> torch.Tensor:
    """Run the grouped GEMM into ``out`` on the current HIP stream (real GPU only; never without
    HIP: FlyDSL aborts the process on launch there)."""
    if not a.is_cuda:
        raise RuntimeError("grouped_gemm.launch needs device tensors on a ROCm GPU")
    problem = problem or checked_problem(a, b, offs, out)
    if problem.along_k and problem.k == 0:
        return out.zero_()  # no K rows at all: every group's product is zero
    if problem.tokens == 0:
        return out
    if stream is None:
        stream = torch.cuda.current_stream(a.device)
    jit_fn, args = compile_args(cfg, a, b, offs, out, stream, problem=problem)
    kernel_cache.dispatch(jit_fn, args, a.device)
    return out
