"""Can the dense GEMM family take this problem at all? (Per-config fit is ``config_fits``.)

Inputs are ``TensorMeta`` descriptions, so Inductor lowering, eager code and the CLI share one
set of rules. Every "no" is a ``Decline`` whose reason a user can read.
"""

from __future__ import annotations

from typing import Optional, Union

import torch

from ..base import INT32_MAX, Decline, TensorMeta, check_aligned, check_span, dtype_name
from .problem import GemmProblem, leading_stride, major_of

DTYPES = (torch.bfloat16, torch.float16)


def _check_ends_on_a_dword(name: str, t: TensorMeta, contig_dim: str, size: int) -> Optional[Decline]:
    """An operand contiguous along M (A) or N (B) is loaded in 16-byte vectors that may run
    past its last element; the buffer unit zero-fills the dwords past the operand's span
    (range-checked per dword), which is exact only if the span ends on a dword boundary.
    Otherwise the dword holding the last element straddles the end: zeroed, it loses that
    element; fetched, it reads bytes past the tensor. Neither is acceptable, so decline."""
    if t.byte_span() % 4:
        return Decline(
            "shape",
            f"{name} is contiguous along {contig_dim} and {contig_dim}={size} is odd, so it ends "
            "in the middle of a 4-byte dword: the kernel's 16-byte loads are range-checked per "
            "dword and could not read its last element without reading past the tensor",
        )
    return None


def check_tensors(a, b, out, bias=None) -> Union[GemmProblem, Decline]:
    """``check_problem`` for real (or meta / CPU stand-in) tensors."""
    of = TensorMeta.of_optional
    return check_problem(of(a), of(b), of(out), of(bias))


def check_problem(
    a: TensorMeta,
    b: TensorMeta,
    out: TensorMeta,
    bias: Optional[TensorMeta] = None,
    *,
    out_dtype: Optional[torch.dtype] = None,
) -> Union[GemmProblem, Decline]:
    """The ``GemmProblem`` these operands pose, or why the family declines them."""
    if len(a.shape) != 2 or len(b.shape) != 2 or len(out.shape) != 2:
        return Decline("shape", "only 2-D operands (mm/addmm) are supported")
    (m, k), (k2, n) = a.shape, b.shape
    if k != k2 or tuple(out.shape) != (m, n):
        return Decline("shape", f"inconsistent shapes A{list(a.shape)} B{list(b.shape)} out{list(out.shape)}")
    if min(m, n, k) <= 0:
        return Decline("shape", f"empty problem M={m} N={n} K={k}")
    if max(m, n, k) > INT32_MAX:
        return Decline("shape", "a dimension exceeds int32")
    if out_dtype is not None and out_dtype != a.dtype:
        return Decline("dtype", f"out_dtype={dtype_name(out_dtype)} differs from the input dtype; not supported")
    if a.dtype not in DTYPES:
        return Decline("dtype", f"input dtype {dtype_name(a.dtype)} is not bfloat16 or float16")
    if b.dtype != a.dtype or out.dtype != a.dtype:
        return Decline("dtype", f"mixed dtypes A={dtype_name(a.dtype)} B={dtype_name(b.dtype)} out={dtype_name(out.dtype)}")

    a_major, b_major, out_major = major_of(a), major_of(b), major_of(out)
    if a_major is None:
        return Decline("layout", f"A strides {a.stride} are neither row- nor column-major")
    if b_major is None:
        return Decline("layout", f"B strides {b.stride} are neither row- nor column-major")
    if out_major != "row" or (out.stride[1] != 1 and n > 1):
        return Decline("layout", f"output strides {out.stride} are not row-major")

    for name, t, lead in (
        ("A", a, leading_stride(a, a_major)),
        ("B", b, leading_stride(b, b_major)),
        ("output", out, out.stride[0]),
    ):
        d = check_aligned(name, t, lead) or check_span(name, t)
        if d:
            return d
    if a_major == "col":
        d = _check_ends_on_a_dword("A", a, "M", m)
        if d:
            return d
    if b_major == "row":
        d = _check_ends_on_a_dword("B", b, "N", n)
        if d:
            return d

    bias_kind = None
    if bias is not None:
        if bias.dtype != a.dtype:
            return Decline("dtype", f"bias dtype {dtype_name(bias.dtype)} differs from the inputs")
        row_vector = (len(bias.shape) == 1 and bias.shape[0] == n and (bias.stride[0] == 1 or n == 1)) or (
            len(bias.shape) == 2 and tuple(bias.shape) == (m, n) and (bias.stride[0] == 0 or m == 1) and (bias.stride[1] == 1 or n == 1)
        )
        if not row_vector:
            return Decline("layout", f"bias shape {list(bias.shape)} strides {bias.stride}: only a per-column vector ([N], or [M, N] expanded with stride (0, 1)) is supported")
        d = check_aligned("bias", bias, None) or check_span("bias", bias)
        if d:
            return d
        bias_kind = "row"
    return GemmProblem(m, n, k, a.dtype, a_major, b_major, bias_kind)
