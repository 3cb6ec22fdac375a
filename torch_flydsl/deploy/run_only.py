"""``TORCH_FLYDSL_RUN_ONLY=1``: offer only kernels a precompiled cache holds.

Inductor offers and ``explain`` pass their fitting configs through ``gate``: each config whose
kernel the cache manifest (``TORCH_FLYDSL_CACHE_DIR``, see ``deploy.manifest``) does not list is
declined with the reason, so nothing is compiled at run time. The launch path enforces the same
rule on its own (FlyDSL's ``FLYDSL_RUNTIME_RUN_ONLY``, set by ``runtime.compile.device_compile_env``):
a binary that went missing after the offer makes the call keep PyTorch's path.
"""

from __future__ import annotations

import functools
import os
from typing import Optional

from .. import config
from ..templates.base import Decline


def cache_dir():
    from ..runtime.cache import deployment_dir

    return deployment_dir()


@functools.lru_cache(maxsize=8)
def _toolchain(rocm_path: Optional[str]) -> Optional[str]:
    from ..runtime.compile import toolchain_key

    return toolchain_key()


def whole_cache_decline(manifest) -> Optional[str]:
    """Why no kernel of ``manifest`` can load in this process (None: they can)."""
    from ..runtime.trust import untrusted
    from .manifest import BINARIES

    if not manifest.kernels:
        return (f"TORCH_FLYDSL_RUN_ONLY=1 and {manifest.path} lists no precompiled kernels (build them with "
                "`python -m torch_flydsl precompile --spec FILE --cache-dir DIR` and set TORCH_FLYDSL_CACHE_DIR=DIR)")
    why = untrusted(manifest.path) or untrusted(manifest.directory / BINARIES)
    if why:
        return (f"TORCH_FLYDSL_RUN_ONLY=1 and the precompiled cache {manifest.directory} is not trusted: {why}; "
                "its binaries are pickles, so whoever can write there could run code in this process")
    here = _toolchain(os.environ.get("ROCM_PATH"))
    if manifest.toolchain and here and manifest.toolchain != here:
        return (f"TORCH_FLYDSL_RUN_ONLY=1 and the kernels in {manifest.directory} were built by another FlyDSL "
                "toolchain or against other ROCm device bitcode (toolchain key "
                f"{manifest.toolchain[:12]}..., here {here[:12]}...): FlyDSL would not find them; precompile again "
                "with this FlyDSL and --rocm-path pointing at this machine's ROCm")
    return None


def _warn(reason: str) -> str:
    """``reason``, warned once per process (a refused cache must be seen, not only explained)."""
    from torch_flydsl_boot import warn_once

    warn_once(f"run-only: {reason}", reason)
    return reason


def gate(family, problem, fitting: list, declined: list, has_bias: Optional[bool] = None) -> tuple[list, list]:
    """``(fitting, declined)`` with every config whose kernel is not precompiled (or whose binary
    is damaged or untrusted) moved to ``declined`` when run-only mode is on (unchanged otherwise)."""
    if not config.run_only() or not fitting:
        return fitting, declined
    from . import manifest as mf

    precompiled = family.precompiles()
    try:
        man = mf.current(cache_dir())
        whole = whole_cache_decline(man)
        if whole and man.kernels:
            _warn(whole)
    except (mf.ManifestError, OSError) as e:
        whole = _warn(f"TORCH_FLYDSL_RUN_ONLY=1 and the precompiled cache cannot be used: {e}")
    kept, out = [], list(declined)
    for cfg in fitting:
        if whole:
            out.append((cfg, Decline("run-only", f"{cfg.key()}: {whole}")))
            continue
        if not precompiled:
            out.append((cfg, Decline("run-only", f"{cfg.key()}: TORCH_FLYDSL_RUN_ONLY=1 and this family has no "
                                                 "precompile support yet, so its kernels would compile at run time")))
            continue
        unit = family.compiled_unit(cfg, problem, has_bias).id
        why = man.why_not_held(unit)
        if why is None:
            kept.append(cfg)
            continue
        if unit in man.kernels:  # listed but damaged, replaced or untrusted: refused, and said
            why = _warn(f"TORCH_FLYDSL_RUN_ONLY=1 and the binary of kernel {unit} is refused: {why}")
        else:
            why = f"TORCH_FLYDSL_RUN_ONLY=1 and {why}"
        out.append((cfg, Decline("run-only", f"{cfg.key()}: {why}")))
    return kept, out
