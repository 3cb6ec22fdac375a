"""The ``vLLM`` baseline column: what vLLM itself runs for the call that a dispatch-table hit
would take over (the plugin's vLLM re-routes, ``torch_flydsl.integrations.vllm``). Read from
vLLM 0.33.0's sources; present only where vLLM imports (``status``), else absent with the reason.

- ``bench mm``: ``torch.ops.vllm.rocm_unquantized_gemm(x, weight, bias)`` (vLLM's op for every
  unquantized linear layer on ROCm, ``vllm/model_executor/layers/utils.py``). Inside it vLLM picks
  per call: a batch-invariant linear (``VLLM_BATCH_INVARIANT``), ``wvSplitKrc`` (gfx950, 10 <= M
  <= 128, K > 512, K % 8 == 0, N % 16 == 0, when its CU budget fits), AITER's Triton GEMM (AITER
  on, for the (N, K) its list names), ``wvSplitK`` (M <= 5), ``LLMM1`` (M == 1, no bias), AITER's
  ``tgemm`` (AITER linear on, gfx950), else ``F.linear`` (hipBLASLt). ``expected_dense`` says
  which one it expects for a shape under the environment as read (``env_values``); the column
  times whatever vLLM's op runs. Where this process has the plugin's re-route installed, vLLM's
  own ``rocm_unquantized_gemm_impl`` is called instead, so that the column never times FlyDSL.
- ``bench scaled_mm`` (``mxfp8``): ``RocmDotScaledMxfp8LinearKernel.apply_weights(layer, x)``,
  vLLM's native gfx950 MXFP8 linear (vLLM's quantizer ``mxfp8_e4m3_quantize`` on the bf16
  activations, then its Triton ``dot_scaled`` GEMM), on a layer built as vLLM's loader leaves it
  (``process_weights_after_loading`` run once). A table hit runs vLLM's same quantizer and then
  FlyDSL's GEMM, so FlyDSL's side of this comparison is the quantizer's time (``vllm_quant_ms``,
  timed alone) plus FlyDSL's GEMM: ``flydsl_hit_ms``.
- ``bench grouped_mm``: vLLM's fused-MoE Triton kernel (``invoke_fused_moe_triton_kernel``), the
  kernel ``TritonExperts.apply`` runs for each of a MoE call's two GEMMs, with the config it would
  pick for the call (``try_get_optimal_moe_config`` on W13 ``[G, 2I, H]``, W2 ``[G, H, I]``, top-k
  and the token count) and its expert assignment (``_prepare_expert_assignment``) made once,
  outside the timed call. It runs on the case's routed rows as vLLM's second GEMM does (one row
  per (token, expert) slot, top-k 1); vLLM's first GEMM reads each token's row once per slot
  instead, the same FLOPs and weights. The plugin's own routing prep (its sort) is not timed
  either.

Nothing here imports vLLM at module level.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import os
import sys
from typing import Any, Callable, Optional

UTILS = "vllm.model_executor.layers.utils"
MX_NATIVE = "vllm.model_executor.kernels.linear.mxfp8.rocm_native"
MX_CONFIG = "vllm.model_executor.kernels.linear.mxfp8.Mxfp8LinearKernel"
MX_QUANT = "vllm.model_executor.layers.quantization.utils.mxfp8_utils"
FUSED_MOE = "vllm.model_executor.layers.fused_moe.fused_moe"
LINEAR = "vllm.model_executor.kernels.linear"
QUANT_KEYS = "vllm.model_executor.layers.quantization.utils.quant_utils"
MX4_QUANT = "vllm.model_executor.layers.quantization.utils.mxfp4_utils"
CHECKED = "0.33"  # the vLLM release whose sources this module was written against
MI355X_CUS = 256  # what the plan assumes where no GPU says (8 XCDs x 32 CUs)

# What each suite's column needs: (module, attribute) pairs.
SEAMS = {
    "mm": ((UTILS, "rocm_unquantized_gemm_impl"),),
    "scaled_mm": ((MX_NATIVE, "RocmDotScaledMxfp8LinearKernel"), (MX_CONFIG, "Mxfp8LinearLayerConfig"),
                  (MX_QUANT, "mxfp8_e4m3_quantize")),
    "scaled_mm:mxfp4": ((LINEAR, "init_mxfp4_linear_kernel"), (QUANT_KEYS, "kMxfp4Dynamic"),
                        (MX4_QUANT, "downcast_to_mxfp")),
    "grouped_mm": ((FUSED_MOE, "invoke_fused_moe_triton_kernel"), (FUSED_MOE, "try_get_optimal_moe_config"),
                   (FUSED_MOE, "_prepare_expert_assignment")),
}
# The variables that steer vLLM's kernel choice for these calls, always listed; any other
# VLLM_ROCM_USE_AITER* that is set is listed too.
ENV_NAMES = ("VLLM_ROCM_USE_AITER", "VLLM_ROCM_USE_AITER_LINEAR", "VLLM_ROCM_USE_AITER_TRITON_GEMM",
             "VLLM_ROCM_USE_AITER_MOE", "VLLM_ROCM_USE_SKINNY_GEMM", "VLLM_BATCH_INVARIANT")
# What the column times, per suite (the plan's header says it once).
WHAT = {
    "mm": "torch.ops.vllm.rocm_unquantized_gemm(x, weight), vLLM's op for every unquantized linear on ROCm "
          "(the kernel each shape is expected to get is named per shape)",
    "scaled_mm": "mxfp8: vLLM's RocmDotScaledMxfp8LinearKernel.apply_weights on bf16 activations (its "
                 "mxfp8_e4m3_quantize, then its Triton dot_scaled GEMM); mxfp4: the W4A4 kernel vLLM picks "
                 "(AITER's where AITER is installed, else its emulation), its apply_weights on bf16 activations; "
                 "FlyDSL's side of each is the re-route's quantizer plus FlyDSL's GEMM, what a table hit runs",
    "grouped_mm": "vLLM's fused-MoE Triton kernel with the config TritonExperts picks for the call, per expert "
                  "GEMM (B col-major only); routing prep untimed on both sides",
}


def _short(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}".splitlines()[0][:200]


@functools.lru_cache(maxsize=None)
def _import() -> Optional[str]:
    """Why vLLM does not import here (None: it does)."""
    if importlib.util.find_spec("vllm") is None:
        return "vllm is not installed in this Python"
    try:
        importlib.import_module("vllm")
    except Exception as e:  # a broken install
        return f"vllm does not import ({_short(e)})"
    return None


@functools.lru_cache(maxsize=None)
def status(op: str) -> Optional[str]:
    """Why ``op``'s suite has no vLLM column here (None: it has one)."""
    why = _import()
    if why is not None:
        return why
    if op not in SEAMS:
        return f"vLLM runs no {op} that a dispatch-table hit would replace"
    for module, name in SEAMS[op]:
        try:
            found = getattr(importlib.import_module(module), name, None)
        except Exception as e:  # vLLM's module imports something this install lacks
            return f"{module} does not import ({_short(e)})"
        if found is None:
            return f"this vLLM ({version()}) has no {module}.{name} (read from vLLM {CHECKED}'s sources)"
    if op == "mm":
        import torch

        if not hasattr(torch.ops.vllm, "rocm_unquantized_gemm"):
            return "this vLLM registers no torch.ops.vllm.rocm_unquantized_gemm"
    return None


