"""templates.scaled_gemm.quantize: MXFP4 activation quantization against a float64 reading of the
rule its docstring states (block maximum rounded at 1.75 x 2^e, shared exponent log2 - 2, E2M1
round-to-nearest-even, saturation), on random inputs and on the ties and edges."""

from __future__ import annotations

import math

import pytest
import torch

from torch_flydsl.templates.scaled_gemm.quantize import mxfp4_quantize
from torch_flydsl.templates.scaled_gemm.reference import e2m1_values

GRID = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)  # E2M1 magnitudes by code


def oracle_exponent(block: list) -> int:
    """The shared exponent X of one block of float32 values, from the rule in float64 arithmetic."""
    amax = max(abs(v) for v in block)
    if math.isnan(amax) or math.isinf(amax):
        return 127
    if amax < 2.0**-126:  # zero or a float32 subnormal: the smallest code
        return -127
    mant, e = math.frexp(amax)  # amax = mant * 2^e, mant in [0.5, 1)
    e -= 1  # amax = (2 mant) * 2^e, 2 mant in [1, 2)
    if 2 * mant >= 1.75:
        e += 1
    if e >= 128:  # the rounded maximum overflows float32
        return 127
    return max(-127, min(127, e - 2))


def oracle_code(v: float) -> int:
    """E2M1 code of a float (already divided by the block scale): nearest, ties to the even code."""
    sign = 8 if math.copysign(1.0, v) < 0 else 0
    mag = abs(v)
    if math.isnan(mag) or mag >= 6.0:
        return sign | 7
    best = min(range(8), key=lambda c: (abs(GRID[c] - mag), c % 2))  # ties: the even code
    return sign | best


def oracle(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    rows = x.float().tolist()
    codes, scales = [], []
    for row in rows:
        out_row, s_row = [], []
        for j in range(0, len(row), 32):
            block = row[j:j + 32]
            e = oracle_exponent(block)
            s_row.append(e + 127)
            out_row += [oracle_code(float(torch.tensor(v, dtype=torch.float32) * torch.tensor(2.0**-e, dtype=torch.float32)))
                        for v in block]
        codes.append(out_row)
        scales.append(s_row)
    c = torch.tensor(codes, dtype=torch.uint8)
    return c[:, 0::2] | (c[:, 1::2] << 4), torch.tensor(scales, dtype=torch.uint8)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_random_inputs_match_the_rule_bit_for_bit(dtype):
    g = torch.Generator().manual_seed(7)
    x = (torch.randn(6, 256, generator=g) * torch.logspace(-3, 3, 6).unsqueeze(1)).to(dtype)
    x[1, 32:64] = 0  # an all-zero block
    values, scales = mxfp4_quantize(x)
    want_v, want_s = oracle(x)
    assert values.shape == (6, 128) and scales.shape == (6, 8)
    assert torch.equal(scales, want_s)
    assert torch.equal(values, want_v)


def test_ties_round_to_the_even_code_and_large_values_saturate():
    # the block's maximum is 6 = 1.5 * 2^2: X = 0, so the values are their own E2M1 inputs
    ties = [0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, -0.25, -5.0, 6.0]
    block = torch.tensor(ties + [0.0] * (32 - len(ties)), dtype=torch.float32).unsqueeze(0)
    values, scales = mxfp4_quantize(block)
    assert int(scales[0, 0]) == 127  # X = 0
    codes = torch.stack((values & 0xF, values >> 4), dim=2).reshape(1, 32)[0, :len(ties)]
    assert e2m1_values(codes).tolist() == [0.0, 1.0, 1.0, 2.0, 2.0, 4.0, 4.0, -0.0, -4.0, 6.0]


def test_a_maximum_at_or_above_1_75_takes_the_next_exponent():
    # amax 7 = 1.75 * 2^2 takes 2^3: X = 1, so 7 / 2 = 3.5 -> 4 (not saturated to 6 at X = 0)
    below = torch.tensor([6.9] + [0.0] * 31).unsqueeze(0)
    at = torch.tensor([7.0] + [0.0] * 31).unsqueeze(0)
    assert int(mxfp4_quantize(below)[1][0, 0]) == 127  # 6.9 < 1.75 * 4: X = 0, value saturates to 6
    assert int(mxfp4_quantize(at)[1][0, 0]) == 128
    assert e2m1_values(mxfp4_quantize(at)[0][0, :1] & 0xF).tolist() == [4.0]


def test_edges_zero_block_huge_block_nan_and_negative_zero():
    x = torch.zeros(4, 32)
    x[1, 0] = 3.0e38  # >= 1.75 * 2^127: the rounded maximum overflows: code 254
    x[2, 3] = float("nan")
    x[3, 5] = -0.0
    values, scales = mxfp4_quantize(x)
    assert scales[:, 0].tolist() == [0, 254, 254, 0]
    codes = torch.stack((values & 0xF, values >> 4), dim=2).reshape(4, 32)
    assert int(codes[2, 3]) == 7  # NaN saturates (positive sign bit)
    assert int(codes[3, 5]) == 8  # -0 keeps its sign
    assert int(codes[0].max()) == 0


def test_rejects_a_k_that_is_not_a_multiple_of_32():
    with pytest.raises(ValueError, match="multiple of 32"):
        mxfp4_quantize(torch.zeros(2, 48))
