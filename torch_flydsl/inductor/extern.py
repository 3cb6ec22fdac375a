"""FlyDSL choices as Inductor extern kernels whose generated call is the plugin's custom op.

Generated code says ``torch.ops.torch_flydsl.dense_mm_out.default(a, b, cfg='...', out=buf)``
rather than ``extern_kernels.<name>``: the latter needs this choice object to exist in the
process that runs cached code, which a warm FX-graph cache in a fresh process does not have.

Under ``cpp_wrapper`` and AOTInductor the C++ wrapper cannot call a Python name: a winner is
lowered instead as a fallback kernel of the same custom op writing into a buffer allocated
for it (``dispatcher_call``), which the C++ wrapper calls through the dispatcher (JIT
``cpp_wrapper``) or AOTI's proxy executor (packages, serialized as the op's schema name).
"""

from __future__ import annotations

import functools

from torch._inductor import select_algorithm
from torch._inductor.select_algorithm import ExternKernelCaller, ExternKernelChoice

from .. import ops
from ..fingerprint import fingerprint_str


class FlyDSLExternChoice(ExternKernelChoice):
    def __init__(self, op_name: str):
        self.op_name = op_name
        super().__init__(ops.op(op_name), name=f"torch_flydsl_{op_name}", has_out_variant=True)

    def call_name(self) -> str:
        return ops.call_name(self.op_name)

    @functools.cache  # noqa: B019 - one value per choice object, like the base class
    def hash_key(self) -> str:
        # The stock key hashes inspect.getsource of the kernel; ours must change with the
        # plugin, FlyDSL and kernel versions or a stale timing is reused after an upgrade.
        return f"{self.name}-{fingerprint_str()}"

    def bind(self, *args, **kwargs):
        caller = super().bind(*args, **kwargs)
        # The stock caller in every way (its constructor's signature differs between torch
        # releases, so it is built by them), except for the node it lowers to (below).
        caller.__class__ = FlyDSLExternCaller
        return caller


class FlyDSLExternCaller(ExternKernelCaller):
    def output_node(self):
        from torch._inductor.virtualized import V

        if getattr(V.graph, "cpp_wrapper", False):
            return dispatcher_call(ops.op(self.choice.op_name), self.input_nodes, self.layout, self.kwargs)
        return super().output_node()


def dispatcher_call(op_overload, input_nodes, layout, kwargs: dict):
    """The winner as a fallback kernel of the custom out-op: a buffer of the choice's fixed
    layout, then ``op(*inputs, **kwargs, out=buffer)`` marked as mutating it; returns the
    buffer (readers after the call depend on the mutation)."""
    from torch._inductor import ir
    from torch._inductor.lowering import empty_strided

    out = empty_strided(list(layout.size), list(layout.stride), dtype=layout.dtype, device=layout.device)
    ir.FallbackKernel.create(op_overload, *input_nodes, **kwargs, out=out)
    return out


_choices: dict[str, FlyDSLExternChoice] = {}


def extern_choice(op_name: str) -> FlyDSLExternChoice:
    """One choice object per op per process; tolerant of a previous registration by name."""
    if op_name not in _choices:
        name = f"torch_flydsl_{op_name}"
        existing = getattr(ExternKernelChoice, "_registry", {}).get(name)
        if isinstance(existing, FlyDSLExternChoice):
            _choices[op_name] = existing
        else:
            if hasattr(select_algorithm.extern_kernels, name):
                delattr(select_algorithm.extern_kernels, name)
            _choices[op_name] = FlyDSLExternChoice(op_name)
    return _choices[op_name]
