"""Float64 reference of the MXFP8 grouped GEMM (exact dequantization, per group)."""

from __future__ import annotations

from typing import Optional

import torch



def reference(a, b, scale_a, scale_b, offs, out: Optional[torch.Tensor] = None) -> torch.Tensor:
    """``[T, N]`` float64: rows of group g are ``(A * 2^sa) @ (B[g] * 2^sb[g])``; rows past the
    last offset come from ``out`` when given (never written), else zero."""
    # Imported here: this module loads with the package, which the registry reads inside
    # ``import torch``, possibly while scaled_gemm.reference itself is still importing torch.
    from ..grouped_gemm.reference import group_bounds
    from ..scaled_gemm.reference import dequantize, ieee_matmul

    t, n, k = a.shape[0], b.shape[2], a.shape[1]
    sb = scale_b.reshape(b.shape[0], n, k // 32)
    result = out.detach().to(torch.float64).clone() if out is not None else torch.zeros(t, n, dtype=torch.float64)
    for g, (start, end) in enumerate(group_bounds(offs.cpu(), t)):
        if end > start:
            result[start:end] = ieee_matmul(dequantize(a[start:end].cpu(), scale_a[start:end].cpu(), 1),
                                            dequantize(b[g].cpu(), sb[g].cpu(), 0))
    return result
