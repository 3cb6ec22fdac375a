"""Can the MX scaled GEMM family take this problem at all? (Per-config fit is ``config_fits``.)

Inputs are ``TensorMeta`` descriptions, so Inductor lowering, eager code and the CLI share one
set of rules. Every "no" is a ``Decline`` whose reason a user can read.

Accepted, and why the rest is declined:

* Operands: ``torch._scaled_mm``'s TN layout: A ``[M, K]`` row-major, B ``[K, N]``
  column-major, each ``float8_e4m3fn``, ``float8_e5m2`` or ``float4_e2m1fn_x2`` (``[M, K/2]``
  / ``[K/2, N]``), in any combination (the scaled MFMA takes each operand's format on its
  own). The gfx942 ``fnuz`` formats are not gfx950 MX formats. Other layouts: the kernel
  reads both operands along K.
* Scales: ``float8_e8m0fnu``, the unswizzled ``[rows, K/32]`` row-major layout of PyTorch's
  MX recipe on ROCm (``NO_SWIZZLE``): ``scale_a[m, j]`` scales ``A[m, 32j:32j+32]``,
  ``scale_b[n, j]`` scales ``B[32j:32j+32, n]``. ``rows`` may exceed M (N): v1
  ``torch._scaled_mm`` (2.11-2.15) checks ``round_up(M, 128) * K/32`` elements and on ROCm
  reads them unswizzled (hipBLASLt's VEC32_UE8M0 mode), so padded rows are accepted and never
  read. (Which rows each PyTorch entry point accepts is the family glue's business:
  ``family.scale_rows_pytorch_wants``.) Any row stride that keeps rows on 4-byte boundaries
  works (the kernel moves scales in 4-byte DMAs). Declined: swizzled/blocked layouts (CUDA's
  ``SWIZZLE_32_4_4``; ``SWIZZLE_32_8``, hipBLASLt's pre-swizzled layout that torch 2.15's v2
  takes on ROCm 7.13+), a flat 1-D scale tensor (no row structure to check), other recipes.
* K a multiple of 128: one MFMA consumes 128 K values and the kernel has no K tail (a tail
  would need zero-filled operands: E8M0 has no zero, so scaling cannot mask it). torch's own
  ROCm path asks the same of ``_scaled_mm``.
* Output ``[M, N]`` row-major bfloat16 or float16 (as ``torch._scaled_mm`` on ROCm); bias ``[N]`` (or ``[M, N]``
  expanded with strides ``(0, 1)``) of the output dtype.
* 16-byte aligned origins and leading strides for A, B and the output; 4-byte for the scales;
  every buffer under 4 GiB (AMD buffer descriptors).
"""

from __future__ import annotations

from typing import Any, Optional, Union

import torch

from ..base import INT32_MAX, Decline, TensorMeta, check_aligned, check_span, dtype_name
from .problem import DTYPE_OF_FORMAT, FORMATS, OUT_DTYPES, SCALE_BLOCK, SCALE_DTYPE, ScaledGemmProblem, format_of

K_MULTIPLE = 128  # the scaled MFMA's K
SCALE_ALIGN_BYTES = 4

_FNUZ = (torch.float8_e4m3fnuz, torch.float8_e5m2fnuz)


# F.scaled_mm's enums by value, for callers that pass ints.
_SWIZZLES = {0: "NO_SWIZZLE", 1: "SWIZZLE_32_4_4", 2: "SWIZZLE_32_8"}
_RECIPES = {0: "TensorWise", 1: "RowWise", 2: "BlockWise1x16", 3: "BlockWise1x32", 4: "BlockWise1x128",
            5: "BlockWise128x128"}


def _enum_arg(name: str, value: Any, by_int: dict, accepted: str, category: str, why: str) -> Optional[Decline]:
    """None when ``value`` (None, an enum such as ``SwizzleType.NO_SWIZZLE``, its name or its int)
    is ``accepted``; else a Decline naming what was passed."""
    if value is None:
        return None
    if isinstance(value, int) and not hasattr(value, "name"):
        kind = by_int.get(value, str(value))
    else:
        kind = getattr(value, "name", str(value)).rsplit(".", 1)[-1]
    return None if kind == accepted else Decline(category, f"{name} is {kind}: {why}")


