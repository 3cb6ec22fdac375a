"""What this process could do with FlyDSL, found without importing it.

Importing flydsl loads its own LLVM/MLIR, which is slow and has clashed with Triton's copy in
the past, so every question here is answered from package metadata and the file system.
"""

from __future__ import annotations

import functools
import importlib.metadata
import importlib.util
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

# Supported FlyDSL releases: 0.3.2 added the cdna4 primitives our kernels use; the public API
# only grew up to 0.5.x. A newer minor is declined until it has been tested.
MIN_FLYDSL = (0, 3, 2)
MAX_FLYDSL_EXCLUSIVE = (0, 6)


def _parse_version(v: str) -> tuple[int, ...]:
    parts = []
    for p in v.split("+")[0].split("."):
        digits = "".join(ch for ch in p if ch.isdigit())
        if not digits:
            break
        parts.append(int(digits))
        if not p.isdigit():
            break
    return tuple(parts)


@dataclass(frozen=True)
class FlyDSLInfo:
    installed: bool
    version: Optional[str]
    supported: bool
    reason: Optional[str]  # why not usable, when it isn't

    @property
    def usable(self) -> bool:
        return self.installed and self.supported


@functools.lru_cache(maxsize=None)
def flydsl_info() -> FlyDSLInfo:
    if importlib.util.find_spec("flydsl") is None:
        return FlyDSLInfo(False, None, False, "flydsl is not installed (pip install 'torch-flydsl[flydsl]')")
    try:
        version = importlib.metadata.version("flydsl")
    except importlib.metadata.PackageNotFoundError:
        return FlyDSLInfo(True, None, False, "flydsl has no package metadata; cannot check its version")
    v = _parse_version(version)
    if v < MIN_FLYDSL or v[:2] >= MAX_FLYDSL_EXCLUSIVE:
        lo = ".".join(map(str, MIN_FLYDSL))
        hi = ".".join(map(str, MAX_FLYDSL_EXCLUSIVE))
        return FlyDSLInfo(True, version, False, f"flydsl {version} is outside the supported range >={lo},<{hi}")
    return FlyDSLInfo(True, version, True, None)


def flydsl_has_cpu_safe_compile() -> bool:
    """0.4.0 added a ``flyc.compile`` that returns without launching; 0.3.x needs COMPILE_ONLY."""
    version = flydsl_info().version
    return _parse_version(version) >= (0, 4) if version else False


def find_lld() -> Optional[Path]:
    """An ld.lld FlyDSL can use: $ROCM_PATH/llvm/bin/ld.lld, /opt/rocm's, or a Debian lld-N."""
    roots = [os.environ.get("ROCM_PATH"), "/opt/rocm"]
    for root in roots:
        if root:
            p = Path(root) / "llvm" / "bin" / "ld.lld"
            if p.exists():
                return p
    for name in ("ld.lld", "ld.lld-19", "ld.lld-18", "ld.lld-17"):
        w = shutil.which(name)
        if w:
            return Path(w)
    return None


def hip_runtime_present() -> bool:
    """A HIP build of torch that sees a GPU. Without it a FlyDSL launch aborts the process."""
    import torch

    return torch.version.hip is not None and torch.cuda.is_available()


def torch_file(relative: str) -> Optional[Path]:
    """A file inside the installed torch package, found without importing anything (importing
    torch 2.15's in-tree FlyDSL package pulls in most of Inductor and Triton: seconds)."""
    spec = importlib.util.find_spec("torch")
    roots = list(getattr(spec, "submodule_search_locations", None) or [])
    for root in roots:
        p = Path(root) / relative
        if p.exists():
            return p
    return None


def intree_flydsl_present() -> bool:
    """Whether this torch ships its own Inductor FlyDSL backend (torch 2.15+)."""
    return torch_file("_inductor/codegen/flydsl/__init__.py") is not None
