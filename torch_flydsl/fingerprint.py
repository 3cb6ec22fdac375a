"""The plugin's version fingerprint: what goes into every cache key the plugin influences.

Inductor's FX-graph and autotuning caches (``inductor.choices``, ``inductor.extern``) and vLLM's
compile-cache key (``integrations.vllm.cache_key``) all carry it, so that a new plugin, a new
flydsl or a changed kernel never reuses what an older one compiled or timed. It reads the
registry (each family's ``KERNEL_VERSION``) and the flydsl probe; nothing of Inductor.
"""

from __future__ import annotations

import functools


@functools.lru_cache(maxsize=None)
def fingerprint() -> tuple[str, ...]:
    from ._version import __version__
    from .registry import families
    from .runtime.probe import flydsl_info

    kernels = tuple(x for f in families() for x in (f.name, f.kernel_version))
    return ("torch_flydsl", __version__, "flydsl", str(flydsl_info().version)) + kernels


def fingerprint_str() -> str:
    return "/".join(fingerprint())
