"""Run the MX scaled GEMM kernel through the gfx950 emulator on CPU tensors (``TORCH_FLYDSL_EXECUTOR=emulator``)."""

from __future__ import annotations

from typing import Optional

import torch

from .config import ScaledGemmConfig


def run_emulated(
    cfg: ScaledGemmConfig, a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor,
    out: torch.Tensor, bias: Optional[torch.Tensor] = None, problem=None,
):
    """The MX kernel on CPU tensors through the emulator, as the family's emulator executor runs
    it (``KernelFamily.run_emulated``); results land in ``out``. ``EmulatorError`` when the
    checker reports a race or an out-of-bounds access."""
    from .family import FAMILY, ScaledCall

    return FAMILY.run_emulated(cfg, problem, ScaledCall(cfg.key(), a, b, scale_a, scale_b, out, bias))
