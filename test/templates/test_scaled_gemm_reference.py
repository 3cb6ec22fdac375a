"""The MX scaled GEMM family's float64 reference: exact dequantization (E8M0 as PyTorch decodes
it, 0xFF = NaN, 2^-127 .. 2^127; FP4 nibble order), IEEE special values independent of the
BLAS, and the fp32-accumulated baseline the emulated tests measure against (no FlyDSL)."""

import itertools

import torch

from torch_flydsl.templates.scaled_gemm import dequantize, reference
from torch_flydsl.templates.scaled_gemm.reference import (
    e2m1_values,
    e8m0_values,
    fp32_accumulated,
    ieee_matmul,
    mx_values,
)

E8M0 = torch.float8_e8m0fnu
FP4_MAGNITUDES = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]


def test_e8m0_decodes_every_code_as_pytorch_does_with_exact_extremes():
    codes = torch.arange(256, dtype=torch.uint8)
    got = e8m0_values(codes.view(E8M0))
    torch.testing.assert_close(got, codes.view(E8M0).to(torch.float64), equal_nan=True)
    assert got[0] == 2.0**-127 and got[127] == 1.0 and got[254] == 2.0**127 and torch.isnan(got[255])


def test_e2m1_codes_and_the_low_nibble_holds_the_even_k():
    codes = torch.arange(16, dtype=torch.uint8)
    assert e2m1_values(codes).tolist() == FP4_MAGNITUDES + [-v for v in FP4_MAGNITUDES]
    a = torch.tensor([[0x21, 0xF7]], dtype=torch.uint8).view(torch.float4_e2m1fn_x2)  # A [1, K=4]
    assert mx_values(a, 1).tolist() == [[0.5, 1.0, 6.0, -6.0]]
    b = a.t()  # B [K/2=2, N=1] packed along K (dim 0)
    assert mx_values(b, 0).flatten().tolist() == [0.5, 1.0, 6.0, -6.0]


def test_fp8_values_are_pytorchs():
    for dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
        t = torch.arange(256, dtype=torch.uint8).view(dtype).reshape(8, 32)
        torch.testing.assert_close(mx_values(t, 1), t.to(torch.float64), equal_nan=True)


def test_dequantize_applies_one_scale_per_32_k_values_of_a_row_or_column():
    a = torch.full((2, 64), 0x38, dtype=torch.uint8).view(torch.float8_e4m3fn)  # 1.0 everywhere
    s = torch.tensor([[0, 254], [127, 128], [255, 255]], dtype=torch.uint8).view(E8M0)  # 3 rows: 1 padding
    d = dequantize(a, s, 1)
    assert d.shape == (2, 64) and (d[0, :32] == 2.0**-127).all() and (d[0, 32:] == 2.0**127).all()
    assert (d[1, :32] == 1).all() and (d[1, 32:] == 2).all()
    db = dequantize(a.t(), s, 0)  # B [K, N]: column n uses scale row n
    assert torch.equal(db, d.t())


def _elementwise(a, b):
    """a @ b by explicit IEEE float64 sums (small inputs only)."""
    out = torch.empty(a.shape[0], b.shape[1], dtype=torch.float64)
    for i, j in itertools.product(range(a.shape[0]), range(b.shape[1])):
        acc = torch.tensor(0.0, dtype=torch.float64)
        for k in range(a.shape[1]):
            acc = acc + a[i, k] * b[k, j]
        out[i, j] = acc
    return out


def test_ieee_matmul_matches_explicit_sums_for_nan_inf_zero_and_signs():
    g = torch.Generator().manual_seed(0)
    a = torch.randn(6, 5, generator=g, dtype=torch.float64)
    b = torch.randn(5, 7, generator=g, dtype=torch.float64)
    a[0, 1] = float("nan")  # NaN row
    a[1, 2] = float("inf")
    b[2, 0] = 0.0  # inf * 0
    b[2, 3] = -2.0  # -inf
    a[2, 4] = float("-inf")
    b[4, 3] = 1.0  # with a[2, 2] * b[2, 3] maybe finite: -inf
    a[3, 2], a[3, 4] = float("inf"), float("inf")
    b[4, 5], b[2, 5] = -1.0, 1.0  # inf - inf
    b[0, 6] = float("nan")  # NaN column
    torch.testing.assert_close(ieee_matmul(a, b), _elementwise(a, b), equal_nan=True)
    clean = torch.randn(4, 3, dtype=torch.float64, generator=g)
    torch.testing.assert_close(ieee_matmul(clean, clean.t()), clean @ clean.t())


def test_reference_and_fp32_accumulated_on_a_small_exact_problem():
    g = torch.Generator().manual_seed(1)
    m, n, k = 3, 5, 64
    a = torch.randint(0, 256, (m, k // 2), generator=g, dtype=torch.uint8).view(torch.float4_e2m1fn_x2)
    b = torch.randint(0, 256, (n, k), generator=g, dtype=torch.uint8)
    b[(b & 0x7F) == 0x7F] = 0
    b = b.view(torch.float8_e4m3fn).t()
    sa = torch.randint(120, 135, (m, 2), generator=g, dtype=torch.uint8).view(E8M0)
    sb = torch.randint(120, 135, (n, 2), generator=g, dtype=torch.uint8).view(E8M0)
    bias = torch.randn(n, generator=g).to(torch.bfloat16)
    ref = reference(a, b, sa, sb, bias)
    expect = _elementwise(dequantize(a, sa, 1), dequantize(b, sb, 0)) + bias.double()
    torch.testing.assert_close(ref, expect, rtol=1e-12, atol=0)
    base = fp32_accumulated(a, b, sa, sb, bias, torch.bfloat16)
    assert (base - ref).abs().max() <= 2.0**-8 * ref.abs().max()  # one bf16 rounding, plus fp32 sums
    assert torch.equal(base, base.to(torch.bfloat16).double())
