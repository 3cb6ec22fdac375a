"""What FlyDSL is timed against besides ATen's eager op: Inductor's Triton code, torch's
in-tree FlyDSL backend (torch 2.15+), and, for ops the in-tree backend overrides eagerly,
PyTorch's own kernel with that override stepped aside too.

Each ``*_fn`` returns a zero-argument callable for the timing loops; a column that cannot be
built here raises ``Unavailable`` (or a subclass) with the reason.
"""

from __future__ import annotations

import contextlib
import os
from typing import Callable, Optional


class Unavailable(RuntimeError):
    """This baseline has nothing to time for these operands (the reason is the message)."""


class TritonUnavailable(Unavailable):
    """Inductor's compiled code for these operands runs no Triton kernel (it called ATen)."""


class IntreeUnavailable(Unavailable):
    """torch's in-tree FlyDSL backend did not serve this call."""


def _compiled_code(fn: Callable, inputs: tuple, backends: Optional[str]):
    """``fn`` compiled by Inductor's max-autotune (no CUDA graphs, static shapes) and run once
    on ``inputs``: the compiled callable and its generated code. ``backends`` limits
    ``max_autotune_gemm_backends`` during the compile."""
    import torch
    import torch._dynamo
    import torch._inductor.config as ic
    from torch._inductor.utils import run_and_get_code

    torch._dynamo.reset()  # one compile per shape: never hit the recompile limit
    compiled = torch.compile(fn, mode="max-autotune-no-cudagraphs", dynamic=False)
    patch = ic.patch(max_autotune_gemm_backends=backends) if backends else contextlib.nullcontext()
    with patch:
        _, code = run_and_get_code(compiled, *inputs)
    return compiled, "\n".join(code)


class TritonCall:
    """Inductor's compiled code called on its inputs; ``template`` is whether a Triton template
    kernel runs in it (False: Triton code of Inductor's own, where it decomposes the op)."""

    def __init__(self, compiled: Callable, inputs: tuple, template: bool):
        self.compiled, self.inputs, self.template = compiled, inputs, template

    def __call__(self):
        return self.compiled(*self.inputs)


def triton_fn(fn: Callable, *inputs, gemm: bool = True, need_template: bool = False, what: str = "op") -> TritonCall:
    """What Inductor's max-autotune makes of ``fn(*inputs)`` with Triton as its only GEMM
    backend (``gemm``; otherwise Inductor's defaults): its Triton template, or Triton code of
    its own where it decomposes the op; ``.template`` says which. Raises ``TritonUnavailable``
    when no Triton kernel runs (or, with ``need_template``, no Triton template)."""
    try:
        compiled, src = _compiled_code(fn, inputs, "TRITON" if gemm else None)
    except Exception as e:
        if "NoValidChoices" in f"{type(e).__name__} {e}":
            raise TritonUnavailable(f"Inductor offered no Triton template for {what} here") from e
        raise
    template = "triton_tem_" in src
    if need_template and not template:
        raise TritonUnavailable(f"Inductor's compiled {what} holds no Triton template kernel here")
    if "triton_" not in src or "extern_kernels." in src and not template:
        raise TritonUnavailable(f"Inductor's compiled {what} runs no Triton kernel here")
    return TritonCall(compiled, inputs, template)


@contextlib.contextmanager
def _env(name: str, value: str):
    old = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = old


def intree_compiled_fn(fn: Callable, *inputs, what: str = "op") -> Callable:
    """``fn(*inputs)`` compiled with FLYDSL as Inductor's only GEMM backend while the plugin
    defers to torch's in-tree backend (``TORCH_FLYDSL_INTREE_POLICY=defer``): the in-tree
    backend's kernel. Raises ``IntreeUnavailable`` when the generated code calls the plugin's
    op or no in-tree choice was offered."""
    try:
        with _env("TORCH_FLYDSL_INTREE_POLICY", "defer"):
            compiled, src = _compiled_code(fn, inputs, "FLYDSL")
    except Exception as e:
        if "NoValidChoices" in f"{type(e).__name__} {e}":
            raise IntreeUnavailable(f"the in-tree FlyDSL backend offered no choice for {what} here") from e
        raise
    if "torch_flydsl" in src:
        raise IntreeUnavailable(f"the plugin, not the in-tree backend, served {what} here")
    return lambda: compiled(*inputs)


def eager_intree_fn(fn: Callable, intree_op: str) -> Callable:
    """``fn`` with the plugin's eager overrides stepped aside (``torch_flydsl.disabled()``), so
    that torch's in-tree FlyDSL override runs; raises ``IntreeUnavailable`` unless that override
    serves ``intree_op`` here (otherwise PyTorch's kernel would be timed under its name)."""
    import torch_flydsl

    from ..runtime import intree

    if intree.serves(intree_op, "cuda", 0) is None:
        raise IntreeUnavailable(f"torch's in-tree FlyDSL override does not serve {intree_op} here "
                                f"({intree.status('cuda', 0, kind='eager')})")

    def call():
        with torch_flydsl.disabled():
            return fn()

    return call


def eager_pytorch_fn(fn: Callable, intree_op: Optional[str] = None) -> Callable:
    """``fn`` on PyTorch's own kernel: the plugin's eager override stepped aside and, where
    torch's in-tree FlyDSL override registered ``intree_op``'s aten op, that one too
    (``torch.backends.python_native.operations_disabled``)."""
    import torch_flydsl

    aten = None
    if intree_op is not None:
        from ..runtime import intree

        registered = intree._registered_eager_ops() or set()
        aten = intree.EAGER_ATEN.get(intree_op)
        aten = aten if aten in registered else None

    def call():
        with torch_flydsl.disabled(), _native_off(aten):
            return fn()

    return call


def _native_off(aten: Optional[str]):
    if aten is None:
        return contextlib.nullcontext()
    import torch.backends.python_native as pn

    # torch 2.15+ only (where _registered_eager_ops found an op to step aside); unused-ignore for
    # a torch that has it
    return pn.operations_disabled(aten)  # type: ignore[attr-defined, unused-ignore]
