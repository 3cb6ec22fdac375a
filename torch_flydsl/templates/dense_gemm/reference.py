"""float64 reference of the dense GEMM family: ``alpha * (a @ b) + beta * bias``."""

from __future__ import annotations

from typing import Optional

import torch


def reference(
    a: torch.Tensor,
    b: torch.Tensor,
    bias: Optional[torch.Tensor] = None,
    alpha: float = 1.0,
    beta: float = 1.0,
    device: Optional[torch.device] = None,
) -> torch.Tensor:
    """Exact-as-possible result on the CPU in float64 (inputs are upcast, not rounded).

    ``bias`` is ``[N]`` or ``[M, N]`` (e.g. an expanded ``[N]`` with stride ``(0, 1)``); it is
    broadcast over rows. The kernel's output (rounded once to bf16/fp16 from an fp32
    accumulator) is held to at most twice PyTorch's own error against this reference, plus a
    small floor (test/emulator/dense_cases.py states the contract).
    ``device`` (default CPU) is where to compute: the operands' own device avoids host copies,
    which CUDA-graph capture forbids.
    """
    where = device or "cpu"
    out = alpha * (a.detach().to(where, torch.float64) @ b.detach().to(where, torch.float64))
    if bias is not None:
        out = out + beta * bias.detach().to(where, torch.float64)
    return out