def version() -> str:
    return str(getattr(sys.modules.get("vllm"), "__version__", "?"))


# -- the environment vLLM reads ------------------------------------------------------------------


def env_values() -> dict:
    """``{name: (as set in the environment or None, the value vLLM reads)}`` for ``ENV_NAMES``
    and every other ``VLLM_ROCM_USE_AITER*`` that is set; ``aiter``: whether AITER imports."""
    import vllm.envs as envs

    names = list(ENV_NAMES) + sorted(n for n in os.environ if n.startswith("VLLM_ROCM_USE_AITER")
                                     and n not in ENV_NAMES)
    out: dict = {}
    for name in names:
        try:
            value: Any = getattr(envs, name)
        except Exception as e:  # a name this vLLM does not know
            value = f"unknown to vLLM {version()} ({type(e).__name__})"
        out[name] = (os.environ.get(name), value)
    out["aiter"] = (None, importlib.util.find_spec("aiter") is not None)
    return out


def _aiter(values: dict, *names: str) -> bool:
    return bool(values["aiter"][1]) and all(values[n][1] is True for n in ("VLLM_ROCM_USE_AITER", *names))


def env_line(values: Optional[dict] = None) -> str:
    """The environment as vLLM reads it, and what it selects: one line."""
    values = env_values() if values is None else values
    parts = [f"{n}={v!r} ({'unset' if raw is None else f'set to {raw!r}'})" for n, (raw, v) in values.items()
             if n != "aiter"]
    linear = "on" if _aiter(values, "VLLM_ROCM_USE_AITER_LINEAR") else "off"
    moe = "on" if _aiter(values, "VLLM_ROCM_USE_AITER_MOE") else "off"
    aiter = "installed" if values["aiter"][1] else "not installed"
    return (f"vLLM {version()} environment as read: {', '.join(parts)}; aiter {aiter}: AITER linear kernels {linear}, "
            f"AITER fused MoE {moe}")


