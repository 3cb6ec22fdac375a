"""MXFP4 quantization of activations in torch ops (any device): what a caller of the MX scaled
family does to bf16/fp16 activations ``[M, K]`` before an MXFP4 x MXFP4 GEMM.

The rule (OCP Microscaling Formats v1.0, section 6.3, with the block maximum rounded the way
vLLM's and AITER's MXFP4 quantizers round it), per row and per 32 consecutive K values:

1. ``amax`` = the block's largest ``|x|``, in float32.
2. ``amax`` is rounded to its leading power of two *after* adding half a unit at the third
   mantissa bit (float32 bits ``(bits + 0x200000) & 0x7F800000``): a block whose ``amax`` is at
   least 1.75 x 2^e takes 2^(e+1). OCP's plain ``floor(log2(amax))`` keeps 2^e there, and every
   value of the block above 1.5 x 2^e would then saturate to 6: the rounded maximum keeps those
   at 4 x 2^(e-1) instead.
3. The shared exponent is ``X = log2(that power) - 2`` (E2M1's largest exponent is 2), clamped
   to [-127, 127]; the E8M0 code is ``X + 127``. An all-zero block gets code 0 (2^-127); a block
   whose rounded maximum overflows float32 (``amax`` >= 1.75 x 2^127, infinity, NaN) gets 254.
4. Each value ``v = x * 2^-X`` (float32) becomes the nearest E2M1 value (0, 0.5, 1, 1.5, 2, 3, 4,
   6) with ties to the even code, and saturates to +-6 above 6 (NaN and infinities become +-6,
   by their sign bit). The sign is kept, so -0.1 gives code 0b1000 (-0).
5. Two values share a byte, the one at the even K index in the low nibble
   (``float4_e2m1fn_x2``, as ``torch._scaled_mm`` and the family read it).

This is the rule vLLM's portable Triton quantizer (``mxfp4_utils.downcast_to_mxfp``) implements;
``benchmarks/mxfp4_quantizer_compare.py`` measures the two against each other on a GPU.
"""

from __future__ import annotations

import torch

BLOCK = 32
# Magnitude thresholds between consecutive E2M1 values, each with whether a value equal to it
# rounds up (a tie goes to the even code: 0.25 -> 0, 0.75 -> 1.0, 1.25 -> 1.0, 1.75 -> 2, ...).
_STEPS = ((0.25, False), (0.75, True), (1.25, False), (1.75, True), (2.5, False), (3.5, True), (5.0, False))


def block_exponents(x: torch.Tensor) -> torch.Tensor:
    """The E8M0 codes (uint8 ``[M, K/32]``) of each 32-value block of ``x [M, K]`` (steps 1-3)."""
    m, k = x.shape
    amax = x.float().abs().reshape(m, k // BLOCK, BLOCK).amax(dim=2)
    amax = torch.where(torch.isnan(amax), torch.inf, amax)  # a NaN anywhere in a block: the largest code
    bits = amax.view(torch.int32)
    field = ((bits + 0x200000) >> 23) & 0xFF  # the exponent field of the rounded power of two
    exp = torch.where(field == 255, 127, torch.where(field == 0, -127, field - 129))
    return (exp.clamp(-127, 127) + 127).to(torch.uint8)


def e2m1_codes(v: torch.Tensor) -> torch.Tensor:
    """Float32 values (already divided by their block's scale) -> E2M1 codes 0..15 (step 4)."""
    mag = v.abs()
    code = torch.zeros(v.shape, dtype=torch.uint8, device=v.device)
    for step, tie_up in _STEPS:
        code += (mag >= step if tie_up else mag > step).to(torch.uint8)
    code = torch.where(torch.isnan(v), 7, code)  # NaN saturates like an infinity
    sign = (v.view(torch.int32) < 0).to(torch.uint8) << 3
    return code | sign


def mxfp4_quantize(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``x [M, K]`` (bf16/fp16/fp32, K a multiple of 32) -> ``(values, scales)``: packed E2M1
    ``uint8 [M, K/2]`` (low nibble = even K index) and E8M0 codes ``uint8 [M, K/32]``."""
    if x.dim() != 2 or x.shape[1] % BLOCK:
        raise ValueError(f"mxfp4_quantize takes [M, K] with K a multiple of {BLOCK}, not {list(x.shape)}")
    m, k = x.shape
    scales = block_exponents(x)
    # 2^-X = 2^(127 - code) as float32 bits, exact on any device: exponent field 254 - code for
    # codes 0..253, and 2^-127 (code 254) the subnormal 0x00400000
    code = scales.to(torch.int32)
    inv = torch.where(code == 254, 0x400000, (254 - code) << 23).view(torch.float32)
    v = x.float().reshape(m, k // BLOCK, BLOCK) * inv.unsqueeze(2)
    codes = e2m1_codes(v.reshape(m, k))
    return codes[:, 0::2] | (codes[:, 1::2] << 4), scales
