"""Can the grouped GEMM family take these operands at all? (Per-config fit is ``config_fits``.)

``TensorMeta`` in, ``GroupedGemmProblem`` or a ``Decline`` with a reason out; Inductor, the
custom op and the CLI share these rules.

Accepted: ``torch._grouped_mm``'s MoE forward, A ``[T, K]`` row-major x B ``[G, K, N]`` (each
group row- or column-major, any 16-byte-aligned group stride) with int32 ``offs [G]``, output
``[T, N]`` row-major, bf16 or fp16 throughout, no bias. Declined with a reason: the other forms
(2-D x 2-D with groups along K, 3-D x 3-D batched, 3-D x 2-D), a bias, column-major A,
mixed dtypes, misalignment, buffers over 4 GiB.
"""

from __future__ import annotations

from typing import Optional, Union

import torch

from ..base import ALIGN_BYTES, BUFFER_SPAN_LIMIT, INT32_MAX, Decline, TensorMeta, check_aligned, check_span, dtype_name
from ..gemm.majors import major_of
from .problem import GroupedGemmProblem

DTYPES = (torch.bfloat16, torch.float16)


def _group_matrix(b: TensorMeta) -> TensorMeta:
    """One group's [K, N] matrix of a 3-D B (what its layout says about every group)."""
    return TensorMeta(tuple(b.shape[1:]), tuple(b.stride[1:]), b.dtype, b.offset, b.device_type)


def check_problem(
    a: TensorMeta,
    b: TensorMeta,
    offs: Optional[TensorMeta],
    out: TensorMeta,
    bias: Optional[TensorMeta] = None,
    *,
    out_dtype: Optional[torch.dtype] = None,
) -> Union[GroupedGemmProblem, Decline]:
    forms = f"{len(a.shape)}-D x {len(b.shape)}-D"
    if (len(a.shape), len(b.shape)) == (3, 3):
        return _check_batched(a, b, offs, out, bias, out_dtype)
    if (len(a.shape), len(b.shape)) == (2, 2):
        return _check_along_k(a, b, offs, out, bias, out_dtype)
    if (len(a.shape), len(b.shape)) != (2, 3):
        return Decline("shape", f"{forms} grouped GEMM is not supported (2-D x 3-D with offs, 2-D x 2-D with offs "
                                "and 3-D x 3-D are)")
    if offs is None:
        return Decline("shape", "2-D x 3-D grouped GEMM needs offs")
    if bias is not None:
        return Decline("shape", "a bias is not supported")
    (t, k), (g, k2, n) = a.shape, b.shape
    if k != k2 or tuple(out.shape) != (t, n):
        return Decline("shape", f"inconsistent shapes A{list(a.shape)} B{list(b.shape)} out{list(out.shape)}")
    if offs.dtype != torch.int32 or len(offs.shape) != 1 or offs.shape[0] != g:
        return Decline("shape", f"offs must be int32 [{g}], got {dtype_name(offs.dtype)} {list(offs.shape)}")
    if g == 0 or n == 0 or k == 0:
        return Decline("shape", f"empty problem G={g} N={n} K={k}")
    if max(t, n, k, g) > INT32_MAX:
        return Decline("shape", "a dimension exceeds int32")
    if a.dtype not in DTYPES:
        return Decline("dtype", f"input dtype {dtype_name(a.dtype)} is not bfloat16 or float16")
    if b.dtype != a.dtype or out.dtype != a.dtype:
        return Decline("dtype", f"mixed dtypes A={dtype_name(a.dtype)} B={dtype_name(b.dtype)} out={dtype_name(out.dtype)}")
    if out_dtype is not None and out_dtype != a.dtype:
        return Decline("dtype", f"out_dtype={dtype_name(out_dtype)} differs from the input dtype; not supported")
    if a.stride[1] != 1 and k > 1 or (t > 1 and a.stride[0] < k):
        return Decline("layout", f"A strides {a.stride}: A must be row-major [T, K] (the kernel reads A along K)")
    b_major = major_of(_group_matrix(b))
    if b_major is None:
        return Decline("layout", f"B strides {b.stride}: each group's [K, N] must be row- or column-major")
    if out.stride[1] != 1 and n > 1 or (t > 1 and out.stride[0] < n):
        return Decline("layout", f"output strides {out.stride} are not row-major")
    if offs.stride[0] != 1 and g > 1:
        return Decline("layout", f"offs strides {offs.stride} are not contiguous")
    b_lead = b.stride[2] if b_major == "col" else b.stride[1]
    for name, tm, lead in (("A", a, a.stride[0] if t > 1 else None), ("B", b, b_lead), ("output", out, out.stride[0]),
                           ("B's group", b, b.stride[0] if g > 1 else None)):
        d = check_aligned(name, tm, lead)
        if d:
            return d
    for name, tm in (("A", a), ("B", b), ("output", out), ("offs", offs)):
        d = check_span(name, tm)
        if d:
            return d
    if b_major == "row" and (b.byte_span() % 4):
        return Decline("shape", f"B is contiguous along N and N={n} is odd: its last element ends mid-dword, which "
                                "the kernel's range-checked 16-byte loads cannot read exactly")
    return GroupedGemmProblem(t, n, k, g, a.dtype, b_major)


