"""MLIR types as the emulator sees them: how a value of the type is stored in numpy.

Every SSA value is a numpy array whose first axis is the lane axis (length 64 for a wave, or
1 for a value known to be uniform, which broadcasts) followed by the vector shape. Scalar
storage dtypes:

* ``iN`` -> signed numpy ints of that width (``i1`` -> ``bool``); unsigned ops reinterpret.
* ``index`` -> int64.  ``f16``/``f32``/``f64`` -> the numpy float of that width.
* ``bf16`` -> float32 holding a value exactly representable in bf16 (every producer rounds
  to bf16 with round-to-nearest-even), so MFMA and arithmetic can use it directly.
* 8/6/4-bit float formats -> uint8 raw codes (only conversions and MFMA understand them).
* ``!llvm.ptr<AS>`` -> int64: a host address for global memory, a byte offset for LDS.
* ``!llvm.ptr<8>`` (buffer resource) -> :class:`BufferRsrc`; llvm structs -> Python tuples.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import List, Optional, Tuple

import numpy as np

from .errors import UnsupportedOp


@dataclass(frozen=True)
class TypeInfo:
    kind: str  # "int" | "float" | "index" | "ptr" | "struct" | "array" | "vector" | "none" | "token"
    text: str
    width: int = 0  # bits of the scalar element
    name: str = ""  # scalar element type name: i32, bf16, f8E4M3FN, ...
    shape: Tuple[int, ...] = ()  # vector/array shape
    elem: Optional["TypeInfo"] = None  # element type for vector/array
    fields: Tuple["TypeInfo", ...] = ()  # struct fields
    addr_space: int = 0

    @property
    def element(self) -> "TypeInfo":
        """The element type of a vector or array (``parse_type`` always sets it for those)."""
        assert self.elem is not None, f"{self.text} has no element type"
        return self.elem

    @property
    def scalar(self) -> "TypeInfo":
        return self.element if self.kind in ("vector",) else self

    @property
    def np_dtype(self):
        return np_dtype_of(self.scalar)

    @property
    def nbytes(self) -> int:
        return byte_size(self)


_FLOAT_WIDTH = {
    "f16": 16,
    "bf16": 16,
    "f32": 32,
    "f64": 64,
    "f8E4M3FN": 8,
    "f8E5M2": 8,
    "f8E4M3FNUZ": 8,
    "f8E5M2FNUZ": 8,
    "f8E8M0FNU": 8,
    "f4E2M1FN": 4,
    "f6E2M3FN": 6,
    "f6E3M2FN": 6,
    "tf32": 32,
}


def _split_top(s: str) -> List[str]:
    """Split on commas that are not nested inside <>, (), []."""
    out: List[str] = []
    depth = 0
    cur: List[str] = []
    for ch in s:
        if ch in "<([":
            depth += 1
        elif ch in ">)]":
            depth -= 1
        if ch == "," and depth == 0:
            out.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
    if cur and "".join(cur).strip():
        out.append("".join(cur).strip())
    return out


_cache: dict = {}


def parse_type(text: str) -> TypeInfo:
    t = _cache.get(text)
    if t is None:
        t = _parse(text.strip())
        _cache[text] = t
    return t


def _parse(s: str) -> TypeInfo:
    if re.fullmatch(r"i\d+", s):
        return TypeInfo("int", s, width=int(s[1:]), name=s)
    if s == "index":
        return TypeInfo("index", s, width=64, name=s)
    if s in _FLOAT_WIDTH:
        return TypeInfo("float", s, width=_FLOAT_WIDTH[s], name=s)
    m = re.fullmatch(r"vector<((?:\d+x)+)(.+)>", s)
    if m:
        shape = tuple(int(d) for d in m.group(1).rstrip("x").split("x"))
        elem = parse_type(m.group(2))
        return TypeInfo("vector", s, width=elem.width, name=elem.name, shape=shape, elem=elem)
    if s == "!llvm.ptr":
        return TypeInfo("ptr", s, width=64, name="ptr", addr_space=0)
    m = re.fullmatch(r"!llvm\.ptr<(\d+)>", s)
    if m:
        return TypeInfo("ptr", s, width=64, name="ptr", addr_space=int(m.group(1)))
    m = re.fullmatch(r"!llvm\.struct<(?:packed )?\((.*)\)>", s)
    if m:
        return TypeInfo("struct", s, fields=tuple(parse_type(f) for f in _split_top(m.group(1))), name="struct")
    m = re.fullmatch(r"struct<(?:packed )?\((.*)\)>", s)  # nested struct printed without !llvm.
    if m:
        return TypeInfo("struct", s, fields=tuple(parse_type(f) for f in _split_top(m.group(1))), name="struct")
    m = re.fullmatch(r"!llvm\.array<(\d+) x (.+)>", s) or re.fullmatch(r"array<(\d+) x (.+)>", s)
    if m:
        elem = parse_type(m.group(2))
        return TypeInfo("array", s, shape=(int(m.group(1)),), elem=elem, name="array")
    if s in ("!gpu.async.token",):
        return TypeInfo("token", s)
    if s in ("none", "!llvm.void"):
        return TypeInfo("none", s)
    return TypeInfo("unknown", s, name=s)


def np_dtype_of(t: TypeInfo):
    if t.kind == "int":
        if t.width == 1:
            return np.bool_
        return {8: np.int8, 16: np.int16, 32: np.int32, 64: np.int64}.get(t.width) or _bad(t)
    if t.kind == "index":
        return np.int64
    if t.kind == "float":
        if t.name == "f16":
            return np.float16
        if t.name in ("f32", "bf16"):
            return np.float32
        if t.name == "f64":
            return np.float64
        if t.width <= 8:
            return np.uint8
        return _bad(t)
    if t.kind == "ptr":
        return np.int64
    return _bad(t)


def _bad(t):
    raise UnsupportedOp(f"type {t.text}", "no storage representation")


def byte_size(t: TypeInfo) -> int:
    """Size in memory (LLVM data layout for amdgcn, packed structs)."""
    if t.kind in ("int", "float"):
        if t.width == 1:
            return 1
        if t.width < 8:
            raise UnsupportedOp(f"type {t.text}", "sub-byte scalar in memory")
        return t.width // 8
    if t.kind == "index":
        return 8
    if t.kind == "ptr":
        return 8 if t.addr_space in (0, 1, 4) else (4 if t.addr_space in (3, 5) else 16)
    if t.kind == "vector":
        n = int(np.prod(t.shape))
        bits = n * t.element.width
        if bits % 8:
            raise UnsupportedOp(f"type {t.text}", "vector is not a whole number of bytes")
        return bits // 8
    if t.kind == "array":
        return t.shape[0] * byte_size(t.element)
    if t.kind == "struct":
        if "packed" not in t.text:
            raise UnsupportedOp(f"type {t.text}", "non-packed struct layout")
        return sum(byte_size(f) for f in t.fields)
    raise UnsupportedOp(f"type {t.text}", "unknown size")
