"""Version fingerprint that goes into every cache key the plugin influences."""

from __future__ import annotations

import functools


@functools.lru_cache(maxsize=None)
def fingerprint() -> tuple[str, ...]:
    from .._version import __version__
    from ..runtime.probe import flydsl_info
    from ..templates.dense_gemm.config import KERNEL_VERSION

    return ("torch_flydsl", __version__, "flydsl", str(flydsl_info().version), "dense_gemm", KERNEL_VERSION)


def fingerprint_str() -> str:
    return "/".join(fingerprint())
