"""Run the grouped GEMM kernel through the gfx950 emulator on CPU tensors (``TORCH_FLYDSL_EXECUTOR=emulator``)."""

from __future__ import annotations

import torch

from .config import GroupedGemmConfig


def run_emulated(cfg: GroupedGemmConfig, a: torch.Tensor, b: torch.Tensor, offs: torch.Tensor, out: torch.Tensor,
                 problem=None, workgroups=None):
    """Execute the compiled gfx950 kernel on CPU tensors; results land in ``out``. Raises
    ``EmulatorError`` when the checker reports a race or an out-of-bounds access. No tokens:
    nothing runs (as on the device)."""
    from ...emulator import emulate_checked
    from .launcher import checked_problem, compile_args

    problem = problem or checked_problem(a, b, offs, out)
    if problem.along_k and problem.k == 0:
        out.zero_()  # no K rows at all: every group's product is zero (as on the device)
        return None
    if problem.tokens == 0:
        return None
    jit_fn, args = compile_args(cfg, a, b, offs, out, problem=problem, workgroups=workgroups)
    return emulate_checked(jit_fn, args, f"grouped GEMM {cfg.key()}")
