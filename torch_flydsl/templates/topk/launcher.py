"""Host side of the TopK kernel: row views, outputs, argument packing, launch, emulator run."""

from __future__ import annotations

from typing import Any, Optional

import torch

from ...runtime import kernel_cache
from ..base import Decline, TensorMeta
from .config import REGISTER, TopKConfig, baseline_for
from .eligibility import check_problem
from .problem import TopKProblem

# Workgroups loop over rows beyond this (256 CUs x 8 resident workgroups of 256 threads).
GRID_CAP = 2048


def rows_per_workgroup(cfg: Optional[TopKConfig]) -> int:
    """Rows one workgroup takes at a time: one per wave for the register kernel, else one."""
    return cfg.threads // 64 if cfg is not None and cfg.algorithm == REGISTER else 1


def grid_for(problem: TopKProblem, cfg: Optional[TopKConfig] = None) -> int:
    per = rows_per_workgroup(cfg)
    return max(1, min(-(-problem.rows // per), GRID_CAP))


def checked_problem(x: torch.Tensor, k: int, dim: int, largest: bool, sorted: bool,
                    deterministic: Optional[bool] = None) -> TopKProblem:
    problem = check_problem(TensorMeta.of(x), k, dim, largest, sorted, deterministic)
    if isinstance(problem, Decline):
        raise ValueError(f"TopK declines this call: {problem}")
    return problem


def allocate(x: torch.Tensor, problem: TopKProblem):
    """Contiguous ``[rows, k]`` values (input dtype) and int64 indices."""
    values = torch.empty(problem.rows, problem.k, dtype=x.dtype, device=x.device)
    indices = torch.empty(problem.rows, problem.k, dtype=torch.int64, device=x.device)
    return values, indices


def shaped(x: torch.Tensor, dim: int, out: torch.Tensor) -> torch.Tensor:
    """``out`` ([rows, k]) as ``topk``'s result shape: ``x``'s shape with ``k`` at ``dim``."""
    moved = list(x.movedim(dim, -1).shape)
    moved[-1] = out.shape[-1]
    return out.view(moved).movedim(-1, dim)


def kernel_spec(cfg: TopKConfig, problem: TopKProblem):
    if cfg.algorithm == REGISTER:
        from .register_kernel import RegisterSpec

        return RegisterSpec(cfg, problem.dtype, problem.largest)
    from .kernel import KernelSpec

    return KernelSpec(cfg, problem.dtype, problem.largest, problem.sorted, problem.deterministic)


def builder_for(cfg: TopKConfig):
    if cfg.algorithm == REGISTER:
        from .register_kernel import build as build_register

        return build_register
    from .kernel import build

    return build


def compile_args(cfg: TopKConfig, problem: TopKProblem, x: torch.Tensor, values: torch.Tensor,
                 indices: torch.Tensor, stream: Any = None, grid: Optional[int] = None):
    """``(jit_fn, args)`` for ``flyc.compile`` / the emulator; ``values``/``indices`` are
    ``[rows, k]`` with unit-stride rows."""
    import flydsl.expr as fx

    span = (problem.rows - 1) * problem.row_stride + problem.n
    flat_x = x.as_strided((span,), (1,), x.storage_offset())
    flat_v = values.as_strided(((problem.rows - 1) * values.stride(0) + problem.k,), (1,), values.storage_offset())
    flat_i = indices.as_strided(((problem.rows - 1) * indices.stride(0) + problem.k,), (1,), indices.storage_offset())
    args = (flat_x, flat_v, flat_i, int(problem.rows), int(problem.n), int(problem.k), int(problem.row_stride),
            int(values.stride(0)), int(indices.stride(0)), int(grid or grid_for(problem, cfg)),
            stream if stream is not None else fx.Stream(None))
    return builder_for(cfg)(kernel_spec(cfg, problem)), args


def launch(cfg, problem, x, values, indices, stream=None):
    """Run on the current HIP stream (real GPU only; never without HIP)."""
    if not x.is_cuda:
        raise RuntimeError("topk.launch needs device tensors on a ROCm GPU")
    if stream is None:
        stream = torch.cuda.current_stream(x.device)
    jit_fn, args = compile_args(cfg, problem, x, values, indices, stream)
    kernel_cache.dispatch(jit_fn, args, x.device)


def run_emulated(cfg, problem, x, values, indices, grid: Optional[int] = None):
    """Execute the compiled gfx950 kernel on CPU tensors (``TORCH_FLYDSL_EXECUTOR=emulator``);
    raises ``EmulatorError`` on a race or an out-of-bounds access."""
    from ...emulator import emulate_checked

    jit_fn, args = compile_args(cfg, problem, x, values, indices, grid=grid)
    return emulate_checked(jit_fn, args, f"TopK {cfg.key()}")


def topk(x: torch.Tensor, k: int, dim: int = -1, largest: bool = True, sorted: bool = True,
         cfg: Optional[TopKConfig] = None, executor: str = "emulator", deterministic: Optional[bool] = None):
    """``(values, indices)`` from the FlyDSL kernel (the emulator on CPU tensors, or the GPU);
    ``deterministic`` None follows ``torch.are_deterministic_algorithms_enabled()``."""
    problem = checked_problem(x, k, dim, largest, sorted, deterministic)
    cfg = cfg or baseline_for(problem)
    values, indices = allocate(x, problem)
    if executor == "emulator":
        run_emulated(cfg, problem, x, values, indices)
    else:
        launch(cfg, problem, x, values, indices)
    return shaped(x, dim, values), shaped(x, dim, indices)
