"""An ``InductorChoices`` layer that appends FlyDSL choices to mm/addmm.

Installed through ``config.inductor_choices_class``. When another package already set that
factory to a class, we subclass theirs (our layer calls ``super()``), so both apply; we never
replace it. The factory is a ``functools.partial`` carrying our version fingerprint because
torch 2.11 keys the FX-graph cache on the pickled factory; 2.13+ call ``uuid()``.

This module imports nothing from Inductor at import time: it is loaded while Inductor's own
modules may still be initialising (the install hook fires inside their import chain); the
classes are resolved when Inductor first asks the factory for its choices handler.
"""

from __future__ import annotations

import functools
import os
import threading

from .._log import log
from .offer import log_offer, plan, tensor_meta
from ..fingerprint import fingerprint


def _node_label(op_name: str) -> str:
    from torch._inductor.virtualized import V

    node = getattr(V.graph, "current_node", None)
    return f"{op_name} node {getattr(node, 'name', '?')}"


def _guarded(fn, *args):
    """Our part of choice generation must never fail a compile (a bad knob value, a bug of
    ours): on any error, log it and offer nothing, leaving PyTorch's choices as they are."""
    try:
        return fn(*args)
    except Exception as e:
        log.warning("torch_flydsl offers no FlyDSL choice here: %s: %s", type(e).__name__, e)
        return None


class FlyDSLChoicesMixin:
    _flydsl_local = threading.local()

    def get_template_configs(self, kernel_inputs, templates, op_name, kwarg_overrides=None):
        offer = _guarded(self._flydsl_offer, kernel_inputs, op_name)
        fixing = bool(offer and offer.configs)
        FlyDSLChoicesMixin._flydsl_local.fix_layout = fixing
        try:
            choices = super().get_template_configs(kernel_inputs, templates, op_name, kwarg_overrides)
        finally:
            FlyDSLChoicesMixin._flydsl_local.fix_layout = False
        if fixing:
            choices.extend(_guarded(self._flydsl_bind, kernel_inputs, op_name, offer) or [])
        return choices

    def _need_to_fix_layout(self, adjusted_choices, op_name):
        # Our kernels write a row-major output with known strides: with FlyDSL in the list, the
        # output layout must be fixed for every choice, as it is for Triton templates.
        if getattr(FlyDSLChoicesMixin._flydsl_local, "fix_layout", False):
            return True
        return super()._need_to_fix_layout(adjusted_choices, op_name)

    def uuid(self):
        # Read at each FX-graph cache lookup (2.13+): versions and the knobs as set now.
        from ..config import cache_key_knobs

        base = super().uuid() if hasattr(super(), "uuid") else None
        return (fingerprint(), cache_key_knobs(), base)

    # -- internals ------------------------------------------------------------------------

    def _flydsl_offer(self, kernel_inputs, op_name):
        from torch._inductor.virtualized import V

        from ..registry import family_for

        if family_for(op_name) is None:
            return None
        nodes = kernel_inputs.nodes()
        layout = kernel_inputs.output_layout(flexible=False)
        if op_name == "addmm" and list(nodes[0].get_size()) != list(layout.size):
            # tuned_addmm asks several times per node; we join the call whose bias is already
            # expanded to [M, N], which is what autotuning benchmarks every choice with.
            return None
        current = getattr(V.graph, "current_node", None)
        seen = V.graph.__dict__.setdefault("_torch_flydsl_offered", set())
        if current is not None:
            if current in seen:
                return None
            seen.add(current)
        scalars = dict(getattr(kernel_inputs, "_scalars", {}) or {})
        scalars.update(node_scalars(op_name, current))
        offer = plan(op_name, nodes, layout, scalars, serving=_serving_name(op_name, current))
        log_offer(offer, _node_label(op_name))
        return offer

    def _flydsl_bind(self, kernel_inputs, op_name, offer):
        scalars = getattr(kernel_inputs, "_scalars", {}) or {}
        return bind_configs(offer, kernel_inputs.nodes(), kernel_inputs.output_layout(flexible=False), scalars)


