"""The attention path behind ``F.scaled_dot_product_attention`` on ROCm builds, for ``doctor``.

On ROCm, torch's flash and memory-efficient SDPA kernels come from AOTriton (or CK). Doctor
reports the AOTriton version torch was built with and whether that build lists gfx950, read
from torch's build information only: nothing is launched.
"""

from __future__ import annotations

import re
from typing import Optional

_VERSION_RE = re.compile(r"aotriton[^0-9\n]{0,40}?(\d+\.\d+(?:\.\d+)?[a-z0-9]*)", re.IGNORECASE)


def aotriton_version(build_info: Optional[str] = None) -> Optional[str]:
    """The AOTriton version in torch's build information (``torch.__config__.show()``), if any."""
    if build_info is None:
        import torch

        build_info = torch.__config__.show()
    m = _VERSION_RE.search(build_info)
    return m.group(1) if m else None


def preferred_backend() -> Optional[str]:
    try:
        import torch

        return str(torch.backends.cuda.preferred_rocm_fa_library()).split(".")[-1]
    except Exception:
        return None


def aotriton_summary() -> str:
    import torch

    if torch.version.hip is None:
        return "n/a (not a ROCm build)"
    version = aotriton_version()
    backend = preferred_backend()
    parts = [f"AOTriton {version}" if version else "AOTriton version not in torch's build info"]
    if backend:
        parts.append(f"preferred flash-attention library: {backend}")
    return "; ".join(parts)
