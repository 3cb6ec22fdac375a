"""vLLM on ROCm: layers whose shapes the dispatch table names run the plugin's FlyDSL kernels;
every other call runs exactly as vLLM does it.

Opt-in: ``TORCH_FLYDSL_VLLM=1`` (with ``VLLM_PLUGINS`` letting ``torch_flydsl`` load, and
``TORCH_FLYDSL_DISPATCH_TABLE`` naming the table). ``torch_flydsl_boot.vllm_register`` (the
``vllm.general_plugins`` entry point) calls ``install_fingerprint()`` and ``install_ray_env()``
in every vLLM process and ``install()`` when the knob is on; all are idempotent and thread-safe,
and nothing they do can fail vLLM (errors are logged).

The package, top to bottom (no module imports one beside or above it; ``test/test_layering.py``
checks):

- ``linear``: unquantized linear layers (vLLM's ``rocm_unquantized_gemm`` op, re-routed in the
  dispatcher) on the dense family;
- ``mx``: MXFP8 linear layers (a kernel class registered ahead of vLLM's native one) on the
  scaled family;
- ``mxfp4``: MXFP4 (W4A4) linear layers, opt-in (``TORCH_FLYDSL_VLLM_MXFP4=1``; kernel classes
  registered ahead of vLLM's AITER and emulation ones) on the scaled family;
- ``moe``: unquantized fused MoE (vLLM's ``CustomOp.register_oot``) on the grouped family;
- ``moe_mx``: MXFP8 fused MoE (vLLM's MXFP8 oracle's ``_select_kernel_cls``) on the scaled grouped
  family;
- ``cache_key``: the plugin's fingerprint in vLLM's compile-cache key;
- ``ray_env``: the plugin's variables among those vLLM copies to its Ray actors;
- ``mx_linear``: what the two MX linear routes share (their op's body, the table part of a layer's
  route decision);
- ``common``: what they all share (the knob, ``arm``, the guard around each call, the log lines,
  the MoE routes' row sort).

Each module's docstring describes its seam in vLLM 0.33.0 and what happens when a vLLM lacks it.
"""

from __future__ import annotations

from . import cache_key, common, linear, moe, moe_mx, mx, mxfp4, ray_env
from .cache_key import FINGERPRINT_KEY, fingerprint, install_fingerprint
from .common import KNOB, armed, enabled
from .linear import QUALNAME, installed
from .ray_env import install_ray_env

__all__ = ["FINGERPRINT_KEY", "KNOB", "QUALNAME", "armed", "enabled", "fingerprint", "install",
           "install_fingerprint", "install_ray_env", "installed"]


def install() -> bool:
    """Arm every re-route (and the cache-key fingerprint) when ``TORCH_FLYDSL_VLLM`` is on.
    Idempotent. Returns whether they are armed. Never raises for a vLLM it cannot hook: it logs."""
    if not enabled():
        return False
    install_fingerprint()
    install_ray_env()
    linear.install()
    mx.install()
    mxfp4.install()
    moe.install()
    moe_mx.install()
    return True


def _uninstall() -> None:
    """Give everything back to vLLM and disarm (tests): the re-routed keys, the MX linear kernel
    classes, the MoE method class and experts swap, and the fingerprint."""
    mx._uninstall()
    mxfp4._uninstall()
    moe._uninstall()
    moe_mx._uninstall()
    linear._uninstall()
    common.disarm_all()
    cache_key._uninstall()
