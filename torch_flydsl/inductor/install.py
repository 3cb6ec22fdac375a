"""Install the Inductor side (idempotent). Called right after ``torch._inductor.lowering`` loads.

The glue installs on every torch from 2.11 on, including releases newer than the newest one we
test (``versions.NEWEST_TESTED_TORCH``: logged at info). If installing fails, PyTorch's config
is left as it was and the reason is kept for ``doctor`` (``install_error``). Whether the plugin
or torch's in-tree FlyDSL backend serves an op is decided per node (``serving.deferral``).
"""

from __future__ import annotations

import functools
from typing import Optional

from .._log import log

_installed = False
install_error: Optional[str] = None  # why the glue is not installed, for doctor


def install() -> bool:
    global _installed, install_error
    if _installed:
        return True
    from .versions import untested_torch

    newer = untested_torch()
    if newer:
        log.info("%s; installing the Inductor glue anyway", newer)
    # Only Inductor's config is touched here: this runs inside Inductor's import chain, where
    # other Inductor modules (choices, select_algorithm) may be half-initialised.
    from torch._inductor import config as ic

    from .choices import LiveKnobs, is_ours, make_choices
    from ..fingerprint import fingerprint

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
        install_error = f"inductor_choices_class is {current!r}, not a class torch_flydsl can layer on"
        _installed = True
        return False
    ic.inductor_choices_class = functools.partial(make_choices, base=base, version=fingerprint(), knobs=LiveKnobs())
    from .overrides import install as install_overrides

    overridden = install_overrides()
    if overridden:
        log.debug("FlyDSL lowering overrides for %s", ", ".join(f"aten.{t}" for t in overridden))
    from .hooks import install as install_choice_hooks

    install_choice_hooks()
    log.debug("FlyDSL Inductor glue installed")
    _installed = True
    return True
