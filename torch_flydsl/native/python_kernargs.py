"""What the Python launcher hands the GPU as kernel arguments, byte for byte, without a GPU.

The Python path calls FlyDSL's compiled host function with the launcher's ``compile_args``;
FlyDSL packs them into C-ABI slots (``emulator.capture``'s ``HostSlot``s: a tensor is its
address and its 1-D extent, then the ints, floats and the stream). The host function computes
the grid and forwards its parameters, minus the stream, to ``gpu.launch_func`` unchanged
(checked here in the module text), and MLIR's ROCm runtime wrapper passes them to
``hipModuleLaunchKernel`` as ``kernelParams``: HIP copies each to its place in the kernarg
segment. That place is the LLVM AMDGPU kernel ABI's: each parameter at the next offset aligned
to its type's ABI alignment (a packed struct aligns to 1). So the Python launcher's kernarg
buffer is the host slots laid out by the kernel's LLVM signature, which the compiled module
records, independently of the code object's msgpack metadata the C++ packer reads.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..deploy.code_object import CodeObjectError, kernel_signature, split_types

_SCALARS = {"i8": (1, 1), "i16": (2, 2), "i32": (4, 4), "i64": (8, 8), "f16": (2, 2), "bf16": (2, 2),
            "f32": (4, 4), "f64": (8, 8)}


def size_align(llvm_type: str) -> tuple[int, int]:
    """(size, ABI alignment) of an AMDGPU kernel parameter type (address space 1 pointers are 64-bit)."""
    t = llvm_type.strip()
    if t in _SCALARS:
        return _SCALARS[t]
    if t.startswith("ptr"):
        return 8, 8
    m = re.fullmatch(r"struct<(packed )?\((.*)\)>", t, re.S)
    if m:
        fields = [size_align(f) for f in split_types(m.group(2))]
        if m.group(1):
            return sum(s for s, _ in fields), 1
        off, align = 0, 1
        for s, a in fields:
            off = -(-off // a) * a + s
            align = max(align, a)
        return -(-off // align) * align, align
    raise CodeObjectError(f"no kernarg layout for LLVM type {t!r}")


@dataclass
class PythonKernargs:
    kernel: str
    buffer: bytes  # the explicit kernarg segment as HIP fills it from the Python path's kernelParams
    offsets: list  # where each parameter starts
    slots: list  # FlyDSL's host slots (emulator.capture.HostSlot), stream last


def _forwards_in_order(final_ir: str, kernel: str, count: int) -> bool:
    """The host function passes its first ``count`` parameters to ``kernel``, in order."""
    m = re.search(r"gpu\.launch_func <[^>]*> @\w+::@" + re.escape(kernel) + r" .*? args\((?P<args>[^\n]*)\)\s*$",
                  final_ir, re.M)
    if m is None:
        return False
    names = re.findall(r"(%[\w]+) :", m.group("args"))
    return names == [f"%arg{i}" for i in range(count)]


def python_kernargs(jit_fn, args: tuple, final_ir: str, kernel: str) -> PythonKernargs:
    """The kernarg buffer the Python launcher's call ``jit_fn(*args)`` makes for ``kernel``."""
    from flydsl.compiler.jit_function import _unwrap_jit_function

    from ..emulator.capture import _host_slots

    jf, _ = _unwrap_jit_function(jit_fn)
    slots = _host_slots(jf, tuple(args), {})
    types = kernel_signature(final_ir, kernel)
    if len(slots) != len(types) + 1:
        raise CodeObjectError(f"{kernel}: {len(slots)} host slots for {len(types)} kernel parameters + the stream")
    if not _forwards_in_order(final_ir, kernel, len(types)):
        raise CodeObjectError(f"{kernel}: the host function does not forward its parameters to the kernel in order")
    buf = bytearray()
    offsets = []
    for slot, t in zip(slots, types):
        size, align = size_align(t)
        if len(slot.raw) != size:
            raise CodeObjectError(f"{kernel}: a {len(slot.raw)}-byte host slot for a {size}-byte {t} parameter")
        buf += bytes(-len(buf) % align)
        offsets.append(len(buf))
        buf += slot.raw
    return PythonKernargs(kernel, bytes(buf), offsets, slots)