def check_tensors(a, b, offs, out, bias=None) -> Union[GroupedGemmProblem, Decline]:
    """``check_problem`` for real (or meta / CPU stand-in) tensors; ``offs`` may be None."""
    of, of_optional = TensorMeta.of, TensorMeta.of_optional
    return check_problem(of(a), of(b), of_optional(offs), of(out), of_optional(bias))


def _check_batched(a, b, offs, out, bias, out_dtype) -> Union[GroupedGemmProblem, Decline]:
    """3-D A [G, M, K] x 3-D B [G, K, N] -> [G, M, N]: the ragged problem with G groups of M rows,
    when A's and the output's batches are stacked (then they are [G*M, K] / [G*M, N] matrices)."""
    if offs is not None:
        return Decline("shape", "3-D x 3-D grouped GEMM takes no offs")
    (g, m, k), (g2, _, n) = a.shape, b.shape
    if g != g2 or tuple(out.shape) != (g, m, n):
        return Decline("shape", f"inconsistent shapes A{list(a.shape)} B{list(b.shape)} out{list(out.shape)}")
    if m == 0:
        return Decline("shape", "empty batches (M = 0)")
    for name, t in (("A", a), ("output", out)):
        if g > 1 and t.stride[0] != m * t.stride[1]:
            return Decline("layout", f"{name}'s batches are not stacked (batch stride {t.stride[0]} != M x row "
                                     f"stride {m * t.stride[1]}): the kernel reads them as one [G*M, ...] matrix")
    flat = lambda t, cols: TensorMeta((g * m, cols), t.stride[1:], t.dtype, t.offset, t.device_type)  # noqa: E731
    problem = check_problem(flat(a, k), b, TensorMeta((g,), (1,), torch.int32), flat(out, n), bias,
                            out_dtype=out_dtype)
    if isinstance(problem, Decline):
        return problem
    return GroupedGemmProblem(problem.tokens, n, k, g, problem.dtype, problem.b_major, group_rows=m)


def _check_along_k(a, b, offs, out, bias, out_dtype) -> Union[GroupedGemmProblem, Decline]:
    """2-D A [M, T] x 2-D B [T, N] with offs over T -> [G, M, N] (the expert weight gradient).
    K (T) is split at run time, so the K tail of each group is masked: the kernel can do that
    only for operands contiguous along M (A) and N (B), the layout autograd hands it."""
    if offs is None:
        return Decline("shape", "2-D x 2-D grouped GEMM needs offs")
    if bias is not None:
        return Decline("shape", "a bias is not supported")
    (m, t), (t2, n) = a.shape, b.shape
    g = offs.shape[0] if len(offs.shape) == 1 else -1
    if t != t2 or len(out.shape) != 3 or tuple(out.shape) != (g, m, n):
        return Decline("shape", f"inconsistent shapes A{list(a.shape)} B{list(b.shape)} out{list(out.shape)}")
    if offs.dtype != torch.int32:
        return Decline("shape", f"offs must be int32 [G], got {dtype_name(offs.dtype)}")
    if min(g, m, n) <= 0:
        return Decline("shape", f"empty problem G={g} M={m} N={n}")
    if max(t, n, m, g) > INT32_MAX:
        return Decline("shape", "a dimension exceeds int32")
    if a.dtype not in DTYPES or b.dtype != a.dtype or out.dtype != a.dtype:
        return Decline("dtype", f"dtypes A={dtype_name(a.dtype)} B={dtype_name(b.dtype)} out={dtype_name(out.dtype)}: "
                                "bfloat16 or float16 throughout")
    if out_dtype is not None and out_dtype != a.dtype:
        return Decline("dtype", f"out_dtype={dtype_name(out_dtype)} differs from the input dtype; not supported")
    if a.stride[0] != 1 and m > 1 or (t > 1 and a.stride[1] < m):
        return Decline("layout", f"A strides {a.stride}: with groups along K, A [M, T] must be contiguous along M "
                                 "(the kernel masks each group's K tail per K row)")
    if b.stride[1] != 1 and n > 1 or (t > 1 and b.stride[0] < n):
        return Decline("layout", f"B strides {b.stride}: with groups along K, B [T, N] must be row-major")
    if out.stride[2] != 1 or out.stride[1] < n or (g > 1 and out.stride[0] != m * out.stride[1]):
        return Decline("layout", f"output strides {out.stride}: [G, M, N] row-major with stacked groups")
    for name, tm, lead in (("A", a, a.stride[1] if t > 1 else None), ("B", b, b.stride[0] if t > 1 else None),
                           ("output", out, out.stride[1])):
        d = check_aligned(name, tm, lead) or check_span(name, tm)
        if d:
            return d
    for name, tm, size, what in (("A", a, m, "M"), ("B", b, n, "N")):
        if tm.byte_span() > BUFFER_SPAN_LIMIT - 2 * ALIGN_BYTES:
            # The masked K tail loads from the span's end (out of range: zeros); that offset
            # plus a 16-byte access must not wrap the 32-bit buffer offset.
            return Decline("size", f"{name} spans {tm.byte_span()} bytes: with groups along K it must stay "
                                   f"{2 * ALIGN_BYTES} bytes under 4 GiB")
        if tm.byte_span() % 4:
            return Decline("shape", f"{name} is contiguous along {what} and {what}={size} is odd: its last element ends "
                                    "mid-dword, which the kernel's range-checked 16-byte loads cannot read exactly")
    return GroupedGemmProblem(m, n, t, g, a.dtype, "row", along_k=True)
