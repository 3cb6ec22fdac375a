"""vLLM on ROCm, opt-in: MXFP4 linear layers (W4A4: MXFP4 weights, activations quantized to MXFP4
per call) whose ``[N, K]`` the dispatch table names run the plugin's MX scaled GEMM for the M it
names; every other layer and every other M keeps vLLM's own MXFP4 kernel, called unchanged.

Armed with the other re-routes (``TORCH_FLYDSL_VLLM=1``) and off unless ``TORCH_FLYDSL_VLLM_MXFP4=1``
as well: unlike the MXFP8 route, this one computes its own activation quantization (below) and
may keep a second copy of a routed layer's weights.

The seam (vLLM 0.33.0)
----------------------
An MXFP4 linear layer (Quark/compressed-tensors OCP MX W4A4) asks
``vllm.model_executor.kernels.linear.init_mxfp4_linear_kernel`` for a kernel object; that walks
``_POSSIBLE_MXFP4_KERNELS[ROCM]`` (``Rdna3W4A8MxFp4LinearKernel``, ``AiterMxfp4LinearKernel``,
``EmulationMxfp4LinearKernel``) and takes the first whose ``is_supported``,
``_supports_quant_scheme`` and ``can_implement`` pass. On gfx950 with AITER that is AITER's
kernel: at load it either pre-shuffles weight and scales for AITER's ASM GEMM (where AITER has
tuned the shape) or transposes the scales for its Triton GEMM, and per call it quantizes the
activations with AITER's own quantizer. Without AITER it is the emulation kernel (quantize and
dequantize the activations, dequantize the weight, a bf16 ``F.linear``).

The plugin registers, through vLLM's public ``register_linear_kernel(cls, ROCM, "mxfp4")``, a
subclass of each of those two (``FlyDSLAiterMxfp4LinearKernel``,
``FlyDSLEmulationMxfp4LinearKernel``) and moves each just ahead of its base. Each subclass is its
base (support checks, weight processing and every unrouted call are inherited), except:

- ``process_weights_after_loading`` first takes the checkpoint's weights as they are, before the
  base pre-shuffles or transposes them (packed E2M1 ``uint8 [N, K/2]``, E8M0 ``uint8 [N, K/32]``),
  decides whether the table routes the layer, and for a routed layer keeps those two tensors
  (non-persistent buffers ``torch_flydsl_weight`` / ``torch_flydsl_weight_scale``; where the
  base replaced them, that is a second copy, logged at load with its size);
- ``apply_weights`` of a routed layer calls ``torch.ops.torch_flydsl.vllm_mxfp4_linear``, an
  opaque op (M stays symbolic in vLLM's compiled graphs) which looks M up in the table. A hit
  quantizes the activations (below) and runs the scaled family's ``scaled_mm_out`` on the kept
  weights, bias added in the epilogue (vLLM adds it after rounding: at most one bf16 ulp apart); a
  miss, or a kernel that cannot run here, calls the base's ``apply_weights`` on the base's
  weights with the layer's own kernel object.

A layer is routed when its weight and scales have those shapes, K is a multiple of 128, its
activations are quantized to MXFP4 (``kMxfp4Dynamic``; weight-only and MXFP6-activation layers
keep vLLM's path), ``VLLM_BATCH_INVARIANT`` is off, and the table names its ``[N, K]`` for
``scaled_mm`` ``mxfp4`` (or ``TORCH_FLYDSL_RECORD_SHAPES`` is set: then every call is recorded).

Activation quantization: ``templates.scaled_gemm.quantize`` states the rule (OCP MX v1.0 with
the block maximum rounded as vLLM's and AITER's quantizers round it, E2M1 round-to-nearest-even,
saturating). On a GPU the call runs vLLM's own portable Triton quantizer
(``mxfp4_utils.downcast_to_mxfp``, one kernel), which implements that rule; elsewhere (the
emulator, tests) the plugin's torch version. ``benchmarks/mxfp4_quantizer_compare.py`` measures the
two against each other.

``--linear-backend``, ``VLLM_DISABLED_KERNELS=<class name>`` or a vLLM lacking any of these names
(a warning) leave vLLM's kernels alone.
"""

from __future__ import annotations

import logging
import sys
import threading
import types
from typing import Any, Optional

from ... import config
from ..._log import log
from . import mx_linear
from .common import KNOB, _say, arm, armed, enabled, require_seam

OPT_IN = "TORCH_FLYDSL_VLLM_MXFP4"
KERNELS_MODULE = "vllm.model_executor.kernels.linear"
BASES = (("vllm.model_executor.kernels.linear.mxfp4.aiter", "AiterMxfp4LinearKernel"),
         ("vllm.model_executor.kernels.linear.mxfp4.emulation", "EmulationMxfp4LinearKernel"))
QUANT_MODULE = "vllm.model_executor.layers.quantization.utils.mxfp4_utils"
QUANT_KEYS_MODULE = "vllm.model_executor.layers.quantization.utils.quant_utils"
OP_NAME = "vllm_mxfp4_linear"
FORMAT = "mxfp4"  # the dispatch table's scaled_mm dtype for E2M1 activations x E2M1 weights
ROUTE_ATTR = "torch_flydsl_mxfp4_kernel"  # set on each routed layer at load: its kernel's index
WEIGHT, SCALE = "torch_flydsl_weight", "torch_flydsl_weight_scale"
ARM_NAME = "mxfp4"

