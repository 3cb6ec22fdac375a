"""What ``precompile`` builds: a spec file, read into ``Work`` items (one GEMM shape and the
configs to build for it).

A spec is either a dispatch table (``torch_flydsl.dispatch_table``: each entry's one config), or
a shapes file (what ``record`` writes; each op's fields are its family's vocabulary,
``python -m torch_flydsl explain OP --help`` lists them)::

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
from ..registry import require_user_op, user_op, user_ops
from ..templates.vocabulary import SPEC, FieldError

SHAPES_FORMAT = "torch-flydsl-shapes"
SHAPES_VERSION = 1
BREADTHS = ("baseline", "curated", "exhaustive")


class SpecError(ValueError):
    pass


@dataclass(frozen=True)
class Shape:
    """One shape of a spec: a user op (``torch_flydsl.registry.user_ops``; its family's
    vocabulary lists the fields, e.g. ``mm``: dtype, layout, bias, m, n, k) and its values,
    checked and completed with defaults. Values read as attributes (``shape.m``)."""

    op: str
    values: tuple  # ((field name, value), ...) in the op's field order

    @classmethod
    def of(cls, op: str, **values) -> "Shape":
        """The shape of user op ``op`` (or an alias of one) with ``values``; ``SpecError``
        names a field the op does not take or a value it does not accept."""
        found = user_op(op)
        if found is None:
            raise SpecError(f"op {op!r} is not one of {', '.join(_spec_ops())}")
        user = found[1]
        try:
            got = user.read(values, SPEC, user.aliases.get(op))
        except FieldError as e:
            raise SpecError(str(e)) from None
        return cls(user.name, tuple((f.name, got[f.name]) for f in user.all_fields(SPEC)))

    def __getattr__(self, name: str):
        for key, value in self.__dict__.get("values", ()):
            if key == name:
                return value
        raise AttributeError(f"a {self.__dict__.get('op')} shape has no field {name!r}")

    def get(self, name: str, default=None):
        return dict(self.values).get(name, default)

    @property
    def family(self):
        return require_user_op(self.op)[0]

    @property
    def aten_op(self) -> str:
        """The serving name of the entry point this shape reaches (``addmm`` for a biased mm)."""
        return self.family.serving_for(self.op, dict(self.values))

    def label(self) -> str:
        user = require_user_op(self.op)[1]
        sizes = {f.name for f in user.sizes}
        rest = " ".join(str(v) if not isinstance(v, bool) else (k if v else "") for k, v in self.values
                        if k not in sizes)
        dims = "x".join(str(v) for k, v in self.values if k in sizes)
        return " ".join(x for x in (self.op, *rest.split(), dims) if x)

    def to_json(self) -> dict:
        return {"op": self.op, **dict(self.values)}


def _spec_ops() -> list:
    return [u.name for _, u in user_ops() if u.precompile]


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
    family = shape.family
    return family, family.problem_for(shape.op, dict(shape.values))


def _work_for_configs(shape: Shape, keys: list) -> Work:
    from ..templates.base import Decline

    family, problem = _problem(shape)
    if isinstance(problem, Decline):
        return Work(shape, problem, [], [(None, problem)])
    configs, declined = [], []
    for key in keys:
        cfg = family.config_from_key(key)
        why = family.config_fits(cfg, problem)
        (declined.append((cfg, why)) if why else configs.append(cfg))
    return Work(shape, problem, configs, declined)


def _work_for_breadth(shape: Shape, breadth: str) -> Work:
    from ..templates.base import Decline

    family, problem = _problem(shape)
    if isinstance(problem, Decline):
        return Work(shape, problem, [], [(None, problem)])
    fitting, declined = family.configs_for(problem, breadth)
    return Work(shape, problem, list(fitting), list(declined))


def _shape(raw, where: str) -> Shape:
    if not isinstance(raw, dict):
        raise SpecError(f"{where}: a shape must be a JSON object")
    op = raw.get("op")
    found = user_op(op) if isinstance(op, str) else None
    if found is None or not found[1].precompile:
        raise SpecError(f"{where}: op {op!r} is not one of {', '.join(_spec_ops())}")
    try:
        return Shape.of(str(op), **{k: v for k, v in raw.items() if k != "op"})
    except SpecError as e:
        raise SpecError(f"{where}: {e}") from None


def _table_shape(e: "dt.Entry") -> Shape:
    """What precompile builds for a table entry: one binary serves every M, so the largest of
    its range decides split-K fits; fields a table does not carry take the op's
    ``TableRule.spec_defaults``."""
    user = require_user_op(e.op)[1]
    values = {"dtype": e.dtype, "layout": e.layout, "bias": e.bias, "m": e.m_range[1], "n": e.n, "k": e.k,
              "groups": e.groups}
    fields = {f.name for f in user.all_fields(SPEC)}
    values = {k: v for k, v in values.items() if k in fields}
    values.update(user.table.spec_defaults if user.table else {})
    return Shape.of(e.op, **values)


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
        work = [_work_for_configs(_table_shape(e), [e.config]) for e in table.entries]
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
