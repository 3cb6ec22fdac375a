"""Run the dense GEMM kernel through the gfx950 emulator on CPU tensors (``TORCH_FLYDSL_EXECUTOR=emulator``)."""

from __future__ import annotations

from typing import Optional

import torch

from .config import DenseGemmConfig


def run_emulated(
    cfg: DenseGemmConfig, a: torch.Tensor, b: torch.Tensor, out: torch.Tensor,
    bias: Optional[torch.Tensor] = None, alpha: float = 1.0, beta: float = 1.0, problem=None,
):
    """The dense kernel on CPU tensors through the emulator, as the family's emulator executor
    runs it (``KernelFamily.run_emulated``); results land in ``out``. ``EmulatorError`` when the
    checker reports a race or an out-of-bounds access."""
    from .family import FAMILY, DenseCall

    return FAMILY.run_emulated(cfg, problem, DenseCall(cfg.key(), a, b, out, bias, alpha, beta))
