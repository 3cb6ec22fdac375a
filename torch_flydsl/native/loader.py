"""Load a built native launcher into this process (never builds: see ``build``).

Cheap enough for ``import torch`` on a ROCm torch: it computes the build's key (hashing a few
small sources) and loads the library when a build left it. ``TORCH_FLYDSL_NATIVE``: ``auto``
(default) loads a built library where torch is a ROCm build, ``1`` on any torch (tests, the
host-cost benchmark), ``0`` never.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

_loaded: Optional[Path] = None


def setting() -> str:
    from ..config import native_setting

    return native_setting()


def loaded() -> Optional[Path]:
    """The library loaded in this process (None: none)."""
    return _loaded


def mark_loaded(path: Path) -> None:
    global _loaded
    _loaded = Path(path)


def why_not_loaded() -> Optional[str]:
    """Why this process has no native launcher (None: it has one)."""
    if _loaded is not None:
        return None
    s = setting()
    if s == "0":
        return "TORCH_FLYDSL_NATIVE=0"
    from . import build

    try:
        lib = build.planned().library
    except Exception as e:  # an unusable cache directory: the Python path serves
        return f"no build directory ({type(e).__name__}: {e})"
    if not lib.is_file():
        return f"not built for this torch and these sources ({lib} is absent: python -m torch_flydsl native build)"
    return "built but not loaded (TORCH_FLYDSL_NATIVE=auto loads it only on a ROCm torch)"


def load_built() -> bool:
    """Load the library a build left for this torch and these sources; False when there is none
    or ``TORCH_FLYDSL_NATIVE`` says not to. Never raises (``import torch`` calls it)."""
    if _loaded is not None:
        return True
    s = setting()
    if s == "0":
        return False
    try:
        import torch

        if s != "1" and not getattr(torch.version, "hip", None):
            return False
        from . import build

        lib = build.planned().library
        if not lib.is_file():
            return False
        torch.ops.load_library(str(lib))
        mark_loaded(lib)
        return True
    except Exception as e:
        from .._log import log

        log.warning("torch_flydsl: the native launcher did not load (%s: %s); the Python path serves the GEMM ops",
                    type(e).__name__, e)
        return False


def status() -> str:
    """The loaded library's own account (HIP library, index, launches), or why none is loaded."""
    why = why_not_loaded()
    if why:
        return f"native launcher: not loaded: {why}"
    import torch

    return f"native launcher: {_loaded}\n" + torch.ops.torch_flydsl_native.status()
