"""Lowering overrides for aten ops whose stock lowering never asks ``get_template_configs``.

``torch._scaled_mm_v2`` (``F.scaled_mm``) with MX block scales is the case: torch 2.14+ send it
to an eager fallback before building any choice, and 2.13 offers an ATen choice with v1
semantics. A family lists such ops in ``Family.lowering_overrides``; here each one gets a
``user_lowerings`` entry (torch 2.12+) that plans the node like any other, and when FlyDSL has
at least one config for it, autotunes [the family's baseline op (PyTorch's own computation),
FlyDSL configs]. Whenever we decline, or anything of ours fails, the override returns None
and Inductor runs its stock lowering unchanged: we never replace its choices.
"""

from __future__ import annotations

from typing import Any, Optional

from .._log import log
from ..registry import LoweringOverride, families


def installable() -> list[tuple[Any, LoweringOverride]]:
    """(family, override) pairs this torch can reach."""
    import torch

    from ..runtime.probe import _parse_version

    have = _parse_version(torch.__version__)[:2]
    return [(f, o) for f in families() for o in f.lowering_overrides if have >= o.min_torch]


def install() -> list[str]:
    """Register every reachable override once; returns the aten ops now overridden. Another
    package's override of the same op is left in place (and said)."""
    import torch
    from torch._inductor import lowering

    table = getattr(lowering, "user_lowerings", None)
    if table is None:
        return []
    done = []
    for family, override in installable():
        target = getattr(torch.ops.aten, override.target).default
        current = table.get(target)
        if current is not None and not getattr(current, "_torch_flydsl", False):
            log.info("aten.%s already has a user lowering (%r): torch_flydsl leaves it alone", override.target, current)
            continue
        table[target] = _lowering_for(family, override)
        done.append(override.target)
    return done


def _lowering_for(family, override: LoweringOverride):
    def lower(*args, **kwargs):
        try:
            return _lower(family, override, args, kwargs)
        except Exception as e:  # ours must never fail the compile: the stock lowering takes over
            log.warning("torch_flydsl offers no FlyDSL choice for aten.%s here: %s: %s",
                        override.target, type(e).__name__, e)
            return None

    setattr(lower, "_torch_flydsl", True)  # a function attribute: install() tells ours by it
    lower.__name__ = f"torch_flydsl_{override.target}"
    return lower


def _lower(family, override: LoweringOverride, args: tuple, kwargs: dict) -> Optional[Any]:
    from torch._inductor.ir import FixedLayout
    from torch._inductor.select_algorithm import autotune_select_algorithm, realize_inputs
    from torch._inductor.virtualized import V

    from .choices import bind_configs, node_scalars
    from .extern import extern_choice
    from .offer import inductor_gate, log_offer, plan

    gate = inductor_gate()
    if gate is not None and gate.category == "config":
        return None  # FLYDSL not requested: not even worth a debug line per node
    current = getattr(V.graph, "current_node", None)
    seen = V.graph.__dict__.setdefault("_torch_flydsl_offered", set())
    if current is None or current in seen:
        return None
    seen.add(current)
    tensors, out_dtype = family.lowering_operands(override.target, args, kwargs)
    nodes = list(realize_inputs(*tensors))
    a = nodes[0]
    m, n = a.get_size()[0], nodes[1].get_size()[1]
    layout = FixedLayout(a.get_device(), out_dtype or a.get_dtype(), [m, n])
    scalars = node_scalars(override.op_name, current)
    offer = plan(override.op_name, nodes, layout, scalars, serving=override.serving)
    label = f"{override.target} node {getattr(current, 'name', '?')}"
    log_offer(offer, label)
    if not offer.configs:
        return None
    choices = []
    baseline = family.baseline_op()
    if baseline is not None:
        caller = extern_choice(baseline.name).bind(nodes, layout)
        caller.description = f"PyTorch {override.target} (the op's own kernel)"
        choices.append(caller)
    choices.extend(bind_configs(offer, nodes, layout, scalars))
    result = autotune_select_algorithm(override.op_name, choices, nodes, layout)
    return result[0] if isinstance(result, tuple) else result
