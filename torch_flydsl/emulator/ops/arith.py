"""arith / math / ub ops and the llvm scalar ops that mirror them (lane-vectorized numpy).

Integers wrap at their width (numpy fixed-width arithmetic); unsigned ops reinterpret the
bits. Float results of bf16 type are rounded to bf16 (round-to-nearest-even) because bf16
values are carried in float32.
"""

from __future__ import annotations

import numpy as np

from ..errors import UnsupportedOp
from ..numerics import decode_narrow, encode_narrow, round_to_bf16
from ..translate import register
from ..types import TypeInfo

_UNSIGNED = {np.dtype(np.int8): np.uint8, np.dtype(np.int16): np.uint16, np.dtype(np.int32): np.uint32, np.dtype(np.int64): np.uint64}


def _u(x):
    x = np.asarray(x)
    if x.dtype == np.bool_:
        return x
    return x.view(_UNSIGNED[x.dtype])


def _round(t: TypeInfo):
    s = t.scalar
    if s.kind == "float" and s.name == "bf16":
        return round_to_bf16
    return None


def _unary_step(n, fn):
    a = n.operands[0]
    r = n.results[0]

    def step(W):
        e = W.env
        e[r] = fn(e[a])

    return step


def _binary_step(n, fn):
    a, b = n.operands[:2]
    r = n.results[0]

    def step(W):
        e = W.env
        e[r] = fn(e[a], e[b])

    return step


def _np_err(fn):
    def g(*xs):
        with np.errstate(all="ignore"):
            return fn(*xs)

    return g


# ---- constants / poison ------------------------------------------------------------------------


def const_value(value, t: TypeInfo) -> np.ndarray:
    """A constant as a uniform (lane-axis 1) array of the storage dtype."""
    s = t.scalar
    if isinstance(value, tuple) and value and value[0] == "hexbits":
        bits = np.array(value[1], np.uint64)
        if s.name == "bf16":
            arr = (bits.astype(np.uint32) << np.uint32(16)).view(np.float32)
        elif s.name == "f32":
            arr = bits.astype(np.uint32).view(np.float32)
        elif s.name == "f16":
            arr = bits.astype(np.uint16).view(np.float16)
        else:
            arr = bits.astype(s.np_dtype)
        arr = arr.reshape(value[2])
    else:
        if s.kind == "float" and s.width <= 8:
            arr = encode_narrow(np.asarray(value, np.float64), s.name)
        elif s.kind == "int" and s.width > 1:
            w = s.width
            if np.ndim(value) == 0:
                v = ((int(value) + (1 << (w - 1))) % (1 << w)) - (1 << (w - 1))
                arr = np.asarray(v, dtype=s.np_dtype)
            else:
                arr = np.asarray(value).astype(np.int64).astype(s.np_dtype)
        else:
            arr = np.asarray(value, dtype=s.np_dtype)
        if s.name == "bf16":
            arr = round_to_bf16(arr.astype(np.float32))
    if t.kind == "vector":
        arr = np.broadcast_to(arr, t.shape)
    return np.ascontiguousarray(arr).reshape((1,) + (t.shape if t.kind == "vector" else ()))


@register("arith.constant", "llvm.mlir.constant")
def _constant(n, T):
    t = n.result_types[0]
    if t.kind not in ("int", "float", "index", "vector"):
        raise UnsupportedOp(n.name, f"constant of type {t.text}", n.loc)
    val = const_value(n.attrs["value"], t)
    r = n.results[0]

    def step(W):
        W.env[r] = val

    return step


def zero_value(t: TypeInfo):
    if t.kind == "struct":
        return tuple(zero_value(f) for f in t.fields)
    if t.kind == "array":
        return tuple(zero_value(t.element) for _ in range(t.shape[0]))
    shape = (1,) + (t.shape if t.kind == "vector" else ())
    return np.zeros(shape, t.scalar.np_dtype)


@register("ub.poison", "llvm.mlir.poison", "llvm.mlir.undef", "llvm.mlir.zero")
def _poison(n, T):
    # Poison/undef are modelled as zero: any value is a legal refinement.
    val = zero_value(n.result_types[0])
    r = n.results[0]

    def step(W):
        W.env[r] = val

    return step


