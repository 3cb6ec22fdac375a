"""The one registry of kernel families: which ops each family serves, and its custom ops.

The Inductor glue, the custom-op registration, ``explain``, ``doctor``, deployment, the bench
CLI and the coexistence rule all read this. Adding a family is its ``templates/<family>/``
package (a ``family.py`` whose ``FAMILY`` is a ``templates.family.KernelFamily``) plus one line
in ``FAMILY_MODULES`` (or one ``register`` call, for a family outside this package). Reading
the families is cheap (it runs inside ``import torch``): a ``family.py`` defines its class and
``FAMILY`` at module level and imports its own code lazily.
"""

from __future__ import annotations

import functools
import importlib
from typing import Optional

from ._log import log
from .templates.family import (  # noqa: F401  (re-exported: the contract's types)
    ChoiceHook, CompiledUnit, CustomOp, EagerOverride, FamilyError, KernelFamily, LoweringOverride, check,
)
from .templates.vocabulary import UserOp

FAMILY_MODULES = [
    "torch_flydsl.templates.dense_gemm.family",
    "torch_flydsl.templates.scaled_gemm.family",
    "torch_flydsl.templates.grouped_gemm.family",
    "torch_flydsl.templates.scaled_grouped_gemm.family",
    "torch_flydsl.templates.rmsnorm.family",
    "torch_flydsl.templates.topk.family",
]

Family = KernelFamily  # the name callers annotate with


def register(module: str) -> None:
    """Add the family defined in ``module`` (its ``FAMILY``) after those already registered.
    Call it before the glue reads the registry (at import, as ``FAMILY_MODULES`` is read)."""
    if module not in FAMILY_MODULES:
        FAMILY_MODULES.append(module)
        families.cache_clear()


def _load(module: str) -> KernelFamily:
    family = importlib.import_module(module).FAMILY
    check(family, module)
    return family


@functools.lru_cache(maxsize=None)
def families() -> tuple[KernelFamily, ...]:
    """Every registered family that meets the contract. A family that does not is left out
    with an error in the ``torch_flydsl`` log naming the missing member (``import torch`` must
    not fail because of it; ``check_all`` raises instead)."""
    out: list[KernelFamily] = []
    for module in FAMILY_MODULES:
        try:
            out.append(_load(module))
        except (FamilyError, ImportError, AttributeError) as e:
            log.error("kernel family %s left out: %s", module, e)
    return tuple(out)


def check_all() -> tuple[KernelFamily, ...]:
    """Every registered family, raising ``FamilyError`` for the first that breaks the contract."""
    return tuple(_load(m) for m in FAMILY_MODULES)


def family_for(op: str) -> Optional[KernelFamily]:
    """The family serving ``op`` (an aten op such as "mm", a serving name such as
    "scaled_mm_v2", or a user op), or None."""
    return next((f for f in families() if op in f.serving_names or f.user_op(op) is not None), None)


def require_family(op: str) -> KernelFamily:
    """``family_for(op)`` where a family must serve ``op``; ``LookupError`` names it otherwise."""
    family = family_for(op)
    if family is None:
        raise LookupError(f"no registered kernel family serves {op!r}")
    return family


def family_named(name: str) -> Optional[KernelFamily]:
    return next((f for f in families() if f.name == name), None)


def override_for(serving: str):
    return next((o for f in families() for o in f.lowering_overrides if o.serving == serving), None)


def family_of_custom_op(name: str) -> KernelFamily:
    return next(f for f in families() if any(op.name == name for op in f.custom_ops))


def aten_ops() -> tuple[str, ...]:
    """Every op some family serves through a custom op, in registration order."""
    return tuple(op for f in families() for op in f.aten_ops)


def serving_names() -> tuple[str, ...]:
    """Every name some family's entry point is known by, in registration order."""
    return tuple(dict.fromkeys(n for f in families() for n in f.serving_names))


def user_ops() -> tuple[tuple[KernelFamily, UserOp], ...]:
    """Every op users name (tables, specs, bench, explain), with its family."""
    return tuple((f, u) for f in families() for u in f.user_ops)


def user_op(name: str) -> Optional[tuple[KernelFamily, UserOp]]:
    """``(family, user op)`` for ``name`` (or one of its aliases), or None."""
    return next(((f, u) for f, u in user_ops() if u.name == name or name in u.aliases), None)


def require_user_op(name: str) -> tuple[KernelFamily, UserOp]:
    """``user_op(name)`` where the op must exist; ``LookupError`` names it otherwise."""
    found = user_op(name)
    if found is None:
        raise LookupError(f"no registered kernel family names the op {name!r}")
    return found
