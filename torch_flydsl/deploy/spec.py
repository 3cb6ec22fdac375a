"""What ``precompile`` builds: a spec file, read into ``Work`` items (one GEMM shape and the
configs to build for it).

A spec is either a dispatch table (``torch_flydsl.dispatch_table``: each entry's one config), or
a shapes file (what ``record`` writes; ``Shape`` lists each op's fields)::

    {"format": "torch-flydsl-shapes", "version": 1, "breadth": "curated",
     "shapes": [{"op": "mm", "dtype": "bfloat16", "layout": "nt", "bias": false,
                 "m": 16, "n": 4096, "k": 4096},
                {"op": "scaled_mm", "dtype": "mxfp4", "out_dtype": "bfloat16", "m": 16, "n": 4096, "k": 4096},
                {"op": "grouped_mm", "dtype": "bfloat16", "groups": 8, "b_major": "col",
                 "m": 4096, "n": 14336, "k": 4096}]}

where every config of ``breadth`` (baseline, curated, exhaustive) that fits a shape is built.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from .. import dispatch_table as dt

SHAPES_FORMAT = "torch-flydsl-shapes"
SHAPES_VERSION = 1
BREADTHS = ("baseline", "curated", "exhaustive")


class SpecError(ValueError):
    pass


@dataclass(frozen=True)
class Shape:
    """One GEMM of a spec. ``mm``: ``dtype`` bfloat16/float16, ``layout``, ``bias``.
    ``scaled_mm``/``scaled_mm_v2`` (MX ``torch._scaled_mm`` / ``F.scaled_mm``, TN layout):
    ``dtype`` mxfp8, mxfp8-e5m2, mxfp4 or w4a8, ``out_dtype``, ``bias``. ``grouped_mm`` (the MoE
    forward, ``m`` tokens over ``groups`` experts): ``dtype``, ``groups``, ``b_major``."""

    op: str
    dtype: str
    layout: str
    bias: bool
    m: int
    n: int
    k: int
    out_dtype: str = ""
    groups: int = 0
    b_major: str = ""

    @property
    def aten_op(self) -> str:
        return ("addmm" if self.bias else "mm") if self.op == "mm" else self.op

    def label(self) -> str:
        extra = f" out={self.out_dtype}" if self.out_dtype else ""
        extra += f" G={self.groups} B={self.b_major}-major" if self.groups else ""
        return f"{self.op}{'+bias' if self.bias else ''} {self.dtype} {self.layout}{extra} {self.m}x{self.n}x{self.k}"

    def to_json(self) -> dict:
        d = {"op": self.op, "dtype": self.dtype, "layout": self.layout, "bias": self.bias,
             "m": self.m, "n": self.n, "k": self.k}
        if self.op.startswith("scaled_mm"):
            d["out_dtype"] = self.out_dtype
            del d["layout"]
        if self.op == "grouped_mm":
            d.update(groups=self.groups, b_major=self.b_major)
            del d["layout"], d["bias"]
        return d


@dataclass
class Work:
    shape: Shape
    problem: object  # the family's problem (a GemmProblem), or a Decline
    configs: list  # config objects to build
    declined: list  # (config or None, Decline)


@dataclass
class Spec:
    path: Path
    work: list
    table: Optional[dt.DispatchTable] = None  # when the spec is a dispatch table


def _problem(shape: Shape):
    import torch

    from ..registry import family_for

    impl = family_for(shape.aten_op).impl()
    if shape.op == "mm":
        problem = impl.explain_problem(shape.aten_op, shape.m, shape.n, shape.k, getattr(torch, shape.dtype), shape.layout)
    elif shape.op == "grouped_mm":
        problem = impl.explain_problem("grouped_mm", shape.m, shape.n, shape.k, getattr(torch, shape.dtype),
                                       groups=shape.groups, b_major=shape.b_major)
    else:
        problem = impl.explain_problem(shape.op, shape.m, shape.n, shape.k, dtype=shape.dtype,
                                       out_dtype=getattr(torch, shape.out_dtype), bias=shape.bias)
    return impl, problem


def _work_for_configs(shape: Shape, keys: list) -> Work:
    from ..templates.base import Decline

    if shape.op == "mm":
        from ..templates.dense_gemm.config import DenseGemmConfig as Config, config_fits
    elif shape.op == "grouped_mm":
        from ..templates.grouped_gemm.config import GroupedGemmConfig as Config, config_fits
    else:
        from ..templates.scaled_gemm.config import ScaledGemmConfig as Config, config_fits

    impl, problem = _problem(shape)
    if isinstance(problem, Decline):
        return Work(shape, problem, [], [(None, problem)])
    configs, declined = [], []
    for key in keys:
        cfg = Config.from_key(key)
        why = config_fits(cfg, problem)
        (declined.append((cfg, why)) if why else configs.append(cfg))
    return Work(shape, problem, configs, declined)


def _work_for_breadth(shape: Shape, breadth: str) -> Work:
    from ..templates.base import Decline

    impl, problem = _problem(shape)
    if isinstance(problem, Decline):
        return Work(shape, problem, [], [(None, problem)])
    fitting, declined = impl.configs_for(problem, breadth)
    return Work(shape, problem, list(fitting), list(declined))


SHAPE_OPS = ("mm", "scaled_mm", "scaled_mm_v2", "grouped_mm")
_FIELDS = {
    "mm": {"op", "dtype", "layout", "bias", "m", "n", "k"},
    "scaled_mm": {"op", "dtype", "out_dtype", "bias", "m", "n", "k"},
    "grouped_mm": {"op", "dtype", "groups", "b_major", "m", "n", "k"},
}


def _positive(raw: dict, name: str, where: str) -> int:
    v = raw.get(name)
    if not (isinstance(v, int) and not isinstance(v, bool) and v >= 1):
        raise SpecError(f"{where}: {name} must be a positive integer, got {v!r}")
    return v


def _one_of(raw: dict, name: str, allowed, where: str, default=None):
    v = raw.get(name, default)
    if v not in allowed:
        raise SpecError(f"{where}: {name} {v!r} is not one of {', '.join(map(str, allowed))}")
    return v


def _shape(raw, where: str) -> Shape:
    if not isinstance(raw, dict):
        raise SpecError(f"{where}: a shape must be a JSON object")
    op = _one_of(raw, "op", SHAPE_OPS, where)
    fields = _FIELDS["scaled_mm" if op.startswith("scaled_mm") else op]
    unknown = sorted(set(raw) - fields)
    if unknown:
        raise SpecError(f"{where}: unknown field(s) {', '.join(unknown)} for {op} (known: {', '.join(sorted(fields))})")
    m, n, k = (_positive(raw, x, where) for x in ("m", "n", "k"))
    bias = raw.get("bias", False)
    if not isinstance(bias, bool):
        raise SpecError(f"{where}: bias must be true or false, got {bias!r}")
    if op == "mm":
        return Shape(op, _one_of(raw, "dtype", dt.DTYPES, where), _one_of(raw, "layout", dt.LAYOUTS, where, "nt"),
                     bias, m, n, k)
    if op == "grouped_mm":
        return Shape(op, _one_of(raw, "dtype", dt.DTYPES, where), "nt", False, m, n, k,
                     groups=_positive(raw, "groups", where), b_major=_one_of(raw, "b_major", ("col", "row"), where, "col"))
    from ..templates.scaled_gemm.family import DTYPES as MX

    return Shape(op, _one_of(raw, "dtype", MX, where), "tn", bias, m, n, k,
                 out_dtype=_one_of(raw, "out_dtype", dt.DTYPES, where, "bfloat16"))


def load(path, breadth: Optional[str] = None) -> Spec:
    """Read a spec; ``breadth`` overrides a shapes file's own (ignored for dispatch tables)."""
    path = Path(path)
    try:
        doc = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise SpecError(f"{path}: cannot read the spec ({type(e).__name__}: {e})") from e
    fmt = doc.get("format") if isinstance(doc, dict) else None
    if fmt == dt.FORMAT:
        try:
            table = dt.parse(doc, str(path))
        except dt.TableError as e:
            raise SpecError(str(e)) from None
        work = []
        for e in table.entries:
            m = e.m_range[1]  # one binary serves every M: the largest decides split-K fits
            # scaled_mm entries serve bf16 and fp16 outputs alike; precompile builds the bf16
            # binary (an fp16 model names its shapes in a shapes spec with out_dtype float16).
            out = "bfloat16" if e.op == "scaled_mm" else ""
            # grouped_mm entries are the MoE forward's: each expert's weight stored [N, K] (B col-major)
            b_major = "col" if e.op == "grouped_mm" else ""
            work.append(_work_for_configs(Shape(e.op, e.dtype, e.layout, e.bias, m, e.n, e.k, out, e.groups, b_major),
                                          [e.config]))
        return Spec(path, work, table)
    if fmt != SHAPES_FORMAT:
        raise SpecError(f"{path}: \"format\" must be {dt.FORMAT!r} (a dispatch table) or {SHAPES_FORMAT!r} "
                        "(a shapes list)")
    if doc.get("version") != SHAPES_VERSION:
        raise SpecError(f"{path}: shapes file version {doc.get('version')!r}; this torch_flydsl reads {SHAPES_VERSION}")
    breadth = breadth or doc.get("breadth", "curated")
    if breadth not in BREADTHS:
        raise SpecError(f"{path}: breadth {breadth!r} is not one of {', '.join(BREADTHS)}")
    shapes = doc.get("shapes")
    if not isinstance(shapes, list) or not shapes:
        raise SpecError(f"{path}: \"shapes\" must be a non-empty list")
    return Spec(path, [_work_for_breadth(_shape(raw, f"{path}: shapes[{i}]"), breadth)
                       for i, raw in enumerate(shapes)])


def shapes_text(shapes, breadth: str = "curated") -> str:
    doc = {"format": SHAPES_FORMAT, "version": SHAPES_VERSION, "breadth": breadth,
           "shapes": [s.to_json() for s in shapes]}
    return json.dumps(doc, indent=1) + "\n"


def write_shapes(path, shapes, breadth: str = "curated") -> Path:
    """Write a shapes file atomically (an error mid-write leaves the old file whole)."""
    from .files import atomic_write

    return atomic_write(path, shapes_text(shapes, breadth))
