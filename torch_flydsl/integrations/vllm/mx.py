"""vLLM on ROCm: MXFP8 linear layers whose ``[N, K]`` weight the dispatch table names run the
plugin's MX scaled GEMM for the token counts (M) the table names; every other layer and every
other M keeps vLLM's own MXFP8 kernel, called unchanged.

Armed with the dense re-route (``torch_flydsl.integrations.vllm.install``, ``TORCH_FLYDSL_VLLM=1``).

The seam (vLLM 0.33.0)
----------------------
An MXFP8 linear layer (ModelOpt, compressed-tensors W8A8-MXFP8, online MXFP8) asks
``vllm.model_executor.kernels.linear.init_mxfp8_linear_kernel`` for a kernel object; that walks
``_POSSIBLE_MXFP8_KERNELS[platform]`` in priority order and takes the first class whose
``is_supported()`` and ``can_implement()`` pass (after ``--linear-backend`` filtering and
``VLLM_DISABLED_KERNELS``). On gfx950 the first is ``RocmDotScaledMxfp8LinearKernel``
(``mxfp8/rocm_native.py``): FP8-E4M3 weights ``[N, K]`` with row-major E8M0 scales
``[N, K/32]`` (uint8), activations quantized per token by vLLM's ``mxfp8_quantize`` op, then a
Triton ``dot_scaled`` GEMM. That is exactly the scaled family's contract (A ``[M, K]``
row-major, B = ``W.T`` column-major, scales per 32 K values).

The plugin registers ``FlyDSLMxfp8LinearKernel``, a subclass of vLLM's class, through vLLM's
public ``register_linear_kernel(cls, PlatformEnum.ROCM, "mxfp8")`` and moves it just ahead of
its base in that list (``register_linear_kernel`` appends, and the base always accepts; the list
is module state, not source: nothing of vLLM's code changes). The subclass is vLLM's kernel:
``is_supported`` / ``can_implement`` / ``process_weights_after_loading`` are inherited (so the
weights keep vLLM's layout, and the class is skipped with the base wherever the base would be),
and ``apply_weights`` calls the base's unless, when the weights were loaded
(``process_weights_after_loading``, which records the decision on the layer so that
``apply_weights`` stays a plain attribute check for ``torch.compile(fullgraph=True)``):

- the layer is on the plain path (fp8 ``[N, K]`` weight, one uint8 scale row per weight row,
  K % 128 == 0: what the base serves with ``dot_scaled``; 32x32 block-scaled DeepSeek weights
  and weights the base dequantized to bf16 keep the base's path), and
- the dispatch table names this ``[N, K]`` for ``scaled_mm`` ``mxfp8`` (any M), or
  ``TORCH_FLYDSL_RECORD_SHAPES`` is set (the op records every call, then misses to vLLM's
  kernel where the table has no entry), and
- ``VLLM_BATCH_INVARIANT`` is off (a per-M table choice is not batch invariant).

Those layers call ``torch.ops.torch_flydsl.vllm_mxfp8_linear(x2d, weight, weight_scale, bias)``,
an opaque op (a fake kernel for tracing: vLLM's compiled graphs hold it, M stays symbolic;
layers whose weights arrive pre-processed, without ``process_weights_after_loading``, keep the
base's path). At run time it looks M up: a hit quantizes ``x`` with vLLM's own ``mxfp8_e4m3_quantize`` and runs
the scaled family's ``scaled_mm_out`` through ``ops.try_run`` (bias in the epilogue;
``mx_linear.serve``, shared with the MXFP4 route); a miss,
or a kernel that cannot run here (reason logged once at debug), calls the base's
``apply_weights`` on the same weights, unchanged. The per-layer decision is made at load, so
the weights the table names for ``scaled_mm`` go into vLLM's compile-cache key
(``integrations.vllm.cache_key``: ``routed-at-load``): naming a new weight never reuses a graph
traced without the op.

With ``--linear-backend`` set, vLLM keeps only the backend's classes and this one drops out;
``VLLM_DISABLED_KERNELS=FlyDSLMxfp8LinearKernel`` also turns it off. A vLLM without
``register_linear_kernel``, ``_POSSIBLE_MXFP8_KERNELS`` or ``RocmDotScaledMxfp8LinearKernel``
gets a warning and its own kernels.

MXFP4 linear layers: ``integrations.vllm.mxfp4`` (opt-in). Fused MoE: ``integrations.vllm.moe``.
"""

