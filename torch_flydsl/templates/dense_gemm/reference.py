"""Float64 reference of the dense GEMM family: ``alpha * (A @ B) + beta * bias``."""

from __future__ import annotations

from typing import Optional

import torch


def reference(
    a: torch.Tensor, b: torch.Tensor, bias: Optional[torch.Tensor] = None, alpha: float = 1.0, beta: float = 1.0
) -> torch.Tensor:
    out = alpha * (a.double() @ b.double())
    if bias is not None:
        out = out + beta * bias.double().expand_as(out)
    return out
