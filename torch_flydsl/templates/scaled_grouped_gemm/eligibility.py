"""Can the MXFP8 grouped GEMM family take these operands? ``TensorMeta`` in, a problem or a
``Decline`` with a reason out. The contract is ``problem.py``'s (ROCm's ``NO_SWIZZLE``
``_scaled_grouped_mm_v2``): anything else keeps PyTorch's path (and its error)."""

from __future__ import annotations

from typing import Optional, Union

import torch

from ..base import INT32_MAX, Decline, TensorMeta, check_aligned, check_span, dtype_name
from ..scaled_gemm.eligibility import K_MULTIPLE, SCALE_ALIGN_BYTES
from ..scaled_gemm.problem import SCALE_BLOCK, SCALE_DTYPE
from .problem import ScaledGroupedProblem

OUT_DTYPES = (torch.bfloat16, torch.float16)


def _row_major_scales(name: str, s: TensorMeta, rows: int, blocks: int, exact: bool) -> Optional[Decline]:
    if s.dtype != SCALE_DTYPE:
        return Decline("dtype", f"{name} dtype {dtype_name(s.dtype)} is not float8_e8m0fnu: not an MX recipe")
    if len(s.shape) != 2 or s.shape[1] != blocks or (s.shape[0] != rows if exact else s.shape[0] < rows):
        want = f"[{rows}" + ("" if exact else " or more") + f", K/32={blocks}]"
        return Decline("shape", f"{name} has shape {list(s.shape)}; expected {want}")
    if s.stride[1] != 1 or (s.shape[0] > 1 and s.stride[0] != blocks):
        return Decline("layout", f"{name} strides {s.stride} are not contiguous row-major")
    if s.offset % SCALE_ALIGN_BYTES:
        return Decline("alignment", f"{name} must start on a 4-byte boundary (offset {s.offset})")
    return check_span(name, s)