def aiter_moe_on(values: Optional[dict] = None) -> bool:
    """Whether vLLM would run AITER's fused MoE (which the plugin's MoE re-route leaves alone)."""
    return _aiter(env_values() if values is None else values, "VLLM_ROCM_USE_AITER_MOE")


# -- which kernel vLLM is expected to run for an unquantized linear ---------------------------------


def cu_count() -> int:
    """The GPU's compute units (what vLLM's ``num_compute_units`` reads), or MI355X's 256 off it."""
    import torch

    if torch.cuda.is_available():
        return int(torch.cuda.get_device_properties(0).multi_processor_count)
    return MI355X_CUS


def _wvsplitkrc_fits(m: int, n: int, k: int, cus: int) -> Optional[bool]:
    """vLLM's own answer (``wvsplitkrc_dispatch``) whether wvSplitKrc's CU budget and workspace
    take this shape; None where this vLLM has no such function."""
    fn = getattr(sys.modules.get(UTILS) or importlib.import_module(UTILS), "wvsplitkrc_dispatch", None)
    if fn is None:
        return None
    return bool(fn(m, k, n, cus)[1])  # vLLM names tokens n and weight rows m


def expected_dense(m: int, n: int, k: int, half: bool = True, bias: bool = False, cus: Optional[int] = None,
                   values: Optional[dict] = None) -> str:
    """The kernel vLLM 0.33's ``rocm_unquantized_gemm`` is expected to pick on a gfx950 for a 2-D
    contiguous ``x[M, K] @ weight[N, K].T`` (``half``: bf16/fp16), by its rules as read from its
    source: an expectation, not an observation (the column times what it actually runs)."""
    values = env_values() if values is None else values
    cus = cu_count() if cus is None else cus
    if values["VLLM_BATCH_INVARIANT"][1] is True:
        return "batch-invariant linear (VLLM_BATCH_INVARIANT)"
    skinny = values["VLLM_ROCM_USE_SKINNY_GEMM"][1] is True and half and k % 8 == 0
    if skinny and 10 <= m <= 128 and k > 512 and n % 16 == 0:
        fits = _wvsplitkrc_fits(m, n, k, cus)
        if fits is None:
            return "wvSplitKrc if its CU budget fits (this vLLM cannot say)"
        if fits:
            return "wvSplitKrc"
    prefix = ""
    if _aiter(values, "VLLM_ROCM_USE_AITER_TRITON_GEMM") and half:
        picked = _aiter_triton(m, n, k)
        if picked:
            return "AITER Triton gemm_a16w16"
        if picked is None:
            prefix = "AITER Triton gemm_a16w16 if vLLM lists this (N, K), else "
    if skinny and 0 < m <= 5 and (n == 1 or n > 8):
        return prefix + "wvSplitK"
    if skinny and not bias and m == 1 and n % 4 == 0 and k <= 8192:
        return prefix + "LLMM1"
    if _aiter(values, "VLLM_ROCM_USE_AITER_LINEAR") and max(m, n) * k * 2 < 1 << 32 and m * n < 1 << 31:
        return prefix + "AITER tgemm"
    return prefix + "hipBLASLt (F.linear)"


def _aiter_triton(m: int, n: int, k: int) -> Optional[bool]:
    """vLLM's own ``use_aiter_triton_gemm`` for a bf16 call (None where it cannot say: no such
    function, or off ROCm where it cannot ask the platform)."""
    import torch

    use = getattr(sys.modules.get(UTILS), "use_aiter_triton_gemm", None)
    if use is None or not torch.cuda.is_available():
        return None
    try:
        return bool(use(m, n, k, torch.bfloat16))  # vLLM names tokens n and weight rows m
    except Exception:  # the platform query failed
        return None


# -- the columns' calls (device) ---------------------------------------------------------------


def dense_fn(x, weight, bias=None) -> Callable:
    """vLLM's unquantized linear on ``x[M, K]``, ``weight[N, K]``: its op through the dispatcher,
    or, where this process has the plugin's re-route on that op, vLLM's own kernel function."""
    import torch

    route = sys.modules.get("torch_flydsl.integrations.vllm.linear")
    if route is not None and route.installed():
        impl = getattr(importlib.import_module(UTILS), "rocm_unquantized_gemm_impl")
        return lambda: impl(x, weight, bias)
    op = torch.ops.vllm.rocm_unquantized_gemm
    return lambda: op(x, weight, bias)


def mxfp8_quantize() -> Callable:
    """vLLM's MXFP8 activation quantizer: ``x[M, K]`` -> (e4m3 values, uint8 E8M0 ``[M, K/32]``)."""
    return getattr(importlib.import_module(MX_QUANT), "mxfp8_e4m3_quantize")


