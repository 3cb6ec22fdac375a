"""Number formats and their conversions, bit-exact where the hardware is.

bf16 values are carried as float32 holding a bf16-representable value; narrow float formats
(fp8 e4m3/e5m2, fp4 e2m1, E8M0 scales) are carried as raw uint8 codes and decoded here.
"""

from __future__ import annotations

import numpy as np

from .errors import UnsupportedOp
from .types import TypeInfo


def round_to_bf16(x: np.ndarray) -> np.ndarray:
    """float32 -> nearest bf16 (ties to even), returned as float32. NaNs stay (quiet) NaNs."""
    x = np.asarray(x, np.float32)
    b = x.view(np.uint32)
    r = (b + np.uint32(0x7FFF) + ((b >> np.uint32(16)) & np.uint32(1))) & np.uint32(0xFFFF0000)
    nan = np.isnan(x)
    if nan.any():
        r = np.where(nan, (b | np.uint32(0x00400000)) & np.uint32(0xFFFF0000), r)
    return r.astype(np.uint32).view(np.float32)


def bf16_bits_to_f32(bits: np.ndarray) -> np.ndarray:
    return (bits.astype(np.uint32) << np.uint32(16)).view(np.float32)


def f32_to_bf16_bits(x: np.ndarray) -> np.ndarray:
    return (np.asarray(x, np.float32).view(np.uint32) >> np.uint32(16)).astype(np.uint16)


# ---- narrow floats (OCP formats used by gfx950) ---------------------------------------------


def _table(exp_bits, man_bits, bias, kind):
    codes = np.arange(1 << (1 + exp_bits + man_bits))
    sign = np.where(codes >> (exp_bits + man_bits), -1.0, 1.0)
    e = (codes >> man_bits) & ((1 << exp_bits) - 1)
    m = codes & ((1 << man_bits) - 1)
    val = np.where(e == 0, m / (1 << man_bits) * 2.0 ** (1 - bias), (1 + m / (1 << man_bits)) * 2.0 ** (e - bias))
    val = sign * val
    if kind == "e4m3fn":  # only S.1111.111 is NaN, no infinities
        val[(e == 15) & (m == 7)] = np.nan
    elif kind == "e5m2":  # IEEE-like
        val[(e == 31) & (m == 0)] = sign[(e == 31) & (m == 0)] * np.inf
        val[(e == 31) & (m != 0)] = np.nan
    return val.astype(np.float64)


FP8_E4M3_VALUES = _table(4, 3, 7, "e4m3fn")
FP8_E5M2_VALUES = _table(5, 2, 15, "e5m2")
FP4_E2M1_VALUES = _table(2, 1, 1, "e2m1")  # 16 codes, no inf/nan
FP6_E2M3_VALUES = _table(2, 3, 1, "e2m3")
FP6_E3M2_VALUES = _table(3, 2, 3, "e3m2")


def e8m0_to_f32(codes: np.ndarray) -> np.ndarray:
    """E8M0 scale: 2**(code-127); code 0xFF is NaN."""
    c = codes.astype(np.int32)
    out = np.ldexp(np.float64(1.0), c - 127)
    return np.where(c == 255, np.nan, out)


def decode_narrow(codes: np.ndarray, fmt: str) -> np.ndarray:
    table = {
        "f8E4M3FN": FP8_E4M3_VALUES,
        "f8E5M2": FP8_E5M2_VALUES,
        "f4E2M1FN": FP4_E2M1_VALUES,
        "f6E2M3FN": FP6_E2M3_VALUES,
        "f6E3M2FN": FP6_E3M2_VALUES,
    }.get(fmt)
    if fmt == "f8E8M0FNU":
        return e8m0_to_f32(codes)
    if table is None:
        raise UnsupportedOp(f"float format {fmt}", "no decoder")
    return table[codes.astype(np.int64)]


def encode_narrow(x: np.ndarray, fmt: str, saturate: bool = True) -> np.ndarray:
    """Round to nearest-even representable code (saturating to max finite when ``saturate``)."""
    table = {
        "f8E4M3FN": FP8_E4M3_VALUES,
        "f8E5M2": FP8_E5M2_VALUES,
        "f4E2M1FN": FP4_E2M1_VALUES,
    }.get(fmt)
    if table is None:
        raise UnsupportedOp(f"float format {fmt}", "no encoder")
    x = np.asarray(x, np.float64)
    finite = np.isfinite(table)
    pos_codes = np.array([c for c in range(len(table) // 2) if finite[c]])
    pos_vals = table[pos_codes]
    order = np.argsort(pos_vals)
    pos_vals, pos_codes = pos_vals[order], pos_codes[order]
    sign_bit = len(table) // 2
    a = np.abs(x)
    if saturate:
        a = np.minimum(a, pos_vals[-1])
    i = np.clip(np.searchsorted(pos_vals, a), 1, len(pos_vals) - 1)
    lo, hi = pos_vals[i - 1], pos_vals[i]
    pick_hi = (a - lo > hi - a) | ((a - lo == hi - a) & (pos_codes[i] % 2 == 0))
    code = np.where(pick_hi, pos_codes[i], pos_codes[i - 1])
    code = np.where(a <= pos_vals[0], pos_codes[0], code)
    code = np.where(np.signbit(x), code | sign_bit, code)
    nan = np.isnan(x)
    if nan.any():
        nan_code = {"f8E4M3FN": 0x7F, "f8E5M2": 0x7F}.get(fmt, 0)
        code = np.where(nan, nan_code, code)
    return code.astype(np.uint8)


# ---- values <-> memory bytes ------------------------------------------------------------------


def to_bytes(val: np.ndarray, t: TypeInfo, lanes: int) -> np.ndarray:
    """Value of type ``t`` (lane axis first) -> (lanes, nbytes) uint8."""
    s = t.scalar
    v = np.asarray(val)
    if v.shape[0] != lanes:
        v = np.broadcast_to(v, (lanes,) + v.shape[1:])
    if s.kind == "float" and s.name == "bf16":
        raw = f32_to_bf16_bits(v)
    elif s.kind == "ptr":
        raw = v.astype(np.int64 if t.nbytes == 8 else np.int32)
    elif s.kind == "float" and s.width < 8:
        raise UnsupportedOp(f"memory access of {t.text}", "sub-byte floats in memory need packing")
    elif s.kind == "int" and s.width == 1:
        raw = v.astype(np.uint8)
    else:
        raw = np.ascontiguousarray(v, dtype=s.np_dtype) if v.dtype != s.np_dtype else np.ascontiguousarray(v)
    return np.ascontiguousarray(raw).reshape(lanes, -1).view(np.uint8)


def from_bytes(raw: np.ndarray, t: TypeInfo) -> np.ndarray:
    """(lanes, nbytes) uint8 -> value of type ``t``."""
    lanes = raw.shape[0]
    s = t.scalar
    shape = (lanes,) + (t.shape if t.kind == "vector" else ())
    raw = np.ascontiguousarray(raw)
    if s.kind == "float" and s.name == "bf16":
        return bf16_bits_to_f32(raw.view(np.uint16)).reshape(shape)
    if s.kind == "ptr":
        return raw.view(np.int64 if t.nbytes == 8 else np.int32).astype(np.int64).reshape(shape)
    if s.kind == "int" and s.width == 1:
        return (raw != 0).reshape(shape)
    if s.kind == "float" and s.width < 8:
        raise UnsupportedOp(f"memory access of {t.text}", "sub-byte floats in memory need packing")
    return raw.view(s.np_dtype).reshape(shape)