def _check_format(name: str, t: TensorMeta) -> Optional[Decline]:
    if format_of(t.dtype) is not None:
        return None
    extra = " (a gfx942 format; gfx950's scaled MFMA reads the OCP ones)" if t.dtype in _FNUZ else ""
    return Decline("dtype", f"{name} dtype {dtype_name(t.dtype)} is not an MX element format (float8_e4m3fn, "
                            f"float8_e5m2, float4_e2m1fn_x2){extra}")


def _check_scale(name: str, s: TensorMeta, rows: int, what: str, k: int) -> Optional[Decline]:
    if s.dtype != SCALE_DTYPE:
        return Decline("dtype", f"{name} dtype {dtype_name(s.dtype)} is not float8_e8m0fnu: not an MX recipe "
                                "(float32 scales are tensor- or row-wise, float8_e4m3fn ones NVFP4)")
    blocks = k // SCALE_BLOCK
    if len(s.shape) != 2 or s.shape[1] != blocks or s.shape[0] < rows:
        return Decline("shape", f"{name} has shape {list(s.shape)}; expected [{what}={rows} (or more rows), "
                                f"K/32={blocks}]")
    if s.stride[1] != 1 or (s.shape[0] > 1 and s.stride[0] < blocks):
        return Decline("layout", f"{name} strides {s.stride} are not row-major [rows, K/32]")
    if (s.offset % SCALE_ALIGN_BYTES) or (s.shape[0] > 1 and s.stride[0] % SCALE_ALIGN_BYTES):
        return Decline("alignment", f"{name} must start on a 4-byte boundary and have a row stride that is a "
                                    f"multiple of 4 bytes (offset {s.offset}, strides {s.stride})")
    return check_span(name, s)


def _check_bias(bias: TensorMeta, m: int, n: int, out_dtype: torch.dtype) -> Optional[Decline]:
    if bias.dtype != out_dtype:
        return Decline("dtype", f"bias dtype {dtype_name(bias.dtype)} differs from the output dtype "
                                f"{dtype_name(out_dtype)}")
    vector = (len(bias.shape) == 1 and bias.shape[0] == n and (bias.stride[0] == 1 or n == 1)) or (
        len(bias.shape) == 2 and tuple(bias.shape) == (m, n) and (bias.stride[0] == 0 or m == 1)
        and (bias.stride[1] == 1 or n == 1)
    )
    if not vector:
        return Decline("layout", f"bias shape {list(bias.shape)} strides {bias.stride}: only a per-column vector "
                                 "([N], or [M, N] expanded with strides (0, 1)) is supported")
    return check_span("bias", bias)


