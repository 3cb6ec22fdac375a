"""The attention path behind ``F.scaled_dot_product_attention`` on ROCm builds, for ``doctor``.

On ROCm, torch's flash and memory-efficient SDPA kernels come from AOTriton (or CK). torch
2.11-2.15 expose no AOTriton version at the Python level (it exists only as C++ macros), so
doctor reads the files a ROCm wheel ships: ``torch/lib/libaotriton_v2.so.<version>`` and the
per-architecture kernel images under ``torch/lib/aotriton.images/`` (a directory naming
``gfx950`` means the build carries kernels for it). Nothing is imported or launched. These
paths come from torch's AOTriton CMake rules; no ROCm wheel was available here to confirm them,
so every "not found" is reported as such, never as "unsupported".
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Optional

_LIB_RE = re.compile(r"libaotriton_v2\.so\.(\d+(?:\.\d+)*)$")


def _torch_lib() -> Optional[Path]:
    from .probe import torch_file

    return torch_file("lib")


def aotriton_version(lib_dir: Optional[Path] = None) -> Optional[str]:
    """The version in the name of the shipped AOTriton library, if any."""
    lib_dir = lib_dir or _torch_lib()
    if lib_dir is None:
        return None
    versions = [m.group(1) for p in lib_dir.glob("libaotriton_v2.so.*") if (m := _LIB_RE.search(p.name))]
    return max(versions, key=lambda v: tuple(int(x) for x in v.split(".")), default=None)


def aotriton_archs(lib_dir: Optional[Path] = None) -> Optional[list[str]]:
    """GPU architectures with AOTriton kernel images in this build (None: no image directory)."""
    lib_dir = lib_dir or _torch_lib()
    images = lib_dir / "aotriton.images" if lib_dir else None
    if images is None or not images.is_dir():
        return None
    return sorted({m.group(0) for p in images.iterdir() if (m := re.search(r"gfx\d+[a-z]?", p.name))})


def preferred_backend() -> Optional[str]:
    try:
        import torch

        return str(torch.backends.cuda.preferred_rocm_fa_library()).split(".")[-1]
    except Exception:
        return None


def aotriton_summary(lib_dir: Optional[Path] = None) -> str:
    import torch

    if torch.version.hip is None and lib_dir is None:
        return "n/a (not a ROCm build)"
    version = aotriton_version(lib_dir)
    archs = aotriton_archs(lib_dir)
    parts = [f"AOTriton {version}" if version else "AOTriton library version not found in torch/lib"]
    if archs is None:
        parts.append("gfx950 support unknown (no aotriton.images directory)")
    else:
        parts.append("gfx950 kernels: " + ("yes" if "gfx950" in archs else f"no (images for {', '.join(archs) or 'none'})"))
    backend = preferred_backend()
    if backend:
        parts.append(f"preferred flash-attention library: {backend}")
    return "; ".join(parts)
