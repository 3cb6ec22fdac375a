"""The MXFP8 grouped GEMM problem: ``torch._scaled_grouped_mm_v2`` / ``F.scaled_grouped_mm``'s MoE
forward with MX block scales, as ROCm's ATen defines its operands (``NO_SWIZZLE``).

A ``[T, K]`` float8_e4m3fn row-major (the tokens of every group one after the other), B
``[G, K, N]`` float8_e4m3fn column-major per group (stored ``[G, N, K]``), int32 ``offs [G]``
(cumulative group ends, device data), E8M0 scales ``scale_a [>= T, K/32]`` (row r's 32-blocks)
and ``scale_b`` ``[G, N * K/32]`` (each group's ``[N, K/32]`` row-major, flattened; a
``[G, N, K/32]`` view of the same bytes is taken too), output ``[T, N]`` bfloat16 row-major;
rows past the last offset belong to no group and are not written.

ROCm's ATen has no MXFP8 grouped GEMM at all in torch 2.11-2.15 (it needs a CUDA-only
library), so on an MI350 this family is the only implementation.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..scaled_gemm.problem import FORMATS, MxFormat


@dataclass(frozen=True)
class ScaledGroupedProblem:
    tokens: int
    n: int
    k: int  # logical K (values)
    groups: int
    a_format: str = "e4m3"
    b_format: str = "e4m3"
    out_dtype: torch.dtype = torch.bfloat16

    @property
    def a_fmt(self) -> MxFormat:
        return FORMATS[self.a_format]

    @property
    def b_fmt(self) -> MxFormat:
        return FORMATS[self.b_format]