def check_problem(a: TensorMeta, b: TensorMeta, scale_a: TensorMeta, scale_b: TensorMeta, offs: Optional[TensorMeta],
                  out: TensorMeta, bias: Optional[TensorMeta] = None) -> Union[ScaledGroupedProblem, Decline]:
    if (len(a.shape), len(b.shape)) != (2, 3):
        return Decline("shape", f"{len(a.shape)}-D x {len(b.shape)}-D MXFP8 grouped GEMM is not supported (only "
                                "2-D A x 3-D B with offs, the MoE forward)")
    if offs is None or offs.dtype != torch.int32 or len(offs.shape) != 1 or offs.shape[0] != b.shape[0]:
        return Decline("shape", "offs must be int32 [G]")
    if bias is not None:
        return Decline("shape", "a bias is not supported")
    for name, t in (("A", a), ("B", b)):
        if t.dtype != torch.float8_e4m3fn:
            return Decline("dtype", f"{name} dtype {dtype_name(t.dtype)} is not float8_e4m3fn (MXFP8 grouped GEMM "
                                    "as torch's _scaled_grouped_mm takes it)")
    (t_rows, k), (g, k2, n) = a.shape, b.shape
    if k != k2 or tuple(out.shape) != (t_rows, n):
        return Decline("shape", f"inconsistent shapes A{list(a.shape)} B{list(b.shape)} out{list(out.shape)}")
    if min(g, n, k) <= 0:
        return Decline("shape", f"empty problem G={g} N={n} K={k}")
    if max(t_rows, n, k, g) > INT32_MAX:
        return Decline("shape", "a dimension exceeds int32")
    if k % K_MULTIPLE:
        return Decline("shape", f"K={k} is not a multiple of {K_MULTIPLE} (one scaled MFMA; no K tail)")
    if out.dtype not in OUT_DTYPES:
        return Decline("dtype", f"output dtype {dtype_name(out.dtype)} is not bfloat16 or float16")
    if a.stride[1] != 1 or (t_rows > 1 and a.stride[0] < k):
        return Decline("layout", f"A strides {a.stride}: A must be row-major [T, K]")
    if b.stride[1] != 1 or (n > 1 and b.stride[2] < k) or (g > 1 and b.stride[0] < n * k):
        return Decline("layout", f"B strides {b.stride}: each group must be column-major [K, N] (stored [G, N, K])")
    if (out.stride[1] != 1 and n > 1) or (t_rows > 1 and out.stride[0] < n):
        return Decline("layout", f"output strides {out.stride} are not row-major")
    if offs.stride[0] != 1 and g > 1:
        return Decline("layout", f"offs strides {offs.stride} are not contiguous")
    for name, t, lead in (("A", a, a.stride[0] if t_rows > 1 else None), ("B", b, b.stride[2] if n > 1 else None),
                          ("B's group", b, b.stride[0] if g > 1 else None), ("output", out, out.stride[0])):
        d = check_aligned(name, t, lead)
        if d:
            return d
    for name, t in (("A", a), ("B", b), ("output", out), ("offs", offs)):
        d = check_span(name, t)
        if d:
            return d
    blocks = k // SCALE_BLOCK
    d = _row_major_scales("scale_a", scale_a, t_rows, blocks, exact=False)
    if d:
        return d
    if len(scale_b.shape) == 3:  # [G, N, K/32]: the same bytes as the 2-D form
        if tuple(scale_b.shape) != (g, n, blocks) or scale_b.stride != (n * blocks, blocks, 1):
            return Decline("layout", f"scale_b {list(scale_b.shape)} strides {scale_b.stride}: expected contiguous "
                                     f"[G={g}, N={n}, K/32={blocks}]")
    elif tuple(scale_b.shape) != (g, n * blocks) or (g > 1 and scale_b.stride[0] != n * blocks):
        return Decline("shape", f"scale_b has shape {list(scale_b.shape)}; expected contiguous [G={g}, N*K/32="
                                f"{n * blocks}] (each group's [N, K/32] row-major: unswizzled, NO_SWIZZLE)")
    if scale_b.dtype != SCALE_DTYPE:
        return Decline("dtype", f"scale_b dtype {dtype_name(scale_b.dtype)} is not float8_e8m0fnu: not an MX recipe")
    if scale_b.offset % SCALE_ALIGN_BYTES:
        return Decline("alignment", f"scale_b must start on a 4-byte boundary (offset {scale_b.offset})")
    d = check_span("scale_b", scale_b)
    if d:
        return d
    return ScaledGroupedProblem(t_rows, n, k, g, "e4m3", "e4m3", out.dtype)


def moe_forward_metas(tokens: int, n: int, k: int, groups: int, out_dtype: torch.dtype = torch.bfloat16,
                      device_type: str = "cuda") -> tuple[TensorMeta, ...]:
    """``(a, b, scale_a, scale_b, offs, out)`` of the MoE forward as its callers lay it out
    (``_scaled_grouped_mm_v2`` and vLLM's MXFP8 experts alike): A ``[tokens, K]`` row-major, each
    expert's weight stored ``[N, K]`` (B ``[G, K, N]`` column-major per group), scales ``[tokens,
    K/32]`` and ``[G, N, K/32]`` contiguous, int32 ``offs [G]``, output ``[tokens, N]``."""
    fp8, blocks = torch.float8_e4m3fn, k // SCALE_BLOCK
    contiguous = TensorMeta.contiguous
    return (contiguous((tokens, k), fp8, device_type),
            TensorMeta((groups, k, n), (n * k, 1, k), fp8, 0, device_type),
            contiguous((tokens, blocks), SCALE_DTYPE, device_type),
            contiguous((groups, n, blocks), SCALE_DTYPE, device_type),
            contiguous((groups,), torch.int32, device_type),
            contiguous((tokens, n), out_dtype, device_type))


def check_tensors(a, b, scale_a, scale_b, offs, out, bias=None):
    of = TensorMeta.of_optional
    return check_problem(of(a), of(b), of(scale_a), of(scale_b), of(offs), of(out), of(bias))
