"""Which AMD GPU architecture a device is, the way FlyDSL itself resolves it."""

from __future__ import annotations

import functools
import os
from typing import Optional

SUPPORTED_ARCHS = ("gfx950",)


def arch_from_env() -> Optional[str]:
    """``FLYDSL_GPU_ARCH`` wins, then ``HSA_OVERRIDE_GFX_VERSION`` ("9.5.0" -> gfx950)."""
    explicit = os.environ.get("FLYDSL_GPU_ARCH", "").strip().lower()
    if explicit:
        return explicit
    hsa = os.environ.get("HSA_OVERRIDE_GFX_VERSION", "").strip()
    parts = hsa.split(".")
    if len(parts) == 3 and all(p.isalnum() for p in parts):
        return "gfx" + "".join(parts).lower()
    return None


@functools.lru_cache(maxsize=None)
def _device_arch(index: int) -> Optional[str]:
    import torch

    if torch.version.hip is None or not torch.cuda.is_available():
        return None
    name = getattr(torch.cuda.get_device_properties(index), "gcnArchName", "") or ""
    return name.split(":")[0].lower() or None


def device_arch(index: int = 0) -> Optional[str]:
    """The arch FlyDSL would compile for on device ``index``; None when there is no ROCm GPU."""
    return arch_from_env() or _device_arch(index)
