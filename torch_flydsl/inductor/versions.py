"""Which torch releases the Inductor glue was tested on, and Inductor API names that moved between
them. (The plugin's version fingerprint, in every cache key: ``torch_flydsl.fingerprint``.)"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Optional

# The newest torch release whose Inductor seams the glue tests ran on
# (scripts/test_torch_versions.sh). Newer ones still get the glue; doctor says "untested".
NEWEST_TESTED_TORCH = (2, 15)


def untested_torch() -> Optional[str]:
    """A sentence when this torch is newer than the newest one tested, else None."""
    import torch

    from ..runtime.probe import _parse_version

    have = _parse_version(torch.__version__)[:2]
    if have > NEWEST_TESTED_TORCH:
        newest = ".".join(map(str, NEWEST_TESTED_TORCH))
        return f"torch {torch.__version__} is newer than the newest release torch_flydsl was tested on ({newest})"
    return None


def size_hint(sizevars, expr) -> int:
    """Inductor's size hint for ``expr`` (the value autotuning times): ``optimization_hint`` on
    torch 2.11+, ``size_hint`` where a later release drops that name."""
    hint = getattr(sizevars, "optimization_hint", None) or sizevars.size_hint
    return int(hint(expr))


AOTI_SHIM_HEADER = "include/torch/csrc/inductor/aoti_torch/c/shim.h"


@functools.lru_cache(maxsize=None)
def cpp_wrapper_lacks_e8m0() -> Optional[str]:
    """Why a C++ wrapper (``cpp_wrapper``, AOTInductor) of this torch cannot hold an E8M0 tensor
    (MX scales), else None: torch 2.11's AOTI C shim has no ``aoti_torch_dtype_float8_e8m0fnu``,
    so its generated C++ does not compile, with or without the plugin. Read from the shim header
    this torch ships; without the header, torch releases before 2.13 are taken to lack it."""
    import torch

    from ..runtime.probe import _parse_version

    try:
        lacks = "aoti_torch_dtype_float8_e8m0fnu" not in (Path(torch.__file__).parent / AOTI_SHIM_HEADER).read_text()
    except OSError:
        lacks = _parse_version(torch.__version__)[:2] < (2, 13)
    if not lacks:
        return None
    return (f"torch {torch.__version__}'s C++ wrapper has no E8M0 dtype (aoti_torch_dtype_float8_e8m0fnu; torch "
            "2.13 has it): MX scaled GEMMs cannot be compiled with cpp_wrapper or AOTInductor here")
