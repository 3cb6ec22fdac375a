"""Where FlyDSL's kernel cache and our own compile artifacts live.

``TORCH_FLYDSL_CACHE_DIR`` (the deployment cache ``precompile`` fills) wins, then
``FLYDSL_RUNTIME_CACHE_DIR`` when the user set it; otherwise the cache goes under Inductor's
cache dir (so ``TORCHINDUCTOR_CACHE_DIR`` isolation, as vLLM does it, covers it).
Directories we create are readable by the user alone: they hold compiled code that is loaded
and executed.
"""

from __future__ import annotations

import os
from pathlib import Path


def _inductor_cache_dir() -> Path:
    # Imported lazily: it pulls in torch._inductor, which is heavy, and we only need it once
    # something is compiled.
    from torch._inductor.runtime.cache_dir_utils import cache_dir

    return Path(cache_dir())


def private_dir(path: Path) -> Path:
    try:
        path.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError as e:
        raise OSError(f"torch_flydsl cannot use its cache directory {path}: {type(e).__name__}: {e} "
                      "(check TORCHINDUCTOR_CACHE_DIR / FLYDSL_RUNTIME_CACHE_DIR)") from e
    try:
        os.chmod(path, 0o700)
    except PermissionError:
        pass
    return path


def plugin_cache_root() -> Path:
    return private_dir(_inductor_cache_dir() / "torch_flydsl")


def deployment_dir() -> Path:
    """Where ``precompile`` writes and run-only mode reads: ``TORCH_FLYDSL_CACHE_DIR`` or the
    plugin's directory under Inductor's cache dir."""
    user = os.environ.get("TORCH_FLYDSL_CACHE_DIR")
    return Path(user).expanduser() if user else plugin_cache_root()


def flydsl_cache_dir() -> Path:
    deploy = os.environ.get("TORCH_FLYDSL_CACHE_DIR")
    if deploy:
        return Path(deploy).expanduser() / "flydsl"
    user = os.environ.get("FLYDSL_RUNTIME_CACHE_DIR")
    if user:
        return Path(user)
    return private_dir(plugin_cache_root() / "flydsl_cache")