# ---- integer ops ------------------------------------------------------------------------------


def _trunc_div(a, b):
    q = np.abs(a) // np.where(b == 0, 1, np.abs(b))
    return np.where((a < 0) != (b < 0), -q, q).astype(np.result_type(a, b))


_INT_BIN = {
    "addi": lambda a, b: a + b,
    "subi": lambda a, b: a - b,
    "muli": lambda a, b: a * b,
    "andi": lambda a, b: a & b,
    "ori": lambda a, b: a | b,
    "xori": lambda a, b: a ^ b,
    "divsi": _trunc_div,
    "remsi": lambda a, b: np.fmod(a, np.where(b == 0, 1, b)),
    "floordivsi": lambda a, b: a // np.where(b == 0, 1, b),
    "ceildivsi": lambda a, b: -((-a) // np.where(b == 0, 1, b)),
    "divui": lambda a, b: (_u(a) // np.where(_u(b) == 0, 1, _u(b))).view(a.dtype) if a.dtype != np.bool_ else a,
    "remui": lambda a, b: (_u(a) % np.where(_u(b) == 0, 1, _u(b))).view(a.dtype),
    "ceildivui": lambda a, b: (-(-_u(a).astype(np.int64 if a.dtype.itemsize < 8 else np.uint64) // np.where(_u(b) == 0, 1, _u(b)))).astype(_u(a).dtype).view(a.dtype),
    "maxsi": np.maximum,
    "minsi": np.minimum,
    "maxui": lambda a, b: np.maximum(_u(a), _u(b)).view(a.dtype),
    "minui": lambda a, b: np.minimum(_u(a), _u(b)).view(a.dtype),
    "shli": lambda a, b: a << b.astype(a.dtype),
    "shrsi": lambda a, b: a >> b.astype(a.dtype),
    "shrui": lambda a, b: (_u(a) >> _u(b).astype(_u(a).dtype)).view(a.dtype),
}


def _make_int_bin(name):
    fn = _np_err(_INT_BIN[name])

    def builder(n, T):
        t = n.result_types[0]
        if t.scalar.kind == "int" and t.scalar.width == 1 and name in ("addi", "subi", "xori"):
            return _binary_step(n, np.logical_xor)
        if t.scalar.kind == "int" and t.scalar.width == 1 and name in ("muli", "andi", "minui", "maxsi"):
            return _binary_step(n, np.logical_and)
        if t.scalar.kind == "int" and t.scalar.width == 1 and name in ("ori", "maxui", "minsi"):
            return _binary_step(n, np.logical_or)
        return _binary_step(n, fn)

    return builder


for _name in _INT_BIN:
    register("arith." + _name)(_make_int_bin(_name))

_LLVM_INT = {
    "llvm.add": "addi",
    "llvm.sub": "subi",
    "llvm.mul": "muli",
    "llvm.and": "andi",
    "llvm.or": "ori",
    "llvm.xor": "xori",
    "llvm.sdiv": "divsi",
    "llvm.srem": "remsi",
    "llvm.udiv": "divui",
    "llvm.urem": "remui",
    "llvm.shl": "shli",
    "llvm.ashr": "shrsi",
    "llvm.lshr": "shrui",
}
for _ln, _an in _LLVM_INT.items():
    register(_ln)(_make_int_bin(_an))

_CMPI = {
    0: lambda a, b: a == b,
    1: lambda a, b: a != b,
    2: lambda a, b: a < b,
    3: lambda a, b: a <= b,
    4: lambda a, b: a > b,
    5: lambda a, b: a >= b,
    6: lambda a, b: _u(a) < _u(b),
    7: lambda a, b: _u(a) <= _u(b),
    8: lambda a, b: _u(a) > _u(b),
    9: lambda a, b: _u(a) >= _u(b),
}
_LLVM_ICMP = {"eq": 0, "ne": 1, "slt": 2, "sle": 3, "sgt": 4, "sge": 5, "ult": 6, "ule": 7, "ugt": 8, "uge": 9}


@register("arith.cmpi", "llvm.icmp")
def _cmpi(n, T):
    p = n.attrs["predicate"]
    if isinstance(p, str):
        p = _LLVM_ICMP.get(p.strip('"'), None) if not p.isdigit() else int(p)
    if p not in _CMPI:
        raise UnsupportedOp(n.name, f"predicate {p}", n.loc)
    return _binary_step(n, _CMPI[p])


_CMPF = {
    0: lambda a, b: np.zeros(np.broadcast(a, b).shape, np.bool_),
    1: lambda a, b: a == b,
    2: lambda a, b: a > b,
    3: lambda a, b: a >= b,
    4: lambda a, b: a < b,
    5: lambda a, b: a <= b,
    6: lambda a, b: (a != b) & ~np.isnan(a) & ~np.isnan(b),
    7: lambda a, b: ~np.isnan(a) & ~np.isnan(b),
    8: lambda a, b: (a == b) | np.isnan(a) | np.isnan(b),
    9: lambda a, b: ~(a <= b),
    10: lambda a, b: ~(a < b),
    11: lambda a, b: ~(a >= b),
    12: lambda a, b: ~(a > b),
    13: lambda a, b: a != b,
    14: lambda a, b: np.isnan(a) | np.isnan(b),
    15: lambda a, b: np.ones(np.broadcast(a, b).shape, np.bool_),
}


@register("arith.cmpf")
def _cmpf(n, T):
    return _binary_step(n, _np_err(_CMPF[int(n.attrs["predicate"])]))


@register("arith.select", "llvm.select")
def _select(n, T):
    c, a, b = n.operands
    r = n.results[0]

    def step(W):
        e = W.env
        cv, av, bv = e[c], e[a], e[b]
        if isinstance(av, tuple):
            from ..translate import merge

            e[r] = merge(np.broadcast_to(cv, (max(cv.shape[0], 1),)), av, bv)
            return
        if cv.ndim < av.ndim:
            cv = cv.reshape(cv.shape + (1,) * (av.ndim - cv.ndim))
        e[r] = np.where(cv, av, bv)

    return step


# ---- float ops -------------------------------------------------------------------------------

_F_BIN = {
    "addf": np.add,
    "subf": np.subtract,
    "mulf": np.multiply,
    "divf": np.divide,
    "maximumf": np.maximum,  # NaN-propagating
    "minimumf": np.minimum,
    "maxnumf": np.fmax,  # NaN-ignoring
    "minnumf": np.fmin,
    "remf": np.fmod,
}


def _make_f_bin(name):
    base = _np_err(_F_BIN[name])

    def builder(n, T):
        rnd = _round(n.result_types[0])
        if rnd is None:
            return _binary_step(n, base)
        return _binary_step(n, lambda a, b: rnd(base(a, b)))

    return builder


for _name in _F_BIN:
    register("arith." + _name)(_make_f_bin(_name))
for _ln, _an in {"llvm.fadd": "addf", "llvm.fsub": "subf", "llvm.fmul": "mulf", "llvm.fdiv": "divf"}.items():
    register(_ln)(_make_f_bin(_an))


@register("arith.negf", "llvm.fneg")
def _negf(n, T):
    return _unary_step(n, np.negative)


_MATH_UN = {
    "math.exp": np.exp,
    "math.exp2": np.exp2,
    "math.log": np.log,
    "math.log2": np.log2,
    "math.sqrt": np.sqrt,
    "math.rsqrt": lambda x: 1 / np.sqrt(x),
    "math.absf": np.abs,
    "math.tanh": np.tanh,
    "math.sin": np.sin,
    "math.cos": np.cos,
    "math.floor": np.floor,
    "math.ceil": np.ceil,
    "math.erf": None,
    "math.absi": np.abs,
    "llvm.intr.fabs": np.abs,
    "llvm.intr.exp2": np.exp2,
    "llvm.intr.sqrt": np.sqrt,
    "llvm.intr.log2": np.log2,
    "llvm.intr.floor": np.floor,
    "llvm.intr.ceil": np.ceil,
    "rocdl.exp2": np.exp2,
    "rocdl.log": np.log2,
    "rocdl.rsq": lambda x: 1 / np.sqrt(x),
    "rocdl.rcp": lambda x: 1 / x,
    "rocdl.sqrt": np.sqrt,
}


def _make_math(name):
    fn = _MATH_UN[name]

    def builder(n, T):
        if fn is None:
            raise UnsupportedOp(n.name, "not implemented", n.loc)
        rnd = _round(n.result_types[0])
        dt = n.result_types[0].scalar.np_dtype
        g = _np_err(lambda x: fn(x).astype(dt, copy=False))
        if rnd is not None:
            return _unary_step(n, lambda x: rnd(g(x)))
        return _unary_step(n, g)

    return builder


for _name in _MATH_UN:
    register(_name)(_make_math(_name))


@register("math.fma", "llvm.intr.fma", "llvm.intr.fmuladd", "vector.fma")
def _fma(n, T):
    a, b, c = n.operands
    r = n.results[0]
    t = n.result_types[0]
    rnd = _round(t)
    dt = t.scalar.np_dtype

    def step(W):
        e = W.env
        with np.errstate(all="ignore"):
            # fused: one rounding (float64 product+sum is exact enough for f32/f16/bf16 inputs)
            v = (e[a].astype(np.float64) * e[b] + e[c]).astype(dt)
        e[r] = rnd(v) if rnd is not None else v

    return step


# ---- casts --------------------------------------------------------------------------------------


def _int_cast(src: TypeInfo, dst: TypeInfo, signed: bool):
    sd, dd = src.scalar, dst.scalar
    ddt = dd.np_dtype

    def f(x):
        if dd.width == 1:
            return (x & 1).astype(np.bool_) if x.dtype != np.bool_ else x
        if x.dtype == np.bool_:
            return (-(x.astype(ddt))) if (signed and sd.width == 1) else x.astype(ddt)
        if not signed and dd.width > sd.width:
            return _u(x).astype(ddt)
        return x.astype(ddt)

    return f


@register("arith.extsi", "arith.trunci", "arith.index_cast", "llvm.sext", "llvm.trunc")
def _sext(n, T):
    return _unary_step(n, _int_cast(n.operand_types[0], n.result_types[0], True))


@register("arith.extui", "arith.index_castui", "llvm.zext")
def _zext(n, T):
    return _unary_step(n, _int_cast(n.operand_types[0], n.result_types[0], False))


def _float_conv(src: TypeInfo, dst: TypeInfo):
    s, d = src.scalar, dst.scalar

    def decode(x):
        if s.kind == "float" and s.width <= 8:
            return decode_narrow(x, s.name)
        return x

    def encode(x):
        if d.name == "bf16":
            return round_to_bf16(np.asarray(x, np.float32) if x.dtype != np.float64 else _f64_to_f32_for_bf16(x))
        if d.kind == "float" and d.width <= 8:
            return encode_narrow(x, d.name)
        return x.astype(d.np_dtype)

    return lambda x: encode(decode(x))


def _f64_to_f32_for_bf16(x):
    # Avoid double rounding f64->f32->bf16 on the (rare) f64 path: round toward zero to f32 with
    # a sticky bit so the final bf16 RNE rounding sees the exact tie information.
    f = x.astype(np.float32)
    back = f.astype(np.float64)
    bits = f.view(np.uint32).copy()
    inexact = back != x
    bits = np.where(inexact & (np.abs(back) > np.abs(x)), bits - 1, bits)
    bits = np.where(inexact, bits | 1, bits)
    return bits.astype(np.uint32).view(np.float32)


@register("arith.extf", "arith.truncf", "llvm.fpext", "llvm.fptrunc")
def _fconv(n, T):
    if n.attrs.get("roundingmode") not in (None, 0, "0"):
        raise UnsupportedOp(n.name, f"rounding mode {n.attrs['roundingmode']}", n.loc)
    return _unary_step(n, _np_err(_float_conv(n.operand_types[0], n.result_types[0])))


@register("arith.sitofp", "llvm.sitofp")
def _sitofp(n, T):
    d = n.result_types[0]
    enc = _float_conv(TypeInfo("float", "f64", 64, "f64"), d)
    return _unary_step(n, lambda x: enc(x.astype(np.float64)))


@register("arith.uitofp", "llvm.uitofp")
def _uitofp(n, T):
    d = n.result_types[0]
    enc = _float_conv(TypeInfo("float", "f64", 64, "f64"), d)
    return _unary_step(n, lambda x: enc(_u(x).astype(np.float64)))


def _fp_to_int(dst: TypeInfo, unsigned: bool):
    d = dst.scalar
    dt = d.np_dtype
    if unsigned:
        lo, hi = 0, (1 << d.width) - 1
    else:
        lo, hi = -(1 << (d.width - 1)), (1 << (d.width - 1)) - 1

    def f(x):
        # Hardware v_cvt_i32_f32 saturates and maps NaN to 0; LLVM calls out-of-range poison.
        with np.errstate(all="ignore"):
            y = np.nan_to_num(np.trunc(x.astype(np.float64)), nan=0.0)
            y = np.clip(y, lo, hi).astype(np.int64)
        return y.astype(np.uint64).astype(dt) if unsigned else y.astype(dt)

    return f


@register("arith.fptosi", "llvm.fptosi")
def _fptosi(n, T):
    return _unary_step(n, _fp_to_int(n.result_types[0], False))


@register("arith.fptoui", "llvm.fptoui")
def _fptoui(n, T):
    return _unary_step(n, _fp_to_int(n.result_types[0], True))


def bitcast_value(x: np.ndarray, src: TypeInfo, dst: TypeInfo) -> np.ndarray:
    from ..numerics import from_bytes, to_bytes

    lanes = x.shape[0]
    return from_bytes(to_bytes(x, src, lanes), dst)


@register("arith.bitcast", "llvm.bitcast", "vector.bitcast")
def _bitcast(n, T):
    src, dst = n.operand_types[0], n.result_types[0]
    if src.kind == "ptr" and dst.kind == "ptr":
        return _unary_step(n, lambda x: x)
    return _unary_step(n, lambda x: bitcast_value(x, src, dst))


@register("llvm.call_intrinsic")
def _call_intrinsic(n, T):
    raise UnsupportedOp(f"llvm.call_intrinsic {n.attrs.get('intrin', '?')}", "no emulator semantics", n.loc)


@register("llvm.ptrtoint", "llvm.inttoptr")
def _ptrint(n, T):
    if any(t.kind == "ptr" and t.addr_space in (7, 8) for t in n.operand_types + n.result_types):
        raise UnsupportedOp(n.name, "buffer resource / fat pointer as an integer", n.loc)
    dt = n.result_types[0].scalar.np_dtype
    return _unary_step(n, lambda x: x.astype(dt))


@register("llvm.addrspacecast")
def _asc(n, T):
    src, dst = n.operand_types[0], n.result_types[0]
    if src.addr_space == dst.addr_space:
        return _unary_step(n, lambda x: x)
    raise UnsupportedOp(n.name, f"address space {src.addr_space} -> {dst.addr_space}", n.loc)


# llvm.intr.* integer helpers commonly produced by lowering
@register("llvm.intr.smax", "llvm.intr.smin", "llvm.intr.umax", "llvm.intr.umin")
def _llvm_minmax(n, T):
    op = n.name.split(".")[-1]
    return _binary_step(n, _INT_BIN[{"smax": "maxsi", "smin": "minsi", "umax": "maxui", "umin": "minui"}[op]])


@register("math.ctpop", "llvm.intr.ctpop")
def _ctpop(n, T):
    def f(x):
        u = _u(x).astype(np.uint64)
        c = np.zeros(u.shape, np.int64)
        for i in range(x.dtype.itemsize * 8):
            c += ((u >> np.uint64(i)) & np.uint64(1)).astype(np.int64)
        return c.astype(x.dtype)

    return _unary_step(n, f)