def check_problem(
    a: TensorMeta,
    b: TensorMeta,
    scale_a: TensorMeta,
    scale_b: TensorMeta,
    out: TensorMeta,
    bias: Optional[TensorMeta] = None,
    *,
    out_dtype: Optional[torch.dtype] = None,
    swizzle_a: Any = None,
    swizzle_b: Any = None,
    scale_recipe_a: Any = None,
    scale_recipe_b: Any = None,
    scale_result: Any = None,  # present (not None) when the call has an output scale
) -> Union[ScaledGemmProblem, Decline]:
    """The ``ScaledGemmProblem`` these operands pose, or why the family declines them.

    ``swizzle_*``: None (what v1 ``torch._scaled_mm`` means on ROCm),
    ``SwizzleType.NO_SWIZZLE`` or 0; ``scale_recipe_*``: None or ``ScalingType.BlockWise1x32``
    (``F.scaled_mm``'s arguments); anything else is declined, as is a ``scale_result``
    (``_scaled_mm``'s output scale for fp8 outputs).
    """
    if len(a.shape) != 2 or len(b.shape) != 2 or len(out.shape) != 2:
        return Decline("shape", "only 2-D operands are supported")
    if scale_result is not None:
        return Decline("dtype", "scale_result (an output scale for fp8 outputs) is not supported: the kernel "
                                "writes bfloat16/float16")
    d = _check_format("A", a) or _check_format("B", b)
    for which, recipe, swizzle in (("scale_a", scale_recipe_a, swizzle_a), ("scale_b", scale_recipe_b, swizzle_b)):
        d = d or _enum_arg(f"{which}'s recipe", recipe, _RECIPES, "BlockWise1x32", "dtype",
                           "not MX (BlockWise1x32: one E8M0 scale per 32 values along K)")
        d = d or _enum_arg(f"{which}'s swizzle", swizzle, _SWIZZLES, "NO_SWIZZLE", "layout",
                           "the kernel reads only the unswizzled [rows, K/32] row-major layout (NO_SWIZZLE)")
    if d:
        return d
    fa, fb = format_of(a.dtype), format_of(b.dtype)
    assert fa is not None and fb is not None  # _check_format passed for both
    m, k = a.shape[0], a.shape[1] * fa.values_per_byte
    k_b, n = b.shape[0] * fb.values_per_byte, b.shape[1]
    if k != k_b or tuple(out.shape) != (m, n):
        return Decline("shape", f"inconsistent shapes A{list(a.shape)} ({fa.name}) B{list(b.shape)} ({fb.name}) "
                                f"out{list(out.shape)}: K={k} vs {k_b}")
    if min(m, n, k) <= 0:
        return Decline("shape", f"empty problem M={m} N={n} K={k}")
    if max(m, n, k) > INT32_MAX:
        return Decline("shape", "a dimension exceeds int32")
    if k % SCALE_BLOCK:
        return Decline("shape", f"K={k} is not a multiple of 32 (one E8M0 scale per 32 values)")
    if k % K_MULTIPLE:
        return Decline("shape", f"K={k} is not a multiple of {K_MULTIPLE}: the scaled MFMA consumes 128 K values "
                                "and the kernel has no K tail (E8M0 has no zero to mask one)")
    if out.dtype not in OUT_DTYPES:
        return Decline("dtype", f"output dtype {dtype_name(out.dtype)} is not bfloat16 or float16 (what "
                                "torch._scaled_mm returns for MX on ROCm; the epilogue stores 8-element 16-byte vectors)")
    if out_dtype is not None and out_dtype != out.dtype:
        return Decline("dtype", f"out_dtype={dtype_name(out_dtype)} differs from the output's "
                                f"{dtype_name(out.dtype)}")

    if a.stride[1] != 1 or (m > 1 and a.stride[0] < a.shape[1]):
        return Decline("layout", f"A strides {a.stride}: A must be row-major [M, K] (K contiguous), as "
                                 "torch._scaled_mm requires")
    if b.stride[0] != 1 or (n > 1 and b.stride[1] < b.shape[0]):
        return Decline("layout", f"B strides {b.stride}: B must be column-major [K, N] (stored [N, K], K "
                                 "contiguous), as torch._scaled_mm requires")
    if (out.stride[1] != 1 and n > 1) or (m > 1 and out.stride[0] < n):
        return Decline("layout", f"output strides {out.stride} are not row-major")
    for name, t, lead in (
        ("A", a, a.stride[0] if m > 1 else None),
        ("B", b, b.stride[1] if n > 1 else None),
        ("output", out, out.stride[0] if m > 1 else None),
    ):
        d = check_aligned(name, t, lead) or check_span(name, t)
        if d:
            return d
    d = _check_scale("scale_a", scale_a, m, "M", k) or _check_scale("scale_b", scale_b, n, "N", k)
    if d:
        return d
    if bias is not None:
        d = _check_bias(bias, m, n, out.dtype)
        if d:
            return d
    return ScaledGemmProblem(m, n, k, fa.name, fb.name, out.dtype, bias is not None)


def contiguous_metas(m: int, n: int, k: int, a_format: str = "e4m3", b_format: str = "e4m3",
                     out_dtype: torch.dtype = torch.bfloat16, bias: bool = False) -> tuple:
    """``(a, b, scale_a, scale_b, out, bias)`` as ``torch._scaled_mm`` takes them for an
    ``M x N x K`` MX problem (A row-major, B column-major, [M, K/32] / [N, K/32] scales), for
    ``explain``-style callers that have shapes, not tensors. K must be even for MXFP4."""
    fa, fb = FORMATS[a_format], FORMATS[b_format]
    ka, kb = k // fa.values_per_byte, k // fb.values_per_byte
    return (
        TensorMeta.contiguous((m, ka), DTYPE_OF_FORMAT[a_format]),
        TensorMeta((kb, n), (1, kb), DTYPE_OF_FORMAT[b_format]),
        TensorMeta.contiguous((m, k // SCALE_BLOCK), SCALE_DTYPE),
        TensorMeta.contiguous((n, k // SCALE_BLOCK), SCALE_DTYPE),
        TensorMeta.contiguous((m, n), out_dtype),
        TensorMeta.contiguous((n,), out_dtype) if bias else None,
    )
