"""What the entry points do once the package is importable.

The entry points themselves live in the top-level ``torch_flydsl_boot`` module, which checks
the kill switch and contains every failure of this package. Rules, all tested:
import neither flydsl nor ``torch._inductor`` (seconds, and LLVM clashes); stay cheap; do
nothing when ``TORCH_FLYDSL_DISABLE`` is on; be idempotent (this runs in every process that
imports torch, including Inductor's autotune and compile subprocesses); work whichever of our
modules was imported before torch.
"""

from __future__ import annotations

_done = False
INDUCTOR_TRIGGER = "torch._inductor.lowering"


def _install_inductor() -> None:
    try:
        from .inductor.install import install

        install()
    except Exception as e:  # never break a compile because the plugin failed to install
        from ._log import log
        from .inductor import install as install_mod

        install_mod.install_error = f"{type(e).__name__}: {e}"
        log.warning("torch_flydsl: Inductor glue not installed: %s", install_mod.install_error)


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
    from . import eager

    eager.register()
    _import_hook.when_imported(INDUCTOR_TRIGGER, _install_inductor)
    _done = True
    return True


def is_enabled() -> bool:
    """Whether the plugin is active in this process: enabled, and not switched off since."""
    from . import config

    return _done and not config.disabled()


def autoload() -> None:
    """Entry point name of releases before ``torch_flydsl_boot`` existed: an environment whose
    entry-point metadata is stale still loads this, so it must stay and must never raise."""
    from torch_flydsl_boot import autoload as boot_autoload

    boot_autoload()


vllm_register = autoload
