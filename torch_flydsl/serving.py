"""Who serves each op family on this install: the plugin, torch's in-tree FlyDSL backend, or
PyTorch's own path — the one coexistence rule that the Inductor glue, ``doctor`` and
``explain`` share.

Rule: the plugin defers an op to the in-tree backend only when that backend would actually
serve it in this process (``runtime.intree``) and ``TORCH_FLYDSL_INTREE_POLICY`` is ``defer``;
otherwise it offers its own kernels for every op it has a family for. Inductor ops are served
only when FLYDSL is requested in ``max_autotune_gemm_backends``; callers check that themselves.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from . import config
from .registry import family_for, override_for, serving_names
from .runtime import intree


def all_ops() -> tuple[str, ...]:
    """Every op either backend may serve, in the order doctor lists them: each family's entry
    points in registration order (MX scaled GEMM has two: ``torch._scaled_mm``, v1, which torch
    2.15's in-tree backend leaves alone, and ``torch._scaled_mm_v2`` / ``F.scaled_mm``, v2,
    which it serves), then any the in-tree backend serves that no family does."""
    ours = serving_names()
    return ours + tuple(op for op in intree.INTREE_OPS if op not in ours)


PLUGIN, INTREE, PYTORCH = "plugin", "in-tree", "pytorch"


@dataclass(frozen=True)
class Serving:
    op: str
    served_by: str  # plugin | in-tree | pytorch
    reason: str


def _plugin_device_reason(device_type: str, index: int) -> Optional[str]:
    import torch

    from .runtime.launch_guard import device_decline

    return device_decline(torch.device(device_type, index) if device_type == "cuda" else torch.device(device_type))


def deferral(op: str, device_type: Optional[str] = "cuda", index: int = 0, assume_gfx950: bool = False) -> Optional[str]:
    """Why the plugin leaves ``op`` to the in-tree backend here (None: it does not)."""
    if config.intree_policy() != "defer":
        return None
    why = intree.serves(op, device_type, index, assume_gfx950)
    if why is None:
        return None
    return f"{why}; TORCH_FLYDSL_INTREE_POLICY=plugin offers the plugin's kernels as well"


def who_serves(op: str, device_type: str = "cuda", index: int = 0, assume_gfx950: bool = False) -> Serving:
    """Who serves ``op`` on ``device_type`` here (or as if on a gfx950 device)."""
    deferred = deferral(op, device_type, index, assume_gfx950)
    if deferred:
        return Serving(op, INTREE, deferred)
    if family_for(op) is not None:
        unreachable = _unreachable(op)
        if unreachable:
            return Serving(op, PYTORCH, unreachable)
        why = None if assume_gfx950 else _plugin_device_reason(device_type, index)
        if why is None:
            from .runtime.probe import flydsl_info

            info = flydsl_info()
            if info.usable or config.executor() == "reference-standin":
                st = intree.status(device_type, index, assume_gfx950)
                note = f"in-tree backend {st}" if st.present else "no in-tree backend in this torch"
                return Serving(op, PLUGIN, f"torch_flydsl kernels ({note})")
            why = info.reason or "flydsl unusable"
        return Serving(op, PYTORCH, why)
    intree_why = intree.serves(op, device_type, index, assume_gfx950)
    if intree_why:
        return Serving(op, INTREE, intree_why)
    st = intree.status(device_type, index, assume_gfx950, intree.INTREE_OPS.get(op, "inductor"))
    theirs = f"; in-tree {'eager overrides' if intree.INTREE_OPS.get(op) == 'eager' else 'backend'} {st}" if st.present else ""
    return Serving(op, PYTORCH, f"torch_flydsl has no {op} kernels yet{theirs}")


def _unreachable(op: str) -> Optional[str]:
    """Why this torch's Inductor cannot hand ``op`` to any plugin (an override needs a newer one)."""
    override = override_for(op)
    if override is None:
        return None
    import torch

    from .runtime.probe import _parse_version

    if _parse_version(torch.__version__)[:2] >= override.min_torch:
        return None
    need = ".".join(map(str, override.min_torch))
    return (f"Inductor in torch {torch.__version__} cannot hand aten.{override.target} to a plugin (it falls back to "
            f"the eager op before any lowering hook); torch {need}+ can, and torch._scaled_mm (v1) works here")
