"""The gfx950 code object (ELF) inside a compiled FlyDSL module, and its kernels' LLVM
signatures: what ``export`` writes for the native launcher and what ``python_kernargs`` lays
the Python launcher's arguments out by.

FlyDSL's final module holds ``gpu.binary @kernels [#gpu.object<#rocdl.target<...>, ..., bin =
"...">]``: the linked code object as an MLIR string literal, which prints a byte as itself when
it is printable and not ``"`` or ``\\``, else as ``\\`` and two hex digits (and ``\\`` as ``\\\\``).
"""

from __future__ import annotations

import re

_BIN = re.compile(r'\bbin = "((?:[^"\\]|\\.)*)"', re.S)
_ESCAPE = re.compile(r"\\(\\|[0-9A-Fa-f]{2})")
_SIGNATURE = '#gpu.kernel_metadata<"{name}", !llvm.func<void ('


class CodeObjectError(ValueError):
    """A module without the code object or kernel asked for; the message says which."""


def _unescape(literal: str) -> bytes:
    out = bytearray()
    pos = 0
    for m in _ESCAPE.finditer(literal):
        out += literal[pos:m.start()].encode("utf-8")
        token = m.group(1)
        out.append(0x5C if token == "\\" else int(token, 16))
        pos = m.end()
    out += literal[pos:].encode("utf-8")
    return bytes(out)


def code_object(final_ir: str) -> bytes:
    """The ELF image of the (single) ``gpu.binary`` object in ``final_ir``."""
    found = _BIN.findall(final_ir)
    if not found:
        raise CodeObjectError("the compiled module holds no gpu.binary object (bin = ...)")
    if len(found) > 1:
        raise CodeObjectError(f"the compiled module holds {len(found)} code objects; the native launcher loads one")
    image = _unescape(found[0])
    if image[:4] != b"\x7fELF":
        raise CodeObjectError("the gpu.binary object is not an ELF image (FlyDSL's object format changed?)")
    return image


def split_types(text: str) -> list[str]:
    """Top-level comma-separated LLVM types of a signature (the emulator's type splitter)."""
    from ..emulator.types import _split_top

    return _split_top(text)


def kernel_signature(final_ir: str, kernel: str) -> list[str]:
    """The LLVM parameter types of ``kernel`` as the module's kernel metadata records them."""
    start = final_ir.find(_SIGNATURE.format(name=kernel))
    if start < 0:
        raise CodeObjectError(f"the compiled module has no kernel metadata for {kernel}")
    pos = start + len(_SIGNATURE.format(name=kernel))
    depth = 1
    for end in range(pos, len(final_ir)):
        depth += {"(": 1, ")": -1}.get(final_ir[end], 0)
        if depth == 0:
            return split_types(final_ir[pos:end])
    raise CodeObjectError(f"the kernel metadata of {kernel} ends inside its signature")
