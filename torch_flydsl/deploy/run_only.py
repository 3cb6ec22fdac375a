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
    if not manifest.kernels:
        return (f"TORCH_FLYDSL_RUN_ONLY=1 and {manifest.path} lists no precompiled kernels (build them with "
                "`python -m torch_flydsl precompile --spec FILE --cache-dir DIR` and set TORCH_FLYDSL_CACHE_DIR=DIR)")
    here = _toolchain(os.environ.get("ROCM_PATH"))
    if manifest.toolchain and here and manifest.toolchain != here:
        return (f"TORCH_FLYDSL_RUN_ONLY=1 and the kernels in {manifest.directory} were built by another FlyDSL "
                "toolchain or against other ROCm device bitcode (toolchain key "
                f"{manifest.toolchain[:12]}..., here {here[:12]}...): FlyDSL would not find them; precompile again "
                "with this FlyDSL and --rocm-path pointing at this machine's ROCm")
    return None


def gate(impl, problem, fitting: list, declined: list, has_bias: Optional[bool] = None) -> tuple[list, list]:
    """``(fitting, declined)`` with every config whose kernel is not precompiled moved to
    ``declined`` when run-only mode is on (unchanged otherwise)."""
    if not config.run_only() or not fitting:
        return fitting, declined
    from . import manifest as mf

    variant = getattr(impl, "variant_id", None)
    try:
        man = mf.current(cache_dir())
        whole = whole_cache_decline(man)
    except (mf.ManifestError, OSError) as e:
        whole = f"TORCH_FLYDSL_RUN_ONLY=1 and the precompiled cache cannot be read: {e}"
    kept, out = [], list(declined)
    for cfg in fitting:
        if whole:
            out.append((cfg, Decline("run-only", f"{cfg.key()}: {whole}")))
        elif variant is None:
            out.append((cfg, Decline("run-only", f"{cfg.key()}: TORCH_FLYDSL_RUN_ONLY=1 and this family has no "
                                                 "precompile support yet, so its kernels would compile at run time")))
        elif not man.holds(variant(cfg, problem, has_bias)):
            out.append((cfg, Decline("run-only", f"{cfg.key()}: TORCH_FLYDSL_RUN_ONLY=1 and kernel "
                                                 f"{variant(cfg, problem, has_bias)} is not in {man.path}")))
        else:
            kept.append(cfg)
    return kept, out