from __future__ import annotations

import logging
import sys
import threading
import types
from typing import Any, Optional

from ..._log import log
from . import mx_linear
from .common import KNOB, _say, arm, armed, enabled, require_seam

KERNELS_MODULE = "vllm.model_executor.kernels.linear"
NATIVE_MODULE = "vllm.model_executor.kernels.linear.mxfp8.rocm_native"
QUANT_MODULE = "vllm.model_executor.layers.quantization.utils.mxfp8_utils"
BASE_NAME = "RocmDotScaledMxfp8LinearKernel"
KERNEL_NAME = "FlyDSLMxfp8LinearKernel"
OP_NAME = "vllm_mxfp8_linear"
FORMAT = "mxfp8"  # the dispatch table's scaled_mm dtype for e4m3 activations x e4m3 weights
K_ALIGN = mx_linear.K_ALIGN  # the base serves fp8 weights with dot_scaled only when K % 128 == 0
ROUTE_ATTR = "torch_flydsl_mx_route"  # set on each layer at load: whether the table decides per call

_lock = threading.Lock()
ARM_NAME = "mxfp8"  # its name for common.arm


class _State:
    lib: Any = None  # the torch.library.Library defining OP_NAME
    kernel_class: Optional[type] = None  # FlyDSLMxfp8LinearKernel once registered
    base: Optional[type] = None  # vLLM's RocmDotScaledMxfp8LinearKernel
    miss_self: Any = None  # a bare base instance its apply_weights runs on for a miss
    quantize: Any = None  # vLLM's mxfp8_e4m3_quantize
    registry: Any = None  # (the kernels list, PlatformEnum.ROCM) it was inserted into


state = _State()


def install() -> None:
    """Arm the MXFP8 re-route (idempotent): registers the kernel class when vLLM's linear-kernel
    module has executed. Called by ``integrations.vllm.install`` (``TORCH_FLYDSL_VLLM=1``)."""
    arm(ARM_NAME, KERNELS_MODULE, _register, "MXFP8 linear layers not re-routed, vLLM's own MXFP8 kernels serve them")


def installed() -> bool:
    return state.kernel_class is not None


# -- registration ----------------------------------------------------------------------------


def _register() -> None:
    import importlib

    linear = sys.modules[KERNELS_MODULE]
    native = importlib.import_module(NATIVE_MODULE)
    quant = importlib.import_module(QUANT_MODULE)
    from vllm.platforms import PlatformEnum

    # vLLM's names (untyped: Any), None where this vLLM lacks one; require_seam raises on a None.
    base: Any = getattr(native, BASE_NAME, None)
    table: Any = getattr(linear, "_POSSIBLE_MXFP8_KERNELS", None)
    register: Any = getattr(linear, "register_linear_kernel", None)
    quantize: Any = getattr(quant, "mxfp8_e4m3_quantize", None)
    require_seam("MXFP8 re-route", {f"{NATIVE_MODULE}.{BASE_NAME}": base,
                                    f"{KERNELS_MODULE}._POSSIBLE_MXFP8_KERNELS": table,
                                    f"{KERNELS_MODULE}.register_linear_kernel": register,
                                    f"{QUANT_MODULE}.mxfp8_e4m3_quantize": quantize})
    with _lock:
        if state.kernel_class is not None or not armed(ARM_NAME):  # registered, or disarmed since (tests)
            return
        _define_op()
        cls = _kernel_class(base)
        register(cls, PlatformEnum.ROCM, "mxfp8")
        kernels = table[PlatformEnum.ROCM]
        kernels.remove(cls)
        kernels.insert(kernels.index(base) if base in kernels else 0, cls)
        state.base, state.kernel_class, state.quantize = base, cls, quantize
        state.miss_self = base.__new__(base)
        state.registry = (kernels, PlatformEnum.ROCM)
    log.info("torch_flydsl: %s registered ahead of vLLM's %s: MXFP8 layers whose [N, K] the dispatch table "
             "names run FlyDSL for the M it names, everything else runs vLLM's kernel", KERNEL_NAME, BASE_NAME)


