"""The one registry of kernel families: which op each family serves, and its custom ops.

The Inductor glue, the custom-op registration, ``explain``, ``doctor`` and the coexistence rule
all read this; adding a family is its ``templates/<family>/family.py`` plus one line in
``FAMILY_MODULES``. Reading the descriptors is cheap (it runs inside ``import torch``): a
family's ``family.py`` defines ``FAMILY`` at module level and imports its own code lazily.
"""

from __future__ import annotations

import functools
import importlib
from dataclasses import dataclass
from typing import Optional

FAMILY_MODULES = (
    "torch_flydsl.templates.dense_gemm.family",
)


@dataclass(frozen=True)
class CustomOp:
    """One ``torch.ops.torch_flydsl.<name>`` op: what generated code calls for ``aten_op``."""

    name: str
    schema: str
    aten_op: str


@dataclass(frozen=True)
class Family:
    """A kernel family as the glue sees it. ``module`` implements the family protocol:

    - ``problem_from_metas(aten_op, inputs, out, scalars) -> problem | Decline`` (TensorMeta in)
    - ``configs_for(problem, breadth) -> (fitting, [(config, Decline)])``
    - ``call_kwargs(aten_op, scalars) -> dict`` (extra keyword arguments of the custom op)
    - ``prepare(custom_op, args, kwargs) -> (call, problem_or_decline)`` and
      ``execute(executor, call, problem)`` / ``torch_fallback(call)`` for the custom op's body
    - ``explain_problem(aten_op, m, n, k, **kw) -> problem | Decline`` for the CLI
    - ``KERNEL_VERSION``: part of every cache key the family's kernels influence
    """

    name: str
    module: str
    custom_ops: tuple[CustomOp, ...]

    @property
    def aten_ops(self) -> tuple[str, ...]:
        return tuple(op.aten_op for op in self.custom_ops)

    def custom_op_for(self, aten_op: str) -> CustomOp:
        return next(op for op in self.custom_ops if op.aten_op == aten_op)

    def impl(self):
        return importlib.import_module(self.module)


@functools.lru_cache(maxsize=None)
def families() -> tuple[Family, ...]:
    return tuple(importlib.import_module(m).FAMILY for m in FAMILY_MODULES)


def family_for(aten_op: str) -> Optional[Family]:
    """The family serving ``aten_op`` (e.g. "mm"), or None."""
    return next((f for f in families() if aten_op in f.aten_ops), None)


def family_of_custom_op(name: str) -> Family:
    return next(f for f in families() if any(op.name == name for op in f.custom_ops))


def aten_ops() -> tuple[str, ...]:
    """Every op some family serves, in registration order."""
    return tuple(op for f in families() for op in f.aten_ops)
