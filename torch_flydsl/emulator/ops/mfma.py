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
    if s.kind == "int" or (s.kind == "vector" and s.elem.kind == "int"):
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

_FORMATS = {  # matrix_format attribute -> (bits, decoder format)
    "fp8_e4m3": (8, "f8E4M3FN"),
    "fp8_e5m2": (8, "f8E5M2"),
    "fp6_e2m3": (6, "f6E2M3FN"),
    "fp6_e3m2": (6, "f6E3M2FN"),
    "fp4_e2m1": (4, "f4E2M1FN"),
}
_FORMAT_CODES = list(_FORMATS)


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


@register("rocdl.mfma.scale.f32.16x16x128.f8f6f4", "rocdl.mfma.scale.f32.32x32x64.f8f6f4")
def _mfma_scale(n, T):
    M, K = (16, 128) if "16x16x128" in n.name else (32, 64)
    a_bits, a_fmt = _matrix_format(n.attrs.get("cbsz"), n)
    b_bits, b_fmt = _matrix_format(n.attrs.get("blgp"), n)
    opsel_a = int(n.attrs.get("opselA", 0))
    opsel_b = int(n.attrs.get("opselB", 0))
    (ar, ak), (bk, bc), (cr, cc) = mfma_layout(M, M, K)
    vals = ar.shape[1]  # 32 per lane: exactly one 32-wide K block of one row -> one scale
    a, b, c, sa, sb = n.operands[:5]
    ta, tb = n.operand_types[0], n.operand_types[1]
    r = n.results[0]
    far, fak, fbk, fbc = ar.ravel(), ak.ravel(), bk.ravel(), bc.ravel()

    def step(W):
        e = W.env
        lanes = W.lanes
        av = decode_narrow(_unpack_elems(_full(e[a], lanes), ta, a_bits, vals), a_fmt)
        bv = decode_narrow(_unpack_elems(_full(e[b], lanes), tb, b_bits, vals), b_fmt)
        # lane l's E8M0 scale byte (selected by opsel) scales its own 32 values
        sca = (_full(e[sa], lanes).astype(np.int64) >> (8 * opsel_a)) & 0xFF
        scb = (_full(e[sb], lanes).astype(np.int64) >> (8 * opsel_b)) & 0xFF
        av = av * decode_narrow(sca.astype(np.uint8), "f8E8M0FNU")[:, None]
        bv = bv * decode_narrow(scb.astype(np.uint8), "f8E8M0FNU")[:, None]
        cv = _full(e[c], lanes)
        A = np.zeros((M, K))
        B = np.zeros((K, M))
        A[far, fak] = av.ravel()
        B[fbk, fbc] = bv.ravel()
        C = np.zeros((M, M))
        C[cr, cc] = cv.reshape(lanes, -1)
        with np.errstate(all="ignore"):
            D = A @ B + C
        e[r] = D[cr, cc].astype(np.float32).reshape(cv.shape)

    return step
