"""The MX scaled GEMM problem as the kernel family sees it, and the MX formats it reads.

``out[m, n] = sum_k (A[m, k] * 2^(sa[m, k // 32] - 127)) * (B[k, n] * 2^(sb[n, k // 32] - 127)) [+ bias[n]]``

``A`` is ``[M, K]`` row-major, ``B`` is ``[K, N]`` column-major (stored ``[N, K]``): the TN layout
``torch._scaled_mm`` requires. Each operand is MXFP8 (``float8_e4m3fn`` or ``float8_e5m2``, one
byte per value) or MXFP4 (``float4_e2m1fn_x2``: two values per byte, the one at the even K
index in the low nibble, so PyTorch shows K/2 columns). ``sa`` is ``[M, K/32]`` and ``sb`` is
``[N, K/32]``, both row-major ``float8_e8m0fnu`` (one power-of-two scale per 32 consecutive K
values of a row of A / a column of B; code 0xFF is NaN).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch


@dataclass(frozen=True)
class MxFormat:
    """One MX element format: its name, width, and its code in the scaled MFMA's cbsz/blgp field."""

    name: str
    bits: int
    mfma_code: int  # 0 = E4M3, 1 = E5M2, 2 = E2M3, 3 = E3M2, 4 = E2M1 (gfx950 ISA)

    @property
    def values_per_byte(self) -> int:
        return 8 // self.bits

    def row_bytes(self, k: int) -> int:
        """Bytes holding ``k`` consecutive K values of one row."""
        return k * self.bits // 8


E4M3 = MxFormat("e4m3", 8, 0)
E5M2 = MxFormat("e5m2", 8, 1)
E2M1 = MxFormat("e2m1", 4, 4)

FORMAT_OF_DTYPE = {
    torch.float8_e4m3fn: E4M3,
    torch.float8_e5m2: E5M2,
    torch.float4_e2m1fn_x2: E2M1,
}
FORMATS = {f.name: f for f in FORMAT_OF_DTYPE.values()}
DTYPE_OF_FORMAT = {f.name: d for d, f in FORMAT_OF_DTYPE.items()}
SCALE_DTYPE = torch.float8_e8m0fnu
SCALE_BLOCK = 32  # K values per E8M0 scale
OUT_DTYPES = (torch.bfloat16, torch.float16)  # what torch._scaled_mm returns for MX on ROCm


@dataclass(frozen=True)
class ScaledGemmProblem:
    m: int
    n: int
    k: int  # logical K (values, not bytes)
    a_format: str = "e4m3"
    b_format: str = "e4m3"
    out_dtype: torch.dtype = torch.bfloat16
    bias: bool = False  # a per-column vector bias[n] of the output dtype

    @property
    def a_fmt(self) -> MxFormat:
        return FORMATS[self.a_format]

    @property
    def b_fmt(self) -> MxFormat:
        return FORMATS[self.b_format]


def format_of(dtype: torch.dtype) -> Optional[MxFormat]:
    return FORMAT_OF_DTYPE.get(dtype)
