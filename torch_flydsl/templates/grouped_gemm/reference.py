"""Float64 reference of the grouped GEMM (``torch._grouped_mm``'s 2-D x 3-D form)."""

from __future__ import annotations

from typing import Optional

import torch


def group_bounds(offs: torch.Tensor, tokens: int) -> list[tuple[int, int]]:
    """(start, end) rows of each group, clamped as the kernel clamps them: ends never decrease
    and never pass ``tokens``."""
    bounds, prev = [], 0
    for end in offs.tolist():
        end = max(min(int(end), tokens), prev)
        bounds.append((prev, end))
        prev = end
    return bounds


def reference(a: torch.Tensor, b: torch.Tensor, offs: Optional[torch.Tensor], device: Optional[torch.device] = None,
              out: Optional[torch.Tensor] = None) -> torch.Tensor:
    """``[T, N]`` float64: row r of group g is ``A[r] @ B[g]``. Rows past the last offset
    belong to no group: they are taken from ``out`` (float64) when given (the kernel never
    writes them), else zero. Batched (3-D A, no offs): ``[G, M, N]``, ``A[g] @ B[g]``. Groups along
K (2-D x 2-D): ``[G, M, N]``, ``A[:, K rows of g] @ B[K rows of g]``."""
    where = device or "cpu"
    a64, b64 = a.detach().to(where, torch.float64), b.detach().to(where, torch.float64)
    if a.dim() == 3:
        return torch.bmm(a64, b64)
    assert offs is not None, "the 2-D forms need offs"
    if b.dim() == 2:  # groups along K: [G, M, N], an empty group gives zeros
        bounds = group_bounds(offs, a.shape[1])
        return torch.stack([a64[:, s:e] @ b64[s:e] for s, e in bounds])
    t, n = a.shape[0], b.shape[2]
    result = out.detach().to(where, torch.float64).clone() if out is not None else torch.zeros(t, n, dtype=torch.float64,
                                                                                                  device=where)
    for g, (start, end) in enumerate(group_bounds(offs, t)):
        if end > start:
            result[start:end] = a64[start:end] @ b64[g]
    return result
