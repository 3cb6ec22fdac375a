"""Float64 reference of the RMSNorm forward (what the kernel must agree with)."""

from __future__ import annotations

from typing import Optional

import torch

from .problem import default_eps


def reference(x: torch.Tensor, weight: Optional[torch.Tensor] = None, eps=None) -> tuple[torch.Tensor, torch.Tensor]:
    """``(y, rstd)`` in float64 over the last dimension: ``rstd = 1/sqrt(mean(x^2) + eps)``,
    ``y = x * rstd * weight``. ``rstd`` has shape ``x.shape[:-1] + (1,)``. NaN/Inf follow IEEE
    (an Inf in a row makes its rstd 0 and that element NaN, as in PyTorch's fp32 math)."""
    xd = x.detach().to(torch.float64)
    rstd = torch.rsqrt(xd.square().mean(dim=-1, keepdim=True) + default_eps(eps))
    y = xd * rstd
    if weight is not None:
        y = y * weight.detach().to(torch.float64)
    return y, rstd
