"""Run the dense GEMM kernel through the gfx950 emulator on CPU tensors (``TORCH_FLYDSL_EXECUTOR=emulator``)."""

from __future__ import annotations

from typing import Optional

import torch

from .config import DenseGemmConfig


def run_emulated(
    cfg: DenseGemmConfig, a: torch.Tensor, b: torch.Tensor, out: torch.Tensor,
    bias: Optional[torch.Tensor] = None, alpha: float = 1.0, beta: float = 1.0, problem=None,
):
    """Execute the compiled gfx950 kernel on CPU tensors; results land in ``out``.

    Raises ``EmulatorError`` when the checker reports a race or an out-of-bounds access: a
    kernel that is wrong on some hardware timing must not look right here.
    """
    from ...emulator import EmulatorError, emulate
    from .launcher import compile_args

    jit_fn, args = compile_args(cfg, a, b, out, bias, alpha, beta, problem=problem)
    report = emulate(jit_fn, args)
    if not report.ok:
        raise EmulatorError(f"dense GEMM {cfg.key()}: {report}")
    return report
