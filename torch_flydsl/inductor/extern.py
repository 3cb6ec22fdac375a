"""FlyDSL choices as Inductor extern kernels whose generated call is the plugin's custom op.

Generated code says ``torch.ops.torch_flydsl.dense_mm_out.default(a, b, cfg='...', out=buf)``
rather than ``extern_kernels.<name>``: the latter needs this choice object to exist in the
process that runs cached code, which a warm FX-graph cache in a fresh process does not have.
"""

from __future__ import annotations

import functools

from torch._inductor import select_algorithm
from torch._inductor.select_algorithm import ExternKernelChoice

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
