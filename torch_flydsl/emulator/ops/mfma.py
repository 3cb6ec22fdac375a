"""MFMA (matrix fused multiply-add) on a wave64, with the CDNA3/CDNA4 register layouts.

For the single-block ``MxNxK`` variants (M = N = 16 or 32) the lanes split into
``G = 64 / M`` groups. Operand A (M x K): lane ``l`` holds row ``l % M`` and the
``V = K / G`` consecutive k values ``k = (l // M) * V + j``. Operand B (K x N) likewise with
column ``l % N``. Accumulator C/D (M x N, f32): lane ``l`` holds column ``l % N``; value ``j``
is row ``(j // 4) * 4G + (l // N) * 4 + j % 4``. These tables are cross-checked against
FlyDSL's own MMA-atom thread/value layouts in the tests.

Products of bf16/f16/fp8 inputs are exact in float64 and the dot products are summed in
float64, then rounded once to f32 (the hardware's internal accumulation order is not
specified; the result can differ from silicon in the last bits of f32).
"""

from __future__ import annotations

import re
from functools import lru_cache

import numpy as np

from ..errors import UnsupportedOp
from ..numerics import decode_narrow
from ..translate import register
from ..types import TypeInfo
from .arith import bitcast_value

WAVE = 64


@lru_cache(maxsize=None)
def mfma_layout(m: int, n: int, k: int):
    """Index tables for one wave: (a_row, a_k), (b_k, b_col), (c_row, c_col), each (64, values)."""
    if m != n or m not in (16, 32):
        raise UnsupportedOp(f"mfma {m}x{n}x{k}", "only single-block 16x16 / 32x32 shapes are modelled")
    lane = np.arange(WAVE)[:, None]
    groups = WAVE // m
    v = k // groups
    j = np.arange(v)[None, :]
    a_row = np.broadcast_to(lane % m, (WAVE, v))
    a_k = (lane // m) * v + j
    cj = np.arange(m * n // WAVE)[None, :]
    c_row = (cj // 4) * (4 * groups) + (lane // n) * 4 + cj % 4
    c_col = np.broadcast_to(lane % n, c_row.shape)
    return (a_row, a_k), (a_k, a_row), (c_row, c_col)


_NAME = re.compile(r"rocdl\.mfma\.(f32|i32|f64)\.(\d+)x(\d+)x(\d+)\.?([a-z0-9.]*)$")


def _operand_decoder(t: TypeInfo, suffix: str, which: int, values: int):
    """How to turn an operand register value into (lanes, values) float64/int64 elements."""
    s = t.scalar
    if s.kind == "float" and s.width >= 16:
        return lambda x: x.reshape(x.shape[0], -1).astype(np.float64)
    if s.kind == "int" or (s.kind == "vector" and s.element.kind == "int"):
        # packed narrow elements: fp8/bf8 (8-bit codes) or i8
        fmts = [p for p in suffix.split(".") if p]
        fmt = fmts[min(which, len(fmts) - 1)] if fmts else ""
        u8 = TypeInfo("vector", f"vector<{values}xi8>", 8, "i8", (values,), TypeInfo("int", "i8", 8, "i8"))

        def dec(x):
            raw = bitcast_value(x, t, u8).reshape(x.shape[0], -1)
            if fmt == "i8":
                return raw.astype(np.int64)
            if fmt == "fp8":
                return decode_narrow(raw.view(np.uint8), "f8E4M3FN")
            if fmt == "bf8":
                return decode_narrow(raw.view(np.uint8), "f8E5M2")
            raise UnsupportedOp(f"mfma operand format {fmt!r}")

        return dec
    raise UnsupportedOp(f"mfma operand type {t.text}")


@register(
    "rocdl.mfma.f32.16x16x32.bf16",
    "rocdl.mfma.f32.32x32x16.bf16",
    "rocdl.mfma.f32.16x16x32.f16",
    "rocdl.mfma.f32.32x32x16.f16",
    "rocdl.mfma.f32.16x16x16bf16.1k",
    "rocdl.mfma.f32.32x32x8bf16.1k",
    "rocdl.mfma.f32.16x16x16f16",
    "rocdl.mfma.f32.32x32x8f16",
    "rocdl.mfma.f32.16x16x4f32",
    "rocdl.mfma.f32.32x32x2f32",
    "rocdl.mfma.f32.16x16x32.fp8.fp8",
    "rocdl.mfma.f32.16x16x32.bf8.bf8",
    "rocdl.mfma.f32.16x16x32.fp8.bf8",
    "rocdl.mfma.f32.16x16x32.bf8.fp8",
    "rocdl.mfma.f32.32x32x16.fp8.fp8",
    "rocdl.mfma.f32.32x32x16.bf8.bf8",
    "rocdl.mfma.f32.32x32x16.fp8.bf8",
    "rocdl.mfma.f32.32x32x16.bf8.fp8",
    "rocdl.mfma.i32.16x16x64.i8",
    "rocdl.mfma.i32.32x32x32.i8",
)
def _mfma(n, T):
    m_ = _NAME.match(n.name)
    out_kind, M, N, K = m_.group(1), int(m_.group(2)), int(m_.group(3)), int(m_.group(4))
    suffix = m_.group(5)
    if n.name.endswith("f32") and K in (4, 2):
        pass
    for key in ("cbsz", "abid", "blgp"):
        v = n.attrs.get(key, 0)
        if v not in (0, None, "0", "none", "#rocdl<mfma_blgp none>") and "none" not in str(v):
            raise UnsupportedOp(n.name, f"{key}={v} (broadcast/permute modifiers not modelled)", n.loc)
    # cbsz/abid/blgp may also be operands (older op forms): they must be constant 0
    if len(n.operands) > 3:
        raise UnsupportedOp(n.name, "modifier operands", n.loc)
    (ar, ak), (bk, bc), (cr, cc) = mfma_layout(M, N, K)
    vals = ar.shape[1]
    a, b, c = n.operands[:3]
    dec_a = _operand_decoder(n.operand_types[0], suffix, 0, vals)
    dec_b = _operand_decoder(n.operand_types[1], suffix, 1, vals)
    r = n.results[0]
    acc_dt = np.int64 if out_kind == "i32" else np.float64
    out_dt = np.int32 if out_kind == "i32" else np.float32
    far, fak, fbk, fbc = ar.ravel(), ak.ravel(), bk.ravel(), bc.ravel()

    def step(W):
        e = W.env
        lanes = W.lanes
        av = dec_a(_full(e[a], lanes))
        bv = dec_b(_full(e[b], lanes))
        cv = _full(e[c], lanes)
        A = np.zeros((M, K), acc_dt)
        B = np.zeros((K, N), acc_dt)
        A[far, fak] = av.ravel()
        B[fbk, fbc] = bv.ravel()
        C = np.zeros((M, N), acc_dt)
        C[cr, cc] = cv.reshape(lanes, -1)
        D = A @ B + C
        e[r] = D[cr, cc].astype(out_dt).reshape(cv.shape)

    return step


def _full(x, lanes):
    return x if x.shape[0] == lanes else np.broadcast_to(x, (lanes,) + x.shape[1:])


# ---- gfx950 scaled MFMA (f8f6f4 with per-32 E8M0 block scales) -------------------------------
#
# Hardware semantics (sources in the emulator README, "Scaled MFMA"): for
# v_mfma_scale_f32_{16x16x128,32x32x64}_f8f6f4 lane l holds row (A) / column (B) ``l % M``
# and 32 values of K in its packed register; G = 64 / M lane groups, g = l // M.
#   FP8/BF8 (8-bit): two runs of 16:  value j -> k = (K/2)*(j // 16) + 16*g + j % 16
#   FP6/BF6, FP4:    32 consecutive:  value j -> k = 32*g + j
# The E8M0 scale of row/column i, K block b (k in [32b, 32b+32)) is the byte selected by
# opsel of the scale operand of lane ``M*b + i``: for FP8 a lane's scale is NOT the scale of
# its own data. Per block, D += 2^(sa-127) * 2^(sb-127) * sum_k A*B; 0xFF (NaN) -> NaN.
# FlyDSL 0.5.0's MFMA_Scale atom describes every format as 32 consecutive k (= the FP4/FP6
# order); for FP8/BF8 the hardware order above wins.
# Per source: FP8 at 32x32x64 = the ROCm blog's HIP loads (a_reg[i*16+j] = A[t%32][i*32 +
# (t/32)*16 + j]); FP8 and FP6 at both shapes = AMD Composable Kernel's gfx950 MX-MFMA test
# (rocm-libraries projects/composablekernel/test/mx_mfma_op/mx_mfma_op.hpp, "Register Mapping"
# tables: FP6 VGPRs 0-2 hold k = 32g..32g+15 and VGPRs 3-5 k = 32g+16..32g+31, 6-bit fields LSB
# first as f6_pk_t packs them; a device test with a random E8M0 per row and K block) and
# rocjitsu's input_loc. Triton's chooseScaledMfmaScaleLayout comment groups mxfp6 with mxfp8
# ("2 16-consecutive elements blocks"); Triton has no mxfp6 path and CK's tested table says
# otherwise, so FP6 is 32 consecutive here. For one format on both sides the K order only shows
# through scales that vary along K (or a mixed format pair).

_FORMATS = {  # matrix_format attribute -> (bits, decoder format)
    "fp8_e4m3": (8, "f8E4M3FN"),
    "fp8_e5m2": (8, "f8E5M2"),
    "fp6_e2m3": (6, "f6E2M3FN"),
    "fp6_e3m2": (6, "f6E3M2FN"),
    "fp4_e2m1": (4, "f4E2M1FN"),
}
_FORMAT_CODES = list(_FORMATS)  # cbsz / blgp codes 0..4

SCALE_BLOCK_K = 32  # K elements per E8M0 scale
SCALED_SHAPES = {16: 128, 32: 64}  # M (= N) -> K

#: finding kind: a scale operand of a scaled MFMA is a compile-time constant (see README)
SCALED_MFMA_CONSTANT_SCALE = "scaled_mfma_constant_scale"


def _check_scaled_shape(m: int, k: int):
    if SCALED_SHAPES.get(m) != k:
        raise UnsupportedOp(f"mfma.scale {m}x{m}x{k}", "only 16x16x128 and 32x32x64 exist")


@lru_cache(maxsize=None)
def scaled_mfma_operand_layout(m: int, k: int, bits: int):
    """Hardware register layout of one scaled-MFMA operand (A or B) in the given format.

    Returns ``(index, kk)``, each (64, 32): value j of lane l is element ``(index, kk)`` of
    A (index = row) or of B (index = column, kk = row of B).
    """
    _check_scaled_shape(m, k)
    if bits not in (4, 6, 8):
        raise UnsupportedOp(f"mfma.scale operand of {bits} bits")
    lane = np.arange(WAVE)[:, None]
    j = np.arange(SCALE_BLOCK_K)[None, :]
    g = lane // m
    if bits == 8:
        kk = (k // 2) * (j // 16) + 16 * g + j % 16
    else:
        kk = SCALE_BLOCK_K * g + j
    index = np.broadcast_to(lane % m, kk.shape)
    return index, kk


@lru_cache(maxsize=None)
def scaled_mfma_scale_lanes(m: int, k: int):
    """(m, K/32) table: the lane whose scale operand carries the scale of row/column i, block b."""
    _check_scaled_shape(m, k)
    i = np.arange(m)[:, None]
    b = np.arange(k // SCALE_BLOCK_K)[None, :]
    return m * b + i


def scale_bytes(scale: np.ndarray, opsel: int) -> np.ndarray:
    """The E8M0 byte that opsel selects from each lane's 32-bit scale operand."""
    return ((scale.astype(np.int64) >> (8 * opsel)) & 0xFF).astype(np.uint8)


def decode_e8m0(codes: np.ndarray) -> np.ndarray:
    """E8M0 -> float64: 2^(code-127), 0xFF is NaN (OCP MX)."""
    return decode_narrow(codes, "f8E8M0FNU")


def _matrix_format(attr, n):
    if isinstance(attr, int):
        if 0 <= attr < len(_FORMAT_CODES):
            return _FORMATS[_FORMAT_CODES[attr]]
    else:
        for key, val in _FORMATS.items():
            if key in str(attr):
                return val
    raise UnsupportedOp(n.name, f"matrix format {attr}", n.loc)


def _unpack_elems(x: np.ndarray, t: TypeInfo, bits: int, count: int) -> np.ndarray:
    """Per-lane packed operand -> (lanes, count) element codes (little-endian bit packing)."""
    from ..numerics import to_bytes

    lanes = x.shape[0]
    raw = to_bytes(x, t, lanes)
    if raw.shape[1] * 8 < bits * count:
        raise UnsupportedOp("rocdl.mfma.scale", f"operand {t.text} too small for {count} x {bits}-bit values")
    if bits == 8:
        return raw[:, :count]
    allbits = np.unpackbits(raw, axis=1, bitorder="little")[:, : bits * count].reshape(lanes, count, bits)
    weights = (1 << np.arange(bits)).astype(np.uint8)
    return (allbits * weights).sum(axis=2).astype(np.uint8)


def _as_int(v):
    try:
        return int(v)
    except (TypeError, ValueError):
        return None


def _constant_scale_note(consts, opsel_a, opsel_b):
    """Finding text for constant scale operands (None if both are run-time values)."""
    (ca, va), (cb, vb) = consts
    if not (ca or cb):
        return None
    va, vb = _as_int(va), _as_int(vb)
    if ca and cb and va == 0 and vb == 0:
        return (
            "both E8M0 scale operands are the constant 0: LLVM (FlyDSL 0.5.0's, checked) then emits the "
            "unscaled v_mfma_*_f8f6f4, so no scale is applied (the emulator computes that); E8M0 0x00 in a "
            "VGPR would mean 2^-127. Pass explicit scales (0x7F7F7F7F = 1.0) to make the intent portable"
        )
    parts = []
    for name, c, v, sel in (("A", ca, va, opsel_a), ("B", cb, vb, opsel_b)):
        if c and v is None:
            parts.append(f"scale {name} is a compile-time constant")
        elif c:
            bits = v & 0xFFFFFFFF
            parts.append(
                f"scale {name} = constant 0x{bits:08x}: this LLVM moves it into a VGPR (llvm-project #158117), "
                f"the hardware reads byte {sel} = 0x{(bits >> (8 * sel)) & 0xFF:02x}; a compiler that passes it as "
                f"an inline constant/SGPR makes the hardware read bits [30:23] = 0x{(bits >> 23) & 0xFF:02x}"
            )
    return "; ".join(parts)


@register("rocdl.mfma.scale.f32.16x16x128.f8f6f4", "rocdl.mfma.scale.f32.32x32x64.f8f6f4")
def _mfma_scale(n, T):
    M, K = (16, 128) if "16x16x128" in n.name else (32, 64)
    a_bits, a_fmt = _matrix_format(n.attrs.get("cbsz"), n)
    b_bits, b_fmt = _matrix_format(n.attrs.get("blgp"), n)
    opsel_a = int(n.attrs.get("opselA", 0))
    opsel_b = int(n.attrs.get("opselB", 0))
    if not (0 <= opsel_a <= 3 and 0 <= opsel_b <= 3):
        raise UnsupportedOp(n.name, f"opsel {opsel_a}/{opsel_b} (a byte index 0..3)", n.loc)
    ar, ak = scaled_mfma_operand_layout(M, K, a_bits)
    bc, bk = scaled_mfma_operand_layout(M, K, b_bits)
    lanes_of = scaled_mfma_scale_lanes(M, K)  # (M, K/32), same table for A rows and B columns
    vals = ak.shape[1]  # 32 values per lane
    nblk = K // SCALE_BLOCK_K
    a, b, c, sa, sb = n.operands[:5]
    ta, tb = n.operand_types[0], n.operand_types[1]
    r = n.results[0]
    far, fak, fbk, fbc = ar.ravel(), ak.ravel(), bk.ravel(), bc.ravel()
    cr, cc = mfma_layout(M, M, K)[2]  # the usual accumulator layout
    consts = (T.constant_of(sa), T.constant_of(sb))
    note = _constant_scale_note(consts, opsel_a, opsel_b)
    unscaled = note is not None and note.startswith("both E8M0")

    def step(W):
        e = W.env
        lanes = W.lanes
        if lanes != WAVE:
            raise UnsupportedOp(n.name, f"a wave of {lanes} lanes (MFMA needs all 64)", n.loc)
        if note is not None and W.wg is not None:
            W.wg.findings.add(SCALED_MFMA_CONSTANT_SCALE, note, n.loc, W.wg.block_id, W.wave_id)
        av = decode_narrow(_unpack_elems(_full(e[a], lanes), ta, a_bits, vals), a_fmt)
        bv = decode_narrow(_unpack_elems(_full(e[b], lanes), tb, b_bits, vals), b_fmt)
        A = np.zeros((M, K))
        B = np.zeros((K, M))
        A[far, fak] = av.ravel()
        B[fbk, fbc] = bv.ravel()
        cv = _full(e[c], lanes)
        D = np.zeros((M, M))
        D[cr, cc] = cv.reshape(lanes, -1)
        if unscaled:
            SA = np.ones((M, nblk))
            SB = np.ones((M, nblk))
        else:
            SA = decode_e8m0(scale_bytes(_full(e[sa], lanes), opsel_a)[lanes_of])  # (M rows, blocks)
            SB = decode_e8m0(scale_bytes(_full(e[sb], lanes), opsel_b)[lanes_of])  # (N cols, blocks)
        with np.errstate(all="ignore"):
            for blk in range(nblk):
                ks = slice(SCALE_BLOCK_K * blk, SCALE_BLOCK_K * (blk + 1))
                D = D + (SA[:, blk][:, None] * SB[:, blk][None, :]) * (A[:, ks] @ B[ks, :])
            e[r] = D[cr, cc].astype(np.float32).reshape(cv.shape)  # overflow -> inf, as on hardware

    return step