_lock = threading.Lock()


class _State:
    lib: Any = None  # the torch.library.Library defining OP_NAME
    classes: dict = {}  # base class -> its FlyDSL subclass, once registered
    kernels: list = []  # the kernel objects of routed layers, by ROUTE_ATTR index (their misses)
    triton_quantize: Any = None  # vLLM's downcast_to_mxfp (None: this vLLM lacks it)
    dynamic_key: Any = None  # vLLM's kMxfp4Dynamic
    registry: Any = None  # the kernels list the classes were inserted into
    kept_bytes = 0  # weight bytes routed layers hold beside the base's copy


state = _State()


def opted_in() -> bool:
    """``TORCH_FLYDSL_VLLM_MXFP4`` (default off)."""
    return config.vllm_mxfp4()


def install() -> None:
    """Arm the MXFP4 re-route (idempotent): registers the kernel classes when vLLM's linear-kernel
    module has executed. Called by ``integrations.vllm.install`` (``TORCH_FLYDSL_VLLM=1``); the
    classes decline unless ``TORCH_FLYDSL_VLLM_MXFP4=1``."""
    arm(ARM_NAME, KERNELS_MODULE, _register, "MXFP4 linear layers not re-routed, vLLM's own MXFP4 kernels serve them")


def installed() -> bool:
    return bool(state.classes)


# -- registration ----------------------------------------------------------------------------


def _register() -> None:
    import importlib

    linear = sys.modules[KERNELS_MODULE]
    from vllm.platforms import PlatformEnum

    bases: dict = {}
    for module, name in BASES:
        try:
            bases[f"{module}.{name}"] = getattr(importlib.import_module(module), name, None)
        except ImportError:
            bases[f"{module}.{name}"] = None
    table: Any = getattr(linear, "_POSSIBLE_MXFP4_KERNELS", None)
    register: Any = getattr(linear, "register_linear_kernel", None)
    keys: Any = importlib.import_module(QUANT_KEYS_MODULE)
    require_seam("MXFP4 re-route", {**bases, f"{KERNELS_MODULE}._POSSIBLE_MXFP4_KERNELS": table,
                                    f"{KERNELS_MODULE}.register_linear_kernel": register,
                                    f"{QUANT_KEYS_MODULE}.kMxfp4Dynamic": getattr(keys, "kMxfp4Dynamic", None)})
    try:
        triton_quantize = getattr(importlib.import_module(QUANT_MODULE), "downcast_to_mxfp", None)
    except ImportError:
        triton_quantize = None
    with _lock:
        if state.classes or not armed(ARM_NAME):  # registered, or disarmed since (tests)
            return
        _define_op()
        kernels = table.setdefault(PlatformEnum.ROCM, [])
        classes = {}
        for base in bases.values():
            cls = _kernel_class(base)
            register(cls, PlatformEnum.ROCM, "mxfp4")
            kernels.remove(cls)
            kernels.insert(kernels.index(base) if base in kernels else len(kernels), cls)
            classes[base] = cls
        state.classes, state.registry = classes, kernels
        state.triton_quantize, state.dynamic_key = triton_quantize, keys.kMxfp4Dynamic
    log.info("torch_flydsl: %s registered ahead of vLLM's MXFP4 kernels (active with %s=1): MXFP4 layers whose "
             "[N, K] the dispatch table names run FlyDSL for the M it names", ", ".join(c.__name__ for c in classes.values()),
             OPT_IN)


def _uninstall() -> None:
    """Take the kernel classes out of vLLM's list (tests). The op stays defined."""
    with _lock:
        if state.registry is not None:
            for cls in state.classes.values():
                if cls in state.registry:
                    state.registry.remove(cls)
        state.classes, state.registry, state.kernels, state.kept_bytes = {}, None, [], 0


def _define_op() -> None:
    import torch

    if state.lib is not None:
        return
    lib = torch.library.Library("torch_flydsl", "FRAGMENT")
    lib.define(f"{OP_NAME}(Tensor x, Tensor weight, Tensor weight_scale, Tensor base_weight, "
               "Tensor base_weight_scale, int kernel, Tensor? bias=None) -> Tensor")
    lib.impl(OP_NAME, _op_impl, "CompositeExplicitAutograd")
    torch.library.register_fake(f"torch_flydsl::{OP_NAME}", _op_fake, lib=lib)
    state.lib = lib


def _op_fake(x, weight, weight_scale, base_weight, base_weight_scale, kernel, bias=None):
    return x.new_empty((x.shape[0], weight.shape[0]))


# -- the kernel classes --------------------------------------------------------------------------


