"""Decide, per GEMM node, which FlyDSL configs to offer, and say why when none.

Inputs come from Inductor IR; everything after ``TensorMeta`` is the template family's business.
"""

from __future__ import annotations

import logging
import os

from dataclasses import dataclass, field
from typing import Any, Optional

import sympy
import torch

from .. import config
from .._log import log
from ..runtime.launch_guard import device_decline
from ..runtime.probe import flydsl_info, off_warned
from ..registry import Family, family_for
from ..serving import deferral
from ..templates.base import Decline, TensorMeta
from .versions import cpp_wrapper_lacks_e8m0, size_hint


@dataclass
class Offer:
    op_name: str
    family: Optional[Family] = None
    configs: list = field(default_factory=list)  # the family's config objects (``.key()``)
    declined: list[tuple[Optional[Any], Decline]] = field(default_factory=list)
    varying: Optional[str] = None  # the output sizes known only at run time, with their hints
    problem: Any = None  # the family's problem the configs were fitted to

    def decline(self, category: str, reason: str) -> "Offer":
        self.declined.append((None, Decline(category, reason)))
        return self


def _static_int(x) -> Optional[int]:
    if isinstance(x, int):
        return x
    if isinstance(x, sympy.Integer):
        return int(x)
    return None


def _static_ints(xs) -> Optional[tuple[int, ...]]:
    """The ints of static sizes/strides, or None when any is symbolic."""
    ints = []
    for x in xs:
        static = _static_int(x)
        if static is None:
            return None
        ints.append(static)
    return tuple(ints)


def tensor_meta(node) -> Optional[TensorMeta]:
    """TensorMeta of an IR node, or None when any size/stride/offset is symbolic."""
    layout = node.get_layout()
    size = _static_ints(node.get_size())
    stride = _static_ints(node.get_stride())
    offset = _static_int(layout.offset)
    if size is None or stride is None or offset is None:
        return None
    device = node.get_device()
    return TensorMeta(size, stride, node.get_dtype(), offset, device.type if device else "cpu")


def _maybe_static(x):
    """An int for a static size/stride/offset, else its sympy expression."""
    static = _static_int(x)
    return x if static is None else static


def symbolic_tensor_meta(node) -> TensorMeta:
    """TensorMeta of an IR node whose sizes, strides or offset may be sympy expressions."""
    device = node.get_device()
    return TensorMeta(tuple(map(_maybe_static, node.get_size())), tuple(map(_maybe_static, node.get_stride())),
                      node.get_dtype(), _maybe_static(node.get_layout().offset), device.type if device else "cpu")


class ShapeFacts:
    """What a family may ask about symbolic sizes of the graph being lowered (see
    ``dense_gemm.eligibility``): answers hold for every value the symbols can take, as
    Inductor's shape environment knows them, never only for the size hint."""

    def __init__(self, sizevars):
        self.sizevars = sizevars

    def hint(self, x) -> int:
        return x if isinstance(x, int) else size_hint(self.sizevars, x)

    def multiple_of(self, x, d: int) -> bool:
        return bool(self.sizevars.statically_known_multiple_of(sympy.sympify(x), d))

    def geq(self, x, y) -> bool:
        return bool(self.sizevars.statically_known_geq(sympy.sympify(x), sympy.sympify(y)))

    def bounds(self, x) -> tuple[int, Optional[int]]:
        r = self.sizevars.shape_env.bound_sympy(sympy.sympify(x))
        # Unbounded ends are torch's int_oo, which is no sympy.Integer (and claims is_finite).
        low = int(r.lower) if isinstance(r.lower, sympy.Integer) else 0
        return max(low, 0), (int(r.upper) if isinstance(r.upper, sympy.Integer) else None)


def inductor_gate() -> Optional[Decline]:
    """Reasons that hold for every node of this compile."""
    from torch._inductor import config as ic

    if not config.backends_include_flydsl(ic.max_autotune_gemm_backends):
        return Decline("config", "FLYDSL is not in max_autotune_gemm_backends")
    if not (ic.max_autotune or ic.max_autotune_gemm):
        return Decline("config", "max-autotune is off")
    info = flydsl_info()
    if not info.usable and config.executor() != "reference-standin":  # the stand-in needs no FlyDSL
        return Decline("version", info.reason or "flydsl unusable")
    return None


def cpp_wrapper_codegen() -> bool:
    """This graph's wrapper is C++ (``cpp_wrapper``, AOTInductor). torch 2.15's in-tree FlyDSL
    template offers nothing there ("FlyDSL does not support AOT wrappers"), so the plugin never
    defers to it in such a graph: its winners lower to dispatcher calls (``extern``)."""
    from torch._inductor.virtualized import V

    return bool(getattr(V.graph, "cpp_wrapper", False) or getattr(V.graph, "aot_mode", False))


