"""Entry points: ``torch.backends`` (runs inside ``import torch``) and ``vllm.general_plugins``.

Rules, all tested: never raise (an exception here makes ``import torch`` fail for the whole
environment); import neither flydsl nor ``torch._inductor`` (seconds, and LLVM clashes); stay
cheap; do nothing when ``TORCH_FLYDSL_DISABLE=1``; be idempotent (this runs in every process
that imports torch, including Inductor's autotune and compile subprocesses).
"""

from __future__ import annotations

import os
import warnings

_done = False
INDUCTOR_TRIGGER = "torch._inductor.lowering"


def _install_inductor() -> None:
    try:
        from .inductor.install import install

        install()
    except Exception as e:  # never break a compile because the plugin failed to install
        from ._log import log

        log.warning("torch_flydsl: Inductor glue not installed: %s: %s", type(e).__name__, e)


def enable() -> bool:
    """Register the ops and arm the Inductor glue. Returns False when disabled by env."""
    global _done
    if _done:
        return True
    # Import torch before our ops module: when torch_flydsl is imported first, ``import torch``
    # runs this same entry point re-entrantly, and it must find torch_flydsl.ops unstarted.
    import torch  # noqa: F401

    if _done:
        return True
    from . import config

    if config.disabled():
        return False
    from . import _import_hook, _log, ops

    _log.configure_from_env()
    ops.register()
    _import_hook.when_imported(INDUCTOR_TRIGGER, _install_inductor)
    _done = True
    return True


def autoload() -> None:
    """``torch.backends`` entry point."""
    try:
        enable()
    except Exception as e:
        try:
            warnings.warn(f"torch_flydsl disabled itself at import: {type(e).__name__}: {e}", RuntimeWarning)
        except Exception:
            pass


def vllm_register() -> None:
    """``vllm.general_plugins`` entry point: vLLM calls it in every process it starts, maybe twice."""
    autoload()


def is_enabled() -> bool:
    return _done and os.environ.get("TORCH_FLYDSL_DISABLE", "0") in ("", "0")
