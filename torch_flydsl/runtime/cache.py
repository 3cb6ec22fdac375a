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


_CACHE_DIR_UTILS = "torch._inductor.runtime.cache_dir_utils"


def _inductor_cache_dir() -> Path:
    """Inductor's cache dir, by Inductor's own rule (``cache_dir_utils.cache_dir``). That module
    is dependency-free by design, but importing it the usual way runs ``torch._inductor``'s
    package init (Dynamo: seconds), which ``precompile``, ``doctor`` and an eager first call do
    not otherwise need: until the package is imported, its file is loaded on its own."""
    import sys

    module = sys.modules.get(_CACHE_DIR_UTILS)
    if module is None and "torch._inductor" not in sys.modules:
        module = _load_alone(_CACHE_DIR_UTILS)
    if module is None:
        import importlib

        module = importlib.import_module(_CACHE_DIR_UTILS)
    return Path(module.cache_dir())


_alone: dict = {}


def _load_alone(name: str):
    """``name``'s source file executed as a private module (not entered in ``sys.modules``), or
    None when it cannot be found that way."""
    hit = _alone.get(name)
    if hit is not None:
        return hit
    import importlib.util

    try:
        torch_spec = importlib.util.find_spec("torch")
        if torch_spec is None or torch_spec.origin is None:
            return None
        torch_dir = Path(torch_spec.origin).parent
        path = torch_dir.joinpath(*name.split(".")[1:]).with_suffix(".py")
        spec = importlib.util.spec_from_file_location(f"torch_flydsl._alone.{name}", path)
        if spec is None or spec.loader is None:
            return None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    except Exception:  # another torch layout: the ordinary import is only slower
        return None
    _alone[name] = module
    return module


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