def routable(weight, weight_scale, activation_key) -> Optional[str]:
    """Why a layer keeps the base's path whatever M (None: the table decides per call).
    ``weight``/``weight_scale`` are the checkpoint's, before the base processes them."""
    import torch

    if not opted_in():
        return f"{OPT_IN} is off"
    if activation_key != state.dynamic_key:
        return f"activations are not quantized to MXFP4 per call (activation key {activation_key})"
    if weight.dim() != 2 or weight.dtype != torch.uint8:
        return f"weight is {weight.dtype} {list(weight.shape)}, not packed E2M1 uint8 [N, K/2]"
    n, k = weight.shape[0], 2 * weight.shape[1]
    if weight_scale.dtype != torch.uint8 or tuple(weight_scale.shape) != (n, k // 32):
        return f"weight scales are {weight_scale.dtype} {list(weight_scale.shape)}, not E8M0 uint8 [N, K/32]"
    return mx_linear.route_by_table(FORMAT, n, k)


def _kernel_class(base: type) -> type:
    import torch

    op = getattr(torch.ops.torch_flydsl, OP_NAME)

    class FlyDSLMxfp4LinearKernel(base):  # type: ignore[misc, valid-type, unused-ignore]
        """vLLM's MXFP4 linear kernel, with the layers the torch_flydsl dispatch table names
        served by FlyDSL's MX scaled GEMM (``torch_flydsl.integrations.vllm.mxfp4``)."""

        @classmethod
        def is_supported(cls, compute_capability=None):
            if not enabled():
                return False, f"{KNOB} is off"
            if not opted_in():
                return False, f"{OPT_IN} is off"
            return super().is_supported(compute_capability)

        def process_weights_after_loading(self, layer):
            weight, scale = layer.weight.data, layer.weight_scale.data
            try:
                why = routable(weight, scale, getattr(self.config, "activation_quant_key", None))
            except Exception as e:  # noqa: BLE001 - a bug of ours must never fail vLLM's model load
                why = f"{type(e).__name__}: {e}"
            super().process_weights_after_loading(layer)
            if why is None:
                try:
                    _keep(layer, self, weight, scale)
                except Exception as e:  # noqa: BLE001 - the layer stays on vLLM's kernel, the load goes on
                    why = f"{type(e).__name__}: {e}"
            _say(logging.DEBUG, ("mxfp4 layer", tuple(weight.shape), why), "%s [N, K/2]=%s: %s", type(self).__name__,
                 list(weight.shape), "FlyDSL for the M the table names" if why is None else f"vLLM's kernel: {why}")

        def apply_weights(self, layer, x, bias=None):
            index = getattr(layer, ROUTE_ATTR, None)
            if index is None:
                return super().apply_weights(layer, x, bias)
            fly_w, fly_s = getattr(layer, WEIGHT), getattr(layer, SCALE)
            k = 2 * fly_w.shape[1]
            out = op(x.reshape(-1, k), fly_w, fly_s, layer.weight, layer.weight_scale, index, bias)
            return out.reshape(*x.shape[:-1], fly_w.shape[0])

    FlyDSLMxfp4LinearKernel.__name__ = FlyDSLMxfp4LinearKernel.__qualname__ = f"FlyDSL{base.__name__}"
    FlyDSLMxfp4LinearKernel.__module__ = __name__
    return FlyDSLMxfp4LinearKernel


def _keep(layer, kernel, weight, scale) -> None:
    """Keep the checkpoint's weight and scales on a routed layer, and its kernel for misses."""
    extra = sum(t.numel() * t.element_size() for t, now in ((weight, layer.weight), (scale, layer.weight_scale))
                if t.data_ptr() != now.data_ptr())
    layer.register_buffer(WEIGHT, weight, persistent=False)
    layer.register_buffer(SCALE, scale, persistent=False)
    with _lock:
        setattr(layer, ROUTE_ATTR, len(state.kernels))
        state.kernels.append(kernel)
        state.kept_bytes += extra
        total = state.kept_bytes
    if extra:
        log.info("torch_flydsl: MXFP4 layer [N, K/2]=%s keeps the checkpoint's weights beside %s's processed copy "
                 "(%.1f MiB; %.1f MiB over all routed layers)", list(weight.shape), type(kernel).__name__,
                 extra / 2**20, total / 2**20)


# -- the op's body ---------------------------------------------------------------------------------


def quantize(x):
    """``x [M, K]`` -> packed E2M1 ``[M, K/2]`` and E8M0 codes ``[M, K/32]`` (uint8 both): vLLM's
    Triton quantizer on a GPU, the plugin's torch version of the same rule elsewhere."""
    if x.is_cuda and state.triton_quantize is not None:
        values, scales, _ = state.triton_quantize(x, axis=-1)
        return values, scales
    from ...templates.scaled_gemm.quantize import mxfp4_quantize

    return mxfp4_quantize(x)


def _op_impl(x, weight, weight_scale, base_weight, base_weight_scale, kernel, bias=None):
    def miss():
        owner = state.kernels[kernel]  # the routed layer's own kernel object, a FlyDSL subclass
        base_layer = types.SimpleNamespace(weight=base_weight, weight_scale=base_weight_scale)
        return super(type(owner), owner).apply_weights(base_layer, x, bias)

    return mx_linear.run(OP_NAME, FORMAT, quantize, miss, x, weight, weight_scale, bias)
