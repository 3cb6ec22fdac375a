"""Row- or column-major: the 2-D layout of a GEMM operand, as the gates read it.

Cheap to import: no FlyDSL.
"""

from __future__ import annotations

from typing import Literal, Optional

from ..base import TensorMeta

Major = Literal["row", "col"]


def major_of(t: TensorMeta) -> Optional[Major]:
    """Which 2-D layout a matrix has, or None when neither dimension is unit-stride."""
    rows, cols = t.shape
    s0, s1 = t.stride
    if s1 == 1 or cols == 1:
        if s0 >= max(cols, 1) or rows == 1:
            return "row"
    if s0 == 1 or rows == 1:
        if s1 >= max(rows, 1) or cols == 1:
            return "col"
    return None


def blas_layout(a_major: Major, b_major: Major) -> str:
    """BLAS-style layout name: first letter for A, second for B; n = row-major, t = col-major."""
    f = {"row": "n", "col": "t"}
    return f[a_major] + f[b_major]


def leading_stride(t: TensorMeta, major: Major) -> int:
    return t.stride[0] if major == "row" else t.stride[1]
