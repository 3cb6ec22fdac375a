"""Read an MLIR module (via FlyDSL's bundled MLIR Python bindings) into plain Python nodes.

The MLIR context is only needed while reading; afterwards the emulator works on these
dataclasses, which keeps the translated program independent of MLIR object lifetimes and
lets it be cached. SSA values become small integers (slots in a per-wave value table).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Dict, List

import numpy as np

from .types import TypeInfo, parse_type


@dataclass
class Block:
    args: List[int]
    arg_types: List[TypeInfo]
    ops: List["Node"]


@dataclass
class Node:
    name: str
    operands: List[int]
    operand_types: List[TypeInfo]
    results: List[int]
    result_types: List[TypeInfo]
    attrs: Dict[str, Any]
    regions: List[List[Block]]
    loc: str

    def attr(self, key, default=None):
        return self.attrs.get(key, default)


@dataclass
class Func:
    name: str
    body: Block
    is_kernel: bool
    attrs: Dict[str, Any]
    loc: str


@dataclass
class GlobalVar:
    name: str
    type: TypeInfo
    addr_space: int
    alignment: int


@dataclass
class Program:
    kernels: Dict[str, Func] = field(default_factory=dict)
    host_funcs: Dict[str, Func] = field(default_factory=dict)
    globals: Dict[str, GlobalVar] = field(default_factory=dict)
    num_values: int = 0


_LOC_RE = re.compile(r'"([^"]+)":(\d+):(\d+)')


def short_location(loc_text: str) -> str:
    """``callsite(a at callsite(b at c))`` -> ``a <- b <- c`` (innermost first)."""
    parts = [f"{m.group(1)}:{m.group(2)}:{m.group(3)}" for m in _LOC_RE.finditer(loc_text)]
    if not parts:
        return "<unknown location>"
    # Deduplicate consecutive repeats and keep the chain short.
    out: List[str] = []
    for p in parts:
        if not out or out[-1] != p:
            out.append(p)
    return " <- ".join(out[:4])


def _dense_to_numpy(attr, ir) -> Any:
    text = str(attr)
    t = parse_type(str(attr.type))
    shape = t.shape if t.kind == "vector" else ()
    if attr.is_splat:
        v = attr.get_splat_value()
        val = _scalar_attr(v, ir)
        return np.full(shape, val) if shape else val
    m = re.match(r"dense<(.*)>\s*:", text, re.S)
    if m is None:  # convert_attr's caller then keeps the attribute's text
        raise ValueError(f"unreadable dense attribute {text!r}")
    body = m.group(1)
    nums = re.findall(r"-?(?:0x[0-9A-Fa-f]+|inf|nan|\d+(?:\.\d*)?(?:[eE][-+]?\d+)?|true|false)", body)
    vals = []
    for s in nums:
        if s in ("true", "false"):
            vals.append(s == "true")
        elif s.lower().startswith(("0x", "-0x")):
            vals.append(("hex", int(s, 16)))
        else:
            vals.append(float(s) if any(c in s for c in ".eEn") else int(s))
    if any(isinstance(v, tuple) for v in vals):
        return ("hexbits", [v[1] if isinstance(v, tuple) else v for v in vals], shape)
    return np.array(vals).reshape(shape)


def _scalar_attr(a, ir):
    if isinstance(a, ir.BoolAttr):
        return bool(a.value)
    if isinstance(a, ir.IntegerAttr):
        return int(a.value)
    if isinstance(a, ir.FloatAttr):
        return float(a.value)
    return str(a)


def convert_attr(a, ir) -> Any:
    if isinstance(a, (ir.BoolAttr, ir.IntegerAttr, ir.FloatAttr)):
        return _scalar_attr(a, ir)
    if isinstance(a, (ir.DenseIntElementsAttr, ir.DenseFPElementsAttr)):
        return _dense_to_numpy(a, ir)
    for cls in ("DenseI32ArrayAttr", "DenseI64ArrayAttr", "DenseBoolArrayAttr", "DenseI8ArrayAttr", "DenseI16ArrayAttr"):
        c = getattr(ir, cls, None)
        if c is not None and isinstance(a, c):
            return [int(x) for x in a]
    if isinstance(a, ir.ArrayAttr):
        return [convert_attr(x, ir) for x in a]
    if isinstance(a, ir.StringAttr):
        return a.value
    if isinstance(a, ir.TypeAttr):
        return parse_type(str(a.value))
    if isinstance(a, ir.FlatSymbolRefAttr):
        return a.value
    return str(a)


class _Reader:
    def __init__(self, ir) -> None:
        self.ir = ir
        self.ids: Dict[Any, int] = {}

    def vid(self, v) -> int:
        i = self.ids.get(v)
        if i is None:
            i = len(self.ids)
            self.ids[v] = i
        return i

    def block(self, b) -> Block:
        args = [self.vid(a) for a in b.arguments]
        types = [parse_type(str(a.type)) for a in b.arguments]
        ops = [self.node(o) for o in b.operations]
        return Block(args, types, ops)

    def node(self, o) -> Node:
        op = o.operation
        attrs = {}
        for i in range(len(op.attributes)):
            na = op.attributes[i]
            try:
                attrs[na.name] = convert_attr(na.attr, self.ir)
            except Exception:  # keep the text; ops that need it will complain by name
                attrs[na.name] = str(na.attr)
        operands = [self.vid(v) for v in op.operands]
        results = [self.vid(v) for v in op.results]
        regions = [[self.block(b) for b in r.blocks] for r in op.regions]
        return Node(
            name=op.name,
            operands=operands,
            operand_types=[parse_type(str(v.type)) for v in op.operands],
            results=results,
            result_types=[parse_type(str(v.type)) for v in op.results],
            attrs=attrs,
            regions=regions,
            loc=short_location(str(op.location)),
        )


def read_program(module_asm: str) -> Program:
    """Parse module text and convert the kernels (gpu.func), host funcs and LDS globals."""
    from flydsl._mlir import ir
    from flydsl.compiler.jit_function import _create_mlir_context

    prog = Program()
    with _create_mlir_context() as _ctx:
        module = ir.Module.parse(module_asm)
        rd = _Reader(ir)
        for top in module.body.operations:
            top_op = top.operation
            if top_op.name == "gpu.module":
                for inner in top_op.regions[0].blocks[0].operations:
                    iop = inner.operation
                    if iop.name == "gpu.func":
                        node = rd.node(inner)
                        prog.kernels[node.attrs["sym_name"]] = Func(
                            name=node.attrs["sym_name"],
                            body=node.regions[0][0],
                            is_kernel="gpu.kernel" in node.attrs or True,
                            attrs=node.attrs,
                            loc=node.loc,
                        )
                    elif iop.name == "llvm.mlir.global":
                        node = rd.node(inner)
                        g = GlobalVar(
                            name=node.attrs["sym_name"],
                            type=node.attrs["global_type"],
                            addr_space=int(node.attrs.get("addr_space", 0)),
                            alignment=int(node.attrs.get("alignment", 1) or 1),
                        )
                        prog.globals[g.name] = g
            elif top_op.name == "func.func":
                node = rd.node(top)
                if node.regions and node.regions[0]:
                    prog.host_funcs[node.attrs["sym_name"]] = Func(
                        name=node.attrs["sym_name"], body=node.regions[0][0], is_kernel=False, attrs=node.attrs, loc=node.loc
                    )
        prog.num_values = len(rd.ids)
    return prog
