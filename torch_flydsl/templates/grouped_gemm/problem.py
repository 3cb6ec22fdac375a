"""The grouped GEMM problem as the kernel family sees it: ``torch._grouped_mm``'s MoE forward.

``A`` is ``[T, K]`` row-major: the tokens of every group (expert) one after the other; ``offs``
is int32 ``[G]``, the cumulative end row of each group (``offs[g-1] .. offs[g]`` are group g's
rows; a repeated value is an empty group). ``B`` is ``[G, K, N]``, each group's ``[K, N]``
matrix row-major (N contiguous) or column-major (stored ``[G, N, K]``, K contiguous: the usual
weight layout). ``out`` is ``[T, N]`` row-major: ``out[r] = A[r] @ B[g(r)]``; rows from
``offs[G-1]`` to T belong to no group and are not written (as in PyTorch).

The weight-gradient form (2-D A ``[M, T]`` x 2-D B ``[T, N]`` with ``offs`` over T, output
``[G, M, N]``: ``out[g] = A[:, offs[g-1]:offs[g]] @ B[offs[g-1]:offs[g]]``) has ``along_k``, with
``tokens = M`` and ``k = T``; an empty group's output is zero.

The batched form (3-D A ``[G, M, K]`` x 3-D B, output ``[G, M, N]``, no offs) is the same
problem with ``T = G * M`` and group g owning rows ``[g * M, (g + 1) * M)`` when A's and the
output's batches are stacked (batch stride = M x row stride).

The offsets are device data: the kernel reads them at run time (no host sync, CUDA-graph safe).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..gemm.majors import Major


@dataclass(frozen=True)
class GroupedGemmProblem:
    tokens: int  # T: rows of A and of the output (all groups, plus rows past the last offset)
    n: int
    k: int
    groups: int
    dtype: torch.dtype  # inputs and output share it (bf16 or fp16)
    b_major: Major = "col"  # each group's [K, N] matrix: "row" (N contiguous) or "col" (K contiguous)
    group_rows: int = 0  # 0: groups split A's rows by offs; > 0: 3-D A, every group has this many rows
    along_k: bool = False  # 2-D x 2-D: groups split K (tokens) by offs; ``tokens`` is then M

    @property
    def batched(self) -> bool:
        return self.group_rows > 0

    @property
    def m(self) -> int:
        """Rows of the 2-D output (for code that speaks GEMM)."""
        return self.tokens