def bind_configs(offer, nodes, layout, scalars: dict) -> list:
    """One extern caller per offered config, each isolated from failing the compile."""
    from .extern import extern_choice

    family, op_name = offer.family, offer.op_name
    if offer.configs and os.environ.get("TORCH_FLYDSL_RECORD_WINNERS"):
        from ..deploy.winners import ensure_installed

        ensure_installed(tensor_meta)
    choice = extern_choice(family.custom_op_for(op_name).name)
    kwargs = family.call_kwargs(op_name, scalars)
    callers = []
    for cfg in offer.configs:
        caller = choice.bind(nodes, layout, cfg=cfg.key(), **kwargs)
        caller.description = f"FlyDSL {cfg.key()}"
        isolate_failures(caller, cfg.key())
        callers.append(caller)
    _guarded(prefetch_compiles, offer, scalars)
    return callers


def prefetch_compiles(offer, scalars: dict) -> None:
    """Start compiling every offered config in the compile workers now: they build side by side
    while Inductor lowers the rest of the graph, and each benchmark then finds its kernel ready
    (without this they compiled one after another, at first benchmark)."""
    from ..runtime import isolated

    family = offer.family
    if not family.precompiles() or offer.problem is None:
        return
    problem = getattr(offer.problem, "at_hint", offer.problem)  # dynamic M: the hint's kernel serves every M
    has_bias = False if scalars.get("beta", 1) == 0 else None
    for cfg in offer.configs:
        try:
            jit_fn, args = family.placeholder_call(cfg, problem, has_bias)
        except NotImplementedError:
            return  # a form the family cannot build ahead (it compiles at first benchmark)
        isolated.prefetch(jit_fn, args)


def _serving_name(op_name: str, fx_node):
    """The entry point's coexistence name when the stock lowering of an overridden op reaches
    us (torch 2.13 lowers MX ``_scaled_mm_v2`` through get_template_configs("scaled_mm"))."""
    from ..registry import require_family

    target = getattr(fx_node, "target", None)
    name = target.name().split("::")[-1] if target is not None and hasattr(target, "name") else None
    return next((o.serving for o in require_family(op_name).lowering_overrides if o.target == name), None)


def node_scalars(op_name: str, fx_node) -> dict:
    """Non-tensor arguments of the FX node being lowered, as the family reads them (Inductor
    hands the choices its tensors only; a scaled_mm's ``scale_result`` or a v2 recipe would be
    lost)."""
    from ..registry import require_family

    target = getattr(fx_node, "target", None)
    if target is None or not hasattr(target, "name"):
        return {}
    return require_family(op_name).scalars_from_node(op_name, target.name().split("::")[-1], tuple(fx_node.args), dict(fx_node.kwargs))


def isolate_failures(caller, label: str) -> None:
    """A config that fails to compile or run loses autotuning (infinite time) instead of
    failing the whole compile; the reason goes to the torch_flydsl logger. While it is timed
    the op may not fall back to PyTorch (``ops.strict``): that would time PyTorch under our name."""
    from .. import ops

    benchmark = caller.benchmark

    def guarded_benchmark(*args, **kwargs):
        try:
            with ops.strict():
                return benchmark(*args, **kwargs)
        except Exception as e:  # any failure of ours must leave the other choices standing
            log.warning("FlyDSL config %s dropped: %s: %s", label, type(e).__name__, e)
            return float("inf")

    caller.benchmark = guarded_benchmark


@functools.lru_cache(maxsize=None)
def composed_class(base: type) -> type:
    if issubclass(base, FlyDSLChoicesMixin):
        return base
    return type(f"FlyDSL{base.__name__}", (FlyDSLChoicesMixin, base), {"__module__": __name__})


class LiveKnobs:
    """Pickles as the plugin knobs' current values. torch 2.11 keys the FX-graph cache on the
    pickled ``inductor_choices_class``, so a knob change must change those bytes."""

    def __reduce__(self):
        from ..config import cache_key_knobs

        return (tuple, (cache_key_knobs(),))


def make_choices(base=None, version: tuple = (), knobs=None):
    """The factory Inductor calls (through a partial that also pins ``version``).

    ``base`` is the choices class we layer on: another package's, or Inductor's default.
    """
    if base is None:
        from torch._inductor.choices import InductorChoices as base
    return composed_class(base)()


def is_ours(factory) -> bool:
    return isinstance(factory, functools.partial) and factory.func is make_choices