def plan(op_name: str, nodes: list[Any], layout, scalars: dict, serving: Optional[str] = None) -> Offer:
    """``serving``: the entry point's name for coexistence when it differs from ``op_name``
    (``scaled_mm_v2`` is served by the scaled_mm family)."""
    family = family_for(op_name)
    offer = Offer(op_name, family)
    if family is None:
        return offer.decline("op", f"{op_name} has no FlyDSL family")
    d = inductor_gate()
    if d:
        offer.declined.append((None, d))
        return offer
    device = layout.device
    reason = device_decline(device)
    if reason:
        return offer.decline("device", reason)
    cpp = cpp_wrapper_codegen()
    if cpp and any(n.get_dtype() == torch.float8_e8m0fnu for n in nodes):
        lacks = cpp_wrapper_lacks_e8m0()
        if lacks:
            return offer.decline("codegen", lacks)
    deferred = None if cpp else deferral(serving or op_name, device.type, device.index or 0)
    if deferred:
        return offer.decline("coexistence", deferred)
    metas = [tensor_meta(n) for n in nodes]
    out_shape, out_stride = _static_ints(layout.size), _static_ints(layout.stride)
    if any(m is None for m in metas) or out_shape is None or out_stride is None:
        problem = _symbolic_problem(family, op_name, nodes, layout, scalars)
    else:
        out_meta = TensorMeta(out_shape, out_stride, layout.dtype, _static_int(layout.offset) or 0, device.type)
        problem = family.problem_from_metas(op_name, metas, out_meta, scalars)
        if os.environ.get("TORCH_FLYDSL_RECORD_SHAPES"):
            from ..deploy.record import note_from_env

            note_from_env(op_name, metas)
    if isinstance(problem, Decline):
        offer.declined.append((None, problem))
        return offer
    from torch._inductor import config as ic

    from ..deploy.run_only import gate as run_only_gate

    breadth = config.autotune_breadth(getattr(ic, "max_autotune_gemm_search_space", "DEFAULT"))
    fitting, declined = family.configs_for(problem, breadth)
    fitting, declined = run_only_gate(family, problem, fitting, declined, False if scalars.get("beta", 1) == 0 else None)
    offer.varying = _varying_sizes(layout)
    offer.problem = problem
    offer.configs.extend(fitting)
    offer.declined.extend(declined)
    return offer


def _symbolic_problem(family, op_name: str, nodes, layout, scalars: dict):
    """The family's problem for a node with symbolic sizes, strides or offsets (dynamic shapes),
    or why not. Families opt in with ``problem_from_symbolic_metas``."""
    from torch._inductor.virtualized import V

    if not family.supports_symbolic():
        return Decline("shape", f"dynamic (symbolic) shapes or strides are not supported by the {family.name} family")
    out_meta = TensorMeta(tuple(map(_maybe_static, layout.size)), tuple(map(_maybe_static, layout.stride)),
                          layout.dtype, _maybe_static(layout.offset), layout.device.type)
    return family.problem_from_symbolic_metas(op_name, [symbolic_tensor_meta(n) for n in nodes], out_meta, scalars, ShapeFacts(V.graph.sizevars))


def _varying_sizes(layout) -> Optional[str]:
    """``"s0 (size hint 64)"`` for the output's symbolic sizes, None when all are static."""
    from torch._inductor.virtualized import V

    varying = [s for s in layout.size if _static_int(s) is None]
    if not varying:
        return None
    return ", ".join(f"{s} (size hint {size_hint(V.graph.sizevars, s)})" for s in varying)


def no_config_fits(declined: list[tuple[Optional[Any], Decline]]) -> Optional[str]:
    """One line for a node whose every config was declined: each distinct reason once."""
    reasons = []
    for cfg, d in declined:
        if cfg is None:
            return None  # declined as a whole: that reason is logged on its own
        text = str(d).replace(f"{cfg.key()}: ", "")
        if text not in reasons:
            reasons.append(text)
    if not reasons:
        return None
    shown = "; ".join(reasons[:3]) + (f"; and {len(reasons) - 3} other reason(s)" if len(reasons) > 3 else "")
    return f"none of the {len(declined)} FlyDSL config(s) fits: {shown}"


_warned_versions: set = set()


def log_offer(offer: Offer, where: str) -> None:
    if offer.configs:
        every = f" for every {offer.varying}" if offer.varying else ""
        log.info("%s: offering %d FlyDSL config(s)%s: %s", where, len(offer.configs), every,
                 ", ".join(c.key() for c in offer.configs))
    else:
        summary = no_config_fits(offer.declined)
        if summary:
            # FLYDSL was requested and the node is eligible, yet nothing is offered: say so at
            # info (the per-config reasons follow at debug).
            log.info("%s: no FlyDSL choice: %s", where, summary)
    for cfg, d in offer.declined:
        if cfg is not None:
            log.debug("%s: config %s declined: %s", where, cfg.key(), d)
        elif d.category == "config":
            # FLYDSL not requested / max-autotune off: true of every node, not news.
            log.debug("%s: no FlyDSL choice: %s", where, d)
        elif d.category == "version" and d.reason not in _warned_versions:
            # FLYDSL was asked for and cannot work in this process at all (flydsl missing or
            # unsupported): worth a warning, once.
            _warned_versions.add(d.reason)
            flydsl = flydsl_info()
            said = off_warned() and flydsl.reason is not None and flydsl.reason in d.reason
            # the probe's one warning already named this flydsl and the user's options
            log.log(logging.INFO if said else logging.WARNING,
                    "FLYDSL was requested but offers nothing in this process: %s", d.reason)
        else:
            log.info("%s: no FlyDSL choice: %s", where, d)
