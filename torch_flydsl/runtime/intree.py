"""Would torch's own (in-tree, 2.15+) FlyDSL backend serve an op in this process?

The plugin defers to the in-tree backend only for an op it would actually serve; everything
else the plugin complements (addmm, which in-tree has no path for, and every op when in-tree is
off). In-tree serving needs two kinds of condition:

* install-level: torch ships the backend, and its runtime gate passes — flydsl installed, with
  its ``_mlir`` package, at the release torch pins (0.3.x in 2.15; any other version turns the
  backend off with only a debug log);
* device-level: a ROCm build of torch and a gfx950 device.

Under the emulator or the reference stand-in executors the CPU stands for a gfx950 device for
both backends, so only the install-level conditions decide (this is what lets CPU tests see
the real coexistence decision); ``explain`` likewise answers "as if on gfx950".

Nothing here imports flydsl or the in-tree modules (torch 2.15's FlyDSL package pulls in most
of Inductor and Triton when imported): the release its gate pins is read from its source file;
if torch moves it, the documented 2.15 pin is used. The in-tree eager overrides (RMSNorm, TopK)
have their own gate: ``TORCH_NATIVE_SKIP_VERSION_CHECK=1`` lifts its version check and
``TORCH_DISABLE_NATIVE_JIT=1`` turns them off; on a ROCm build the overrides it actually
registered are read from ``torch.backends.python_native.get_dsl_operations("flydsl")``.
"""

from __future__ import annotations

import functools
import importlib.util
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from .probe import _parse_version, flydsl_info, intree_flydsl_present, torch_file

# Which ops the in-tree backend has a FlyDSL path for, and through which mechanism. ``addmm``
# is absent on purpose: torch 2.15's tuned_addmm has no FlyDSL path.
INTREE_OPS = {
    "mm": "inductor",
    "grouped_mm": "inductor",
    "scaled_mm_v2": "inductor",  # _scaled_mm_v2 / F.scaled_mm with MX block scales (not v1 _scaled_mm)
    "rms_norm": "eager",
    "topk": "eager",
}
INTREE_GATE_FILE = "_inductor/codegen/flydsl/flydsl_utils.py"
DOCUMENTED_RELEASE = (0, 3)  # torch 2.15.0's _FLYDSL_SUPPORTED_RELEASE
_RELEASE_RE = re.compile(r"_FLYDSL_SUPPORTED_RELEASE\s*(?::[^=]*)?=\s*\(\s*(\d+)\s*,\s*(\d+)\s*,?\s*\)")


@dataclass(frozen=True)
class IntreeStatus:
    present: bool  # torch ships the backend
    usable: bool  # it would serve (given the device conditions the caller asked about)
    reason: str  # why it is off, or what it needs; readable by users

    def __str__(self) -> str:
        if not self.present:
            return "absent"
        return f"present, {'on' if self.usable else 'off'}: {self.reason}"


def _supported_release() -> tuple[int, ...]:
    path = torch_file(INTREE_GATE_FILE)
    try:
        m = _RELEASE_RE.search(path.read_text()) if path else None
    except OSError:
        m = None
    return (int(m.group(1)), int(m.group(2))) if m else DOCUMENTED_RELEASE


def _flydsl_has_mlir() -> bool:
    spec = importlib.util.find_spec("flydsl")
    locations = list(getattr(spec, "submodule_search_locations", None) or [])
    return any((Path(loc) / "_mlir").exists() for loc in locations)


@functools.lru_cache(maxsize=None)
def install_status(kind: str = "inductor") -> IntreeStatus:
    """The install-level half: does torch ship the backend (``kind``: its Inductor backend or
    its eager overrides), and does its flydsl gate pass?"""
    if kind == "eager":
        return _eager_install_status()
    if not intree_flydsl_present():
        return IntreeStatus(False, False, "this torch has no in-tree FlyDSL backend")
    info = flydsl_info()
    if not info.installed or info.version is None:
        return IntreeStatus(True, False, "flydsl is not installed")
    release = _supported_release()
    have = _parse_version(info.version)[: len(release)]
    pinned = ".".join(map(str, release)) + ".x"
    if have != release:
        return IntreeStatus(True, False, f"it accepts flydsl {pinned} only, this is flydsl {info.version}")
    if not _flydsl_has_mlir():
        return IntreeStatus(True, False, "flydsl has no _mlir package")
    return IntreeStatus(True, True, f"flydsl {info.version} passes its {pinned} gate")