def _uninstall() -> None:
    """Take the kernel class out of vLLM's list (tests; ``integrations.vllm._uninstall``
    disarms). The op stays defined."""
    with _lock:
        if state.registry is not None:
            kernels, _ = state.registry
            if state.kernel_class in kernels:
                kernels.remove(state.kernel_class)
        state.kernel_class = state.registry = None


def _define_op() -> None:
    import torch

    if state.lib is not None:
        return
    lib = torch.library.Library("torch_flydsl", "FRAGMENT")
    lib.define(f"{OP_NAME}(Tensor x, Tensor weight, Tensor weight_scale, Tensor? bias=None) -> Tensor")
    lib.impl(OP_NAME, _op_impl, "CompositeExplicitAutograd")
    torch.library.register_fake(f"torch_flydsl::{OP_NAME}", _op_fake, lib=lib)
    state.lib = lib


def _op_fake(x, weight, weight_scale, bias=None):
    return x.new_empty((x.shape[0], weight.shape[0]))


# -- the kernel class ----------------------------------------------------------------------------


def routable(weight, weight_scale) -> Optional[str]:
    """Why a layer keeps the base's path whatever M (None: the table decides per call)."""
    import torch

    if weight.dim() != 2 or weight.dtype != torch.float8_e4m3fn:
        return f"weight is {weight.dtype} {list(weight.shape)}, not an fp8 e4m3 [N, K]"
    n, k = weight.shape
    if weight_scale.dtype != torch.uint8 or weight_scale.dim() != 2 or weight_scale.shape[0] != n:
        return "block-scaled weight (not one E8M0 scale row per weight row)"
    return mx_linear.route_by_table(FORMAT, n, k)


def _kernel_class(base: type) -> type:
    import torch

    op = getattr(torch.ops.torch_flydsl, OP_NAME)

    class FlyDSLMxfp8LinearKernel(base):  # type: ignore[misc, valid-type, unused-ignore]
        """vLLM's native gfx950 MXFP8 linear kernel, with the layers the torch_flydsl dispatch
        table names served by FlyDSL's MX scaled GEMM (``torch_flydsl.integrations.vllm.mx``)."""

        @classmethod
        def is_supported(cls, compute_capability=None):
            if not enabled():
                return False, f"{KNOB} is off"
            return super().is_supported(compute_capability)

        def process_weights_after_loading(self, layer):
            super().process_weights_after_loading(layer)
            try:
                why = routable(layer.weight, layer.weight_scale)
            except Exception as e:  # noqa: BLE001 - a bug of ours must never fail vLLM's model load
                why = f"{type(e).__name__}: {e}"
            setattr(layer, ROUTE_ATTR, why is None)
            _say(logging.DEBUG, ("layer", tuple(layer.weight.shape), why), "%s [N, K]=%s: %s", KERNEL_NAME,
                 list(layer.weight.shape), "FlyDSL for the M the table names" if why is None else
                 f"vLLM's kernel: {why}")

        def apply_weights(self, layer, x, bias=None):
            if not getattr(layer, ROUTE_ATTR, False):
                return super().apply_weights(layer, x, bias)
            n, k = layer.weight.shape
            out = op(x.reshape(-1, k), layer.weight, layer.weight_scale, bias)
            return out.reshape(*x.shape[:-1], n)

    FlyDSLMxfp8LinearKernel.__module__ = __name__
    return FlyDSLMxfp8LinearKernel


# -- the op's body ---------------------------------------------------------------------------------


def _op_impl(x, weight, weight_scale, bias=None):
    def miss():
        layer = types.SimpleNamespace(weight=weight, weight_scale=weight_scale)
        return state.base.apply_weights(state.miss_self, layer, x, bias)

    return mx_linear.run(OP_NAME, FORMAT, state.quantize, miss, x, weight, weight_scale, bias)
