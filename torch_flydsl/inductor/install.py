"""Install the Inductor side (idempotent). Called right after ``torch._inductor.lowering`` loads."""

from __future__ import annotations

import functools

from .. import config
from .._log import log
from ..runtime.probe import intree_flydsl_present

_installed = False


def active_implementation() -> str:
    """Which FLYDSL GEMM backend this process uses: 'plugin', 'in-tree' or 'both'."""
    if not intree_flydsl_present():
        return "plugin"
    return "in-tree" if config.intree_policy() == "defer" else "both"


def install() -> bool:
    global _installed
    if _installed:
        return True
    impl = active_implementation()
    if impl == "in-tree":
        log.info(
            "torch ships its own FlyDSL Inductor backend; torch_flydsl offers no GEMM choices "
            "(TORCH_FLYDSL_INTREE_POLICY=plugin to offer them as well)"
        )
        _installed = True
        return False
    # Only Inductor's config is touched here: this runs inside Inductor's import chain, where
    # other Inductor modules (choices, select_algorithm) may be half-initialised.
    from torch._inductor import config as ic

    from .choices import LiveKnobs, is_ours, make_choices
    from .versions import fingerprint

    current = ic.inductor_choices_class
    if current is None or is_ours(current):
        base = None  # Inductor's default InductorChoices, resolved when the factory runs
    elif isinstance(current, type):
        base = current
        log.info("composing FlyDSL choices with the existing inductor_choices_class %s", current.__qualname__)
    else:
        log.warning(
            "inductor_choices_class is set to %r, which is not a class we can layer on; "
            "torch_flydsl leaves it alone and offers no FlyDSL GEMM choices",
            current,
        )
        _installed = True
        return False
    ic.inductor_choices_class = functools.partial(make_choices, base=base, version=fingerprint(), knobs=LiveKnobs())
    log.debug("FlyDSL Inductor glue installed (implementation: %s)", impl)
    _installed = True
    return True
