"""What ``precompile`` builds: a spec file, read into ``Work`` items (one GEMM shape and the
configs to build for it).

A spec is either a dispatch table (``torch_flydsl.dispatch_table``: each entry's one config), or
a shapes file (what ``record`` writes)::

    {"format": "torch-flydsl-shapes", "version": 1, "breadth": "curated",
     "shapes": [{"op": "mm", "dtype": "bfloat16", "layout": "nt", "bias": false,
                 "m": 16, "n": 4096, "k": 4096}]}

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
    op: str
    dtype: str
    layout: str
    bias: bool
    m: int
    n: int
    k: int

    def label(self) -> str:
        return f"{self.op}{'+bias' if self.bias else ''} {self.dtype} {self.layout} {self.m}x{self.n}x{self.k}"

    def to_json(self) -> dict:
        return {"op": self.op, "dtype": self.dtype, "layout": self.layout, "bias": self.bias,
                "m": self.m, "n": self.n, "k": self.k}


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
    from ..registry import family_for
    from ..templates.base import Decline

    op = "addmm" if shape.bias else "mm"
    impl = family_for(op).impl()
    import torch

    problem = impl.explain_problem(op, shape.m, shape.n, shape.k, getattr(torch, shape.dtype), shape.layout)
    return impl, problem if not isinstance(problem, Decline) else problem


def _work_for_configs(shape: Shape, keys: list) -> Work:
    from ..templates.base import Decline
    from ..templates.dense_gemm.config import DenseGemmConfig, config_fits

    impl, problem = _problem(shape)
    if isinstance(problem, Decline):
        return Work(shape, problem, [], [(None, problem)])
    configs, declined = [], []
    for key in keys:
        cfg = DenseGemmConfig.from_key(key)
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


def _shape(raw, where: str) -> Shape:
    # A shape is a dispatch-table entry without a config: reuse that validation.
    if not isinstance(raw, dict):
        raise SpecError(f"{where}: a shape must be a JSON object")
    if isinstance(raw.get("m"), list):
        raise SpecError(f"{where}: a shape needs one M (ranges belong in dispatch tables)")
    try:
        e = dt._entry({**raw, "config": "m128n128k32_w2x2_s4_g0"}, where)
    except dt.TableError as err:
        raise SpecError(str(err)) from None
    return Shape(e.op, e.dtype, e.layout, e.bias, e.m, e.n, e.k)


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
            work.append(_work_for_configs(Shape(e.op, e.dtype, e.layout, e.bias, m, e.n, e.k), [e.config]))
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


def write_shapes(path, shapes, breadth: str = "curated") -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {"format": SHAPES_FORMAT, "version": SHAPES_VERSION, "breadth": breadth,
           "shapes": [s.to_json() for s in shapes]}
    path.write_text(json.dumps(doc, indent=1) + "\n")
    return path
