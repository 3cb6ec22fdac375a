"""FlyDSL choices for ops whose stock lowering builds its choice list by hand.

``_grouped_mm``'s lowering binds ATen's choice and Triton's grouped template itself and calls
``autotune_select_algorithm`` without asking ``get_template_configs``. A family lists such ops
in ``Family.choice_hooks``; one autotuning preprocessing function (installed first in the
selector's list, so the user's choice-name filters apply to ours too) appends the family's
choices when the node being lowered is one of them. It needs at least one stock choice to
learn the node's inputs and layout (ATEN in the backends does it), offers once per node, and
leaves the list as it was on any decline or error of ours.
"""

from __future__ import annotations

from typing import Optional

from .._log import log

SELECTOR_MODULE = "torch._inductor.select_algorithm"
_installed = False


def install() -> None:
    """Arm the preprocessing function once ``select_algorithm`` has finished importing."""
    from .. import _import_hook

    _import_hook.when_imported(SELECTOR_MODULE, _install_now)


def _install_now() -> None:
    global _installed
    if _installed:
        return
    from torch._inductor.select_algorithm import get_algorithm_selector_cache

    get_algorithm_selector_cache().preprocessing_fns.insert(0, add_family_choices)
    _installed = True


def _hook_for(fx_node) -> Optional[tuple]:
    from ..registry import families

    target = getattr(fx_node, "target", None)
    if target is None or not hasattr(target, "name"):
        return None
    name = target.name().split("::")[-1]
    return next(((f, h) for f in families() for h in f.choice_hooks if h.target == name), None)


def add_family_choices(choices: list) -> list:
    """The preprocessing function: ``choices`` plus the family's, for a hooked node."""
    try:
        from torch._inductor.virtualized import V

        current = getattr(V.graph, "current_node", None)
        found = _hook_for(current)
        if found is None or not choices:
            return choices
        return choices + _family_choices(found[0], found[1], choices, current)
    except Exception as e:  # ours must never fail the compile: the stock list stands
        log.warning("torch_flydsl offers no FlyDSL choice here: %s: %s", type(e).__name__, e)
        return choices


def _family_choices(family, hook, choices: list, current) -> list:
    from torch._inductor.virtualized import V

    from .choices import bind_configs, node_scalars
    from .offer import log_offer, plan

    seen = V.graph.__dict__.setdefault("_torch_flydsl_offered", set())
    if current in seen:
        return []
    seen.add(current)
    nodes, layout = list(choices[0].input_nodes), choices[0].layout
    scalars = node_scalars(hook.op_name, current)
    offer = plan(hook.op_name, nodes, layout, scalars)
    log_offer(offer, f"{hook.op_name} node {getattr(current, 'name', '?')}")
    if not offer.configs:
        return []
    return bind_configs(offer, nodes, layout, scalars)