def _eager_install_status() -> IntreeStatus:
    import os

    if torch_file("_native/flydsl_utils.py") is None:
        return IntreeStatus(False, False, "this torch has no in-tree FlyDSL eager overrides")
    info = flydsl_info()
    if not info.installed or info.version is None:
        return IntreeStatus(True, False, "flydsl is not installed")
    if os.environ.get("TORCH_DISABLE_NATIVE_JIT", "0") not in ("", "0"):
        return IntreeStatus(True, False, "TORCH_DISABLE_NATIVE_JIT is set")
    release = _supported_release()
    pinned = ".".join(map(str, release)) + ".x"
    skip = os.environ.get("TORCH_NATIVE_SKIP_VERSION_CHECK", "0") not in ("", "0")
    if _parse_version(info.version)[: len(release)] != release and not skip:
        return IntreeStatus(True, False, f"they accept flydsl {pinned} only (TORCH_NATIVE_SKIP_VERSION_CHECK=1 "
                                         f"lifts that), this is flydsl {info.version}")
    return IntreeStatus(True, True, f"flydsl {info.version} passes their gate" + (" (version check skipped)" if skip else ""))


# Our op name -> the aten op torch 2.15's eager FlyDSL override registers for it.
EAGER_ATEN = {"rms_norm": "_fused_rms_norm", "topk": "topk"}


def _registered_eager_ops() -> Optional[set]:
    """The aten ops torch's FlyDSL eager overrides registered in this process (ROCm builds)."""
    try:
        import torch.backends.python_native as pn

        # torch 2.15+ only (an older torch raises here: None); unused-ignore for a torch that has it
        ops = pn.get_dsl_operations("flydsl")  # type: ignore[attr-defined, unused-ignore]
        return {str(op).split("::")[-1].split(".")[0] for op in ops}
    except Exception:
        return None


def device_reason(device_type: Optional[str], index: int = 0, kind: str = "inductor") -> Optional[str]:
    """Why the in-tree backend could not run on this device (None: it could). Its Inductor gate
    reads the device's own ``gcnArchName``; its eager overrides honour ``FLYDSL_GPU_ARCH`` and
    ``HSA_OVERRIDE_GFX_VERSION`` first, as ours do."""
    from .. import config

    if config.executor() in ("emulator", "reference-standin"):
        return None  # the CPU stands for gfx950 for both backends (see module docstring)
    import torch

    if torch.version.hip is None:
        return "not a ROCm build of torch"
    if device_type != "cuda":
        return f"device {device_type} is not a ROCm GPU"
    from .arch import _device_arch, device_arch

    arch = device_arch(index) if kind == "eager" else _device_arch(index)
    if arch != "gfx950":
        return f"GPU arch {arch} is not gfx950"
    return None


def status(device_type: Optional[str] = "cuda", index: int = 0, assume_gfx950: bool = False,
           kind: str = "inductor") -> IntreeStatus:
    """Would the in-tree backend run here? ``assume_gfx950`` answers as if on an MI350."""
    base = install_status(kind)
    if not base.usable or assume_gfx950:
        return base
    why = device_reason(device_type, index, kind)
    if why:
        return IntreeStatus(True, False, why)
    return base


def _rocm_build() -> bool:
    import torch

    return torch.version.hip is not None


def serves(op: str, device_type: Optional[str] = "cuda", index: int = 0, assume_gfx950: bool = False) -> Optional[str]:
    """If the in-tree backend would serve ``op`` here, the reason (for logs); else None."""
    if op not in INTREE_OPS:
        return None
    kind = INTREE_OPS[op]
    st = status(device_type, index, assume_gfx950, kind)
    if not st.usable:
        return None
    if kind == "eager" and not assume_gfx950:
        registered = _registered_eager_ops()
        if registered is not None and _rocm_build() and EAGER_ATEN[op] not in registered:
            return None
    return f"torch's in-tree FlyDSL backend serves {op} here ({st.reason})"
