"""How to build a family's jit function again in another process: its recipe.

Every family builds its ``@flyc.jit`` launcher with ``kernel.build(spec)`` from a small frozen
spec. ``kernel_builder`` is that function's cache (what ``functools.lru_cache`` was) and also
tags each jit function it returns with ``Recipe(builder, spec)``: a compile worker imports the
builder, calls it with the spec, and traces exactly the kernel the caller holds. A jit function
without a recipe (one a test built by hand, or a builder patched for a test) is compiled where
it is, as before.

Arguments travel as placeholders: tensors become meta tensors of the same dtype, shape and
strides (what FlyDSL's trace and its cache key read: dtype, alignment and the unit-stride dim;
never the pointer or the device), streams become the default-stream placeholder.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Callable, Optional

ATTR = "_torch_flydsl_recipe"


@dataclass(frozen=True)
class Recipe:
    builder: str  # "package.module:function"
    spec: Any  # the frozen spec the builder takes (picklable)

    def build(self):
        from ._worker import resolve

        return resolve(self.builder)(self.spec)


def kernel_builder(fn: Callable) -> Callable:
    """``functools.lru_cache`` for ``build(spec)``, plus the recipe on what it returns."""
    cached = functools.lru_cache(maxsize=None)(fn)
    ref = f"{fn.__module__}:{fn.__qualname__}"

    @functools.wraps(fn)
    def build(spec):
        jit_fn = cached(spec)
        if getattr(jit_fn, ATTR, None) is None:
            try:
                setattr(jit_fn, ATTR, Recipe(ref, spec))
            except (AttributeError, TypeError):
                pass  # an object that takes no attributes: compiled in this process
        return jit_fn

    build.cache_clear = cached.cache_clear  # type: ignore[attr-defined]
    build.cache_info = cached.cache_info  # type: ignore[attr-defined]
    return build


def recipe_of(jit_fn) -> Optional[Recipe]:
    return getattr(jit_fn, ATTR, None)


class CannotTravel(TypeError):
    """An argument that cannot be sent to a compile worker."""


class StreamPlaceholder:
    """Stands for a ``fx.Stream`` argument on its way to a worker (rebuilt as the default one)."""


def placeholders(args: tuple) -> tuple:
    """``args`` with tensors as meta tensors and streams as ``StreamPlaceholder``; raises
    ``CannotTravel`` for a value that cannot (the caller compiles in its own process)."""
    import torch

    out: list[object] = []
    for a in args:
        if isinstance(a, torch.Tensor):
            out.append(torch.empty_strided(tuple(a.shape), tuple(a.stride()), dtype=a.dtype, device="meta"))
        elif isinstance(a, (bool, int, float, str)) or a is None:
            out.append(a)
        elif type(a).__name__ == "Stream":
            out.append(StreamPlaceholder())
        else:
            raise CannotTravel(f"a {type(a).__name__} argument cannot be sent to a compile worker")
    return tuple(out)


def materialize(args: tuple) -> tuple:
    """In the worker: placeholders back into what the jit function takes."""
    if not any(isinstance(a, StreamPlaceholder) for a in args):
        return args
    import flydsl.expr as fx

    return tuple(fx.Stream(None) if isinstance(a, StreamPlaceholder) else a for a in args)
