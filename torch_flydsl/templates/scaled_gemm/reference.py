"""float64 reference of the MX scaled GEMM family, with exact dequantization.

Every MX value times its E8M0 scale is exact in float64 (FP8/FP4 values carry at most 3
mantissa bits; scales are 2^-127 .. 2^127, code 0xFF is NaN as in PyTorch), so the reference
is the exact product up to float64 summation. It follows IEEE arithmetic for NaN and infinity
on its own (NaN in any product of a row/column pair, inf * 0, inf - inf) instead of trusting
a BLAS to propagate them.
"""

from __future__ import annotations

from typing import Optional

import torch

from .problem import SCALE_BLOCK, format_of

# E2M1 magnitudes by the low three bits of a code; bit 3 is the sign.
_E2M1 = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)


def e8m0_values(scale: torch.Tensor) -> torch.Tensor:
    """E8M0 codes -> float64: 2^(code - 127); 0xFF -> NaN."""
    code = scale.view(torch.uint8).to(torch.int64)
    val = torch.ldexp(torch.ones(code.shape, dtype=torch.float64, device=code.device), code - 127)
    return torch.where(code == 255, torch.nan, val)


def e2m1_values(codes: torch.Tensor) -> torch.Tensor:
    """E2M1 codes (0..15, one per element) -> float64."""
    table = torch.tensor(_E2M1, dtype=torch.float64, device=codes.device)
    mag = table[(codes & 7).to(torch.int64)]
    return torch.where((codes & 8) != 0, -mag, mag)


def mx_values(t: torch.Tensor, k_dim: int) -> torch.Tensor:
    """An MX operand's values in float64, with float4_e2m1fn_x2 unpacked along ``k_dim`` (the
    value at the even K index sits in a byte's low nibble)."""
    if format_of(t.dtype) is None:
        raise ValueError(f"not an MX element dtype: {t.dtype}")
    if t.dtype != torch.float4_e2m1fn_x2:
        return t.to(torch.float64)
    raw = t.view(torch.uint8)
    lo, hi = e2m1_values(raw & 0xF), e2m1_values(raw >> 4)
    both = torch.stack((lo, hi), dim=k_dim + 1)  # [.., K/2, 2, ..]: low nibble first
    shape = list(raw.shape)
    shape[k_dim] *= 2
    return both.reshape(shape)


def dequantize(t: torch.Tensor, scale: torch.Tensor, k_dim: int) -> torch.Tensor:
    """Exact float64 values of an MX operand: A ``[M, K]`` with ``k_dim=1`` and scale
    ``[>= M, K/32]``, or B ``[K, N]`` with ``k_dim=0`` and scale ``[>= N, K/32]``."""
    vals = mx_values(t, k_dim)
    rows = vals.shape[1 - k_dim]
    s = e8m0_values(scale)[:rows].repeat_interleave(SCALE_BLOCK, dim=1)
    return vals * (s if k_dim == 1 else s.t())


def ieee_matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``a @ b`` in float64 with IEEE special values: the finite products go through the BLAS;
    NaN and infinities are decided from indicator products (a BLAS may skip zeros)."""
    fa, fb = torch.isfinite(a), torch.isfinite(b)
    out = torch.where(fa, a, 0.0) @ torch.where(fb, b, 0.0)
    if bool(fa.all()) and bool(fb.all()):
        return out
    f = lambda x: x.to(torch.float64)  # noqa: E731
    nan_a, nan_b = torch.isnan(a), torch.isnan(b)
    inf_a, inf_b = torch.isinf(a), torch.isinf(b)
    zero_a, zero_b = a == 0, b == 0
    pos_a, pos_b = (a > 0), (b > 0)
    neg_a, neg_b = (a < 0), (b < 0)
    # An infinite product: an infinity times a non-zero (non-NaN) value; its sign is the product's.
    big_pos = f(inf_a & pos_a) @ f(pos_b) + f(inf_a & neg_a) @ f(neg_b) + f(pos_a) @ f(inf_b & pos_b) + f(neg_a) @ f(inf_b & neg_b)
    big_neg = f(inf_a & pos_a) @ f(neg_b) + f(inf_a & neg_a) @ f(pos_b) + f(pos_a) @ f(inf_b & neg_b) + f(neg_a) @ f(inf_b & pos_b)
    nan = (nan_a.any(1, keepdim=True) | nan_b.any(0, keepdim=True)
           | (f(inf_a) @ f(zero_b) > 0) | (f(zero_a) @ f(inf_b) > 0) | ((big_pos > 0) & (big_neg > 0)))
    out = torch.where(big_pos > 0, torch.inf, torch.where(big_neg > 0, -torch.inf, out))
    return torch.where(nan, torch.nan, out)


def fp32_accumulated(
    a: torch.Tensor,
    b: torch.Tensor,
    scale_a: torch.Tensor,
    scale_b: torch.Tensor,
    bias: Optional[torch.Tensor] = None,
    out_dtype: torch.dtype = torch.bfloat16,
) -> torch.Tensor:
    """What an fp32-accumulating implementation computes from the exact inputs, on the CPU:
    each 32-block's scaled dot products exactly (float64), summed block after block in fp32,
    plus the bias in fp32, rounded once to ``out_dtype`` (returned as float64). The accuracy
    baseline of the emulated tests: the kernel's only errors are of this kind."""
    A, B = mx_values(a, 1), mx_values(b, 0)
    sa, sb = e8m0_values(scale_a)[: A.shape[0]], e8m0_values(scale_b)[: B.shape[1]]
    acc = torch.zeros(A.shape[0], B.shape[1], dtype=torch.float32)
    for blk in range(A.shape[1] // SCALE_BLOCK):
        ks = slice(SCALE_BLOCK * blk, SCALE_BLOCK * (blk + 1))
        term = ieee_matmul(A[:, ks], B[ks, :]) * (sa[:, blk, None] * sb[None, :, blk])
        acc = acc + term.to(torch.float32)
    if bias is not None:
        acc = acc + bias.to(torch.float32)
    return acc.to(out_dtype).to(torch.float64)


def reference(
    a: torch.Tensor,
    b: torch.Tensor,
    scale_a: torch.Tensor,
    scale_b: torch.Tensor,
    bias: Optional[torch.Tensor] = None,
    device: Optional[torch.device] = None,
) -> torch.Tensor:
    """``(A * 2^scale_a) @ (B * 2^scale_b) [+ bias]`` in float64 (``[M, N]``), operands as
    ``compile_args`` takes them. ``device`` (default CPU) is where to compute."""
    where = device or "cpu"
    mv = lambda t: t.detach().to(where)  # noqa: E731
    out = ieee_matmul(dequantize(mv(a), mv(scale_a), 1), dequantize(mv(b), mv(scale_b), 0))
    if bias is not None:
        out = out + mv(bias).to(torch.float64)
    return out
