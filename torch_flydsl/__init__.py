"""torch-flydsl: FlyDSL kernels for AMD MI350 (gfx950) in stock PyTorch.

Importing this package is cheap and never imports flydsl or ``torch._inductor``.
Activation normally happens through the ``torch.backends`` entry point at ``import torch``;
``enable()`` does the same by hand (e.g. when ``TORCH_DEVICE_BACKEND_AUTOLOAD=0``).
"""

from ._version import __version__

__all__ = ["__version__", "disabled", "eager_enabled", "enable", "is_enabled", "explain_mm"]


def enable() -> bool:
    """Register the plugin's ops and arm its Inductor glue (idempotent)."""
    from ._autoload import enable as _enable

    return _enable()


def is_enabled() -> bool:
    from ._autoload import is_enabled as _is_enabled

    return _is_enabled()


def explain_mm(m: int, n: int, k: int, dtype="bf16", layout="nt", bias=False, breadth=None):
    """Which FlyDSL GEMM configs would be offered for this problem on gfx950, and why not others."""
    from .explain import explain_mm as _explain

    return _explain(m, n, k, dtype=dtype, layout=layout, bias=bias, breadth=breadth)


def disabled():
    """Context manager: within it (this thread), ops the plugin overrides eagerly run PyTorch's
    own kernels (for A/B comparisons); restores on exit."""
    from .eager import disabled as _disabled

    return _disabled()


def eager_enabled() -> bool:
    """Whether eager calls in this thread can reach FlyDSL kernels: the eager overrides are
    registered in this process (plugin on, ``TORCH_FLYDSL_EAGER`` not 0, a ROCm build or a CPU
    executor) and this thread is not inside ``disabled()``."""
    from .eager import eager_enabled as _eager_enabled

    return _eager_enabled()
