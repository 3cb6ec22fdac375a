"""The one registry of kernel families: which op each family serves, and its custom ops.

The Inductor glue, the custom-op registration, ``explain``, ``doctor`` and the coexistence rule
all read this; adding a family is its ``templates/<family>/family.py`` plus one line in
``FAMILY_MODULES``. Reading the descriptors is cheap (it runs inside ``import torch``): a
family's ``family.py`` defines ``FAMILY`` at module level and imports its own code lazily.
"""

from __future__ import annotations

import functools
import importlib
import sys
from dataclasses import dataclass
from typing import Optional

FAMILY_MODULES = (
    "torch_flydsl.templates.dense_gemm.family",
    "torch_flydsl.templates.scaled_gemm.family",
    "torch_flydsl.templates.grouped_gemm.family",
    "torch_flydsl.templates.scaled_grouped_gemm.family",
    "torch_flydsl.templates.rmsnorm.family",
    "torch_flydsl.templates.topk.family",
)


@dataclass(frozen=True)
class CustomOp:
    """One ``torch.ops.torch_flydsl.<name>`` op: what generated code calls for ``aten_op``.

    A ``baseline`` op is PyTorch's own computation under the family's op contract, the ATen
    choice beside ours where Inductor has none for the node (its ``aten_op`` is empty).
    """

    name: str
    schema: str
    aten_op: str
    baseline: bool = False


@dataclass(frozen=True)
class LoweringOverride:
    """An aten overload whose Inductor lowering never offers choices to ``get_template_configs``
    (or does not exist): the glue overrides it on torch >= ``min_torch`` for ``op_name``'s
    family, and hands back to the stock lowering whenever the family declines."""

    target: str  # aten overload packet name, e.g. "_scaled_mm_v2"
    op_name: str  # the family's op (its custom op and config space), e.g. "scaled_mm"
    min_torch: tuple[int, int]
    serving: str  # the name coexistence, doctor and explain know this entry point by


@dataclass(frozen=True)
class ChoiceHook:
    """An aten overload whose stock lowering builds its choice list by hand (no
    ``get_template_configs`` call) but does autotune it: the glue appends the family's choices
    to that list in an autotuning preprocessing step, beside everything Inductor offered."""

    target: str  # aten overload packet name, e.g. "_grouped_mm"
    op_name: str  # the family's op, e.g. "grouped_mm"


@dataclass(frozen=True)
class EagerOverride:
    """An aten op (default overload) whose eager calls the family serves when eligible
    (``torch_flydsl.eager``); PyTorch's kernel serves the rest."""

    target: str  # aten op name, e.g. "_scaled_grouped_mm_v2"
    serving: str  # the name coexistence, doctor and explain know it by


@dataclass(frozen=True)
class Family:
    """A kernel family as the glue sees it. ``module`` implements the family protocol:

    - ``problem_from_metas(aten_op, inputs, out, scalars) -> problem | Decline`` (TensorMeta in)
    - ``configs_for(problem, breadth) -> (fitting, [(config, Decline)])``
    - ``call_kwargs(aten_op, scalars) -> dict`` (extra keyword arguments of the custom op)
    - optional ``scalars_from_node(aten_op, target, args, kwargs) -> dict``: non-tensor arguments
      of the FX node being lowered that the gate needs (Inductor passes choices tensors only)
    - ``parse_call(custom_op, args, kwargs) -> call``, ``check_call(call) -> (config, problem) |
      Decline``, ``execute(executor, config, problem, call)`` and ``torch_fallback(call)``: the
      custom op's body (``torch_fallback`` is also a ``baseline`` op's whole body)
    - ``explain_problem(aten_op, m, n, k, **kw) -> problem | Decline`` for the CLI
    - ``KERNEL_VERSION``: part of every cache key the family's kernels influence
    """

    name: str
    module: str
    custom_ops: tuple[CustomOp, ...]
    lowering_overrides: tuple[LoweringOverride, ...] = ()
    choice_hooks: tuple[ChoiceHook, ...] = ()
    eager_overrides: tuple[EagerOverride, ...] = ()

    @property
    def aten_ops(self) -> tuple[str, ...]:
        return tuple(op.aten_op for op in self.custom_ops if not op.baseline)

    def custom_op_for(self, aten_op: str) -> CustomOp:
        return next(op for op in self.custom_ops if op.aten_op == aten_op and not op.baseline)

    def baseline_op(self) -> Optional[CustomOp]:
        return next((op for op in self.custom_ops if op.baseline), None)

    def impl(self):
        # sys.modules first: the custom ops ask for it on every call (import_module costs ~6 us).
        return sys.modules.get(self.module) or importlib.import_module(self.module)


@functools.lru_cache(maxsize=None)
def families() -> tuple[Family, ...]:
    return tuple(importlib.import_module(m).FAMILY for m in FAMILY_MODULES)


def family_for(aten_op: str) -> Optional[Family]:
    """The family serving ``aten_op`` (e.g. "mm", or an override's serving name), or None."""
    return next((f for f in families() if aten_op in f.aten_ops or any(
        o.serving == aten_op for o in f.lowering_overrides + f.eager_overrides)), None)


def override_for(serving: str) -> Optional[LoweringOverride]:
    return next((o for f in families() for o in f.lowering_overrides if o.serving == serving), None)


def family_of_custom_op(name: str) -> Family:
    return next(f for f in families() if any(op.name == name for op in f.custom_ops))


def aten_ops() -> tuple[str, ...]:
    """Every op some family serves, in registration order."""
    return tuple(op for f in families() for op in f.aten_ops)
