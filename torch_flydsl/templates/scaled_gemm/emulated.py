"""Run the MX scaled GEMM kernel through the gfx950 emulator on CPU tensors (``TORCH_FLYDSL_EXECUTOR=emulator``)."""

from __future__ import annotations

from typing import Optional

import torch

from .config import ScaledGemmConfig


def run_emulated(
    cfg: ScaledGemmConfig, a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor,
    out: torch.Tensor, bias: Optional[torch.Tensor] = None, problem=None,
):
    """Execute the compiled gfx950 kernel on CPU tensors; results land in ``out``.

    Raises ``EmulatorError`` when the checker reports a race or an out-of-bounds access: a
    kernel that is wrong on some hardware timing must not look right here.
    """
    from ...emulator import EmulatorError, emulate
    from .launcher import compile_args

    jit_fn, args = compile_args(cfg, a, b, scale_a, scale_b, out, bias, problem=problem)
    report = emulate(jit_fn, args)
    if not report.ok:
        raise EmulatorError(f"scaled GEMM {cfg.key()}: {report}")
    return report