def mxfp8_fn(x, weight, weight_scale) -> Callable:
    """vLLM's native gfx950 MXFP8 linear kernel on ``x[M, K]`` (bf16/fp16), ``weight[N, K]`` fp8
    e4m3 and ``weight_scale[N, K/32]`` uint8, the layer processed as vLLM's loader does."""
    import torch

    kernel_class = getattr(importlib.import_module(MX_NATIVE), "RocmDotScaledMxfp8LinearKernel")
    config = getattr(importlib.import_module(MX_CONFIG), "Mxfp8LinearLayerConfig")
    n, k = weight.shape
    kernel = kernel_class(config(weight_shape=(n, k)))
    layer = torch.nn.Module()
    layer.weight = torch.nn.Parameter(weight.contiguous(), requires_grad=False)
    layer.weight_scale = torch.nn.Parameter(weight_scale.contiguous(), requires_grad=False)
    kernel.process_weights_after_loading(layer)
    return lambda: kernel.apply_weights(layer, x, None)


def mxfp4_quantize() -> Callable:
    """What the MXFP4 re-route quantizes activations with on a GPU: vLLM's portable Triton
    ``downcast_to_mxfp`` (``x[M, K]`` -> packed E2M1 uint8 ``[M, K/2]``, E8M0 uint8 ``[M, K/32]``)."""
    downcast = getattr(importlib.import_module(MX4_QUANT), "downcast_to_mxfp")

    def quantize(x):
        values, scales, _ = downcast(x, axis=-1)
        return values, scales

    return quantize


def mxfp4_fn(x, weight, weight_scale) -> Callable:
    """vLLM's own MXFP4 W4A4 linear kernel (the class ``init_mxfp4_linear_kernel`` picks for
    dynamic MXFP4 activations, with the plugin's MXFP4 re-route stepped aside) on ``x[M, K]``,
    ``weight`` packed E2M1 uint8 ``[N, K/2]`` and ``weight_scale`` uint8 ``[N, K/32]``, the layer
    processed as vLLM's loader does (AITER pre-shuffles or transposes them)."""
    import torch

    linear = importlib.import_module(LINEAR)
    dynamic = getattr(importlib.import_module(QUANT_KEYS), "kMxfp4Dynamic")
    old = os.environ.get("TORCH_FLYDSL_VLLM_MXFP4")
    os.environ["TORCH_FLYDSL_VLLM_MXFP4"] = "0"  # the plugin's subclasses decline: vLLM's own kernel
    try:
        kernel = linear.init_mxfp4_linear_kernel(dynamic)
    finally:
        if old is None:
            os.environ.pop("TORCH_FLYDSL_VLLM_MXFP4")
        else:
            os.environ["TORCH_FLYDSL_VLLM_MXFP4"] = old
    layer = torch.nn.Module()
    layer.weight = torch.nn.Parameter(weight.contiguous(), requires_grad=False)
    layer.weight_scale = torch.nn.Parameter(weight_scale.contiguous(), requires_grad=False)
    kernel.process_weights_after_loading(layer)
    return lambda: kernel.apply_weights(layer, x, None)


def moe_gemm_fn(a, weight, sizes: list, tokens: int, top_k: int, hidden: int, inter: int) -> Callable:
    """vLLM's fused-MoE Triton kernel for one expert GEMM: ``a[T, K]`` (rows sorted by expert,
    ``sizes[e]`` rows for expert e) times ``weight[G, N, K]`` per expert, with the config
    ``TritonExperts`` picks for a call of ``tokens`` tokens, top-``top_k``, hidden ``hidden`` and
    expert intermediate ``inter``. Returns ``[T, N]``."""
    import torch

    fm = importlib.import_module(FUSED_MOE)
    from vllm.triton_utils import tl

    rows, groups, n = a.shape[0], weight.shape[0], weight.shape[1]
    config = fm.try_get_optimal_moe_config((groups, 2 * inter, hidden), (groups, hidden, inter), top_k, None, tokens)
    experts = torch.repeat_interleave(torch.arange(groups, dtype=torch.int32, device=a.device),
                                      torch.tensor(sizes, device=a.device))
    sorted_ids, expert_ids, padded = fm._prepare_expert_assignment(experts.view(rows, 1), config, rows, 1, groups,
                                                                   None)
    out = torch.empty(rows, 1, n, dtype=a.dtype, device=a.device)
    compute = tl.bfloat16 if a.dtype == torch.bfloat16 else tl.float16

    def call():
        fm.invoke_fused_moe_triton_kernel(a, weight, out, None, None, None, sorted_ids, expert_ids, padded, False, 1,
                                          config, compute_type=compute, use_fp8_w8a8=False, use_int8_w8a8=False,
                                          use_int8_w8a16=False, use_int4_w4a16=False, per_channel_quant=False,
                                          block_shape=None, B_bias=None)
        return out.view(rows, n)

    return call
