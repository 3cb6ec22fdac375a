"""vLLM on ROCm: MXFP8 fused-MoE layers whose two expert GEMMs the dispatch table names run the
plugin's MXFP8 grouped GEMM (``scaled_grouped_mm``) for the routed-row counts the table names;
every other MXFP8 MoE call keeps vLLM's native gfx950 experts, called unchanged.

Armed with the other re-routes (``torch_flydsl.integrations.vllm.install``, ``TORCH_FLYDSL_VLLM=1``).

The seam (vLLM 0.33.0)
----------------------
Five MXFP8 MoE methods (ModelOpt, online MXFP8, compressed-tensors W8A8-MXFP8, Quark, INC) ask
``fused_moe.oracle.mxfp8.select_mxfp8_moe_backend(config)`` for a backend and an experts class,
which they build the layer's modular kernel with. That function walks its backends in priority
order and, for each, calls the module-global ``_select_kernel_cls(backend, config)``, which maps
the backend to classes (``_mxfp8_backend_to_kernel_cls``) and returns the first whose
``is_supported_config`` passes. On gfx950 without AITER's FlyDSL MoE that is ``TRITON_MXFP8``:
``Mxfp8NativeTritonExperts`` (``experts/mxfp8_native_moe.py``), whose ``apply`` sorts the routed
rows by expert (``moe_align_block_size``), quantizes the activations per 32 values with vLLM's
``mxfp8_e4m3_quantize``, runs a Triton ``dot_scaled`` grouped GEMM for W13 (output in the
activations' dtype), vLLM's fused SwiGLU-OAI + MXFP8 quantizer
(``vllm.models.minimax_m3.amd.ops.swiglu_oai_quantize_mxfp8``, split layout: gate = the first
half of W13's rows), the W2 GEMM in fp32 multiplied by the router weights, and the sum over
top-k. Its operands are the scaled grouped family's contract: fp8 e4m3 weights ``[E, N, K]``
(``B = W.transpose(1, 2)``, column-major per expert) with E8M0 scales ``[E, N, K/32]``.

The plugin replaces the module attribute ``_select_kernel_cls`` of ``oracle.mxfp8`` with a
wrapper that calls vLLM's function and, when it returned ``Mxfp8NativeTritonExperts``,
``TORCH_FLYDSL_VLLM`` is on and the layer's ``--moe-backend`` is ``auto``, returns
``FlyDSLMxfp8NativeTritonExperts``, a subclass, instead. Why this seam: it is the narrowest
vLLM function that sees both the class vLLM resolved and the layer's MoE config (so an explicit
``--moe-backend`` keeps vLLM's class); one module attribute changes, no vLLM source, and the
five callers, which import ``select_mxfp8_moe_backend`` by name, need no patch (it looks
``_select_kernel_cls`` up in its module at each call). vLLM's choice itself is untouched:
every backend and every other class comes back as vLLM picked it, and the subclass inherits
``is_supported_config``, the weights' layout (``TRITON_MXFP8`` converts none) and every method
but ``apply``. The base class is taken from vLLM's module when vLLM first returns it (nothing
is imported at registration beyond vLLM's quantizer module).

The subclass's ``apply`` serves a call when all of these hold, and calls the base's ``apply``
otherwise:

- the plain top-k case: no expert map (expert parallelism), no expert biases, no LoRA, router
  weights applied after the second GEMM (vLLM's default), no post-GEMM2 hook,
  ``VLLM_BATCH_INVARIANT`` off;
- bf16/fp16 activations ``[T, K]``, fp8 e4m3 weights ``W13 [E, 2I, K]`` and ``W2 [E, K, I]`` with
  E8M0 scales ``[E, 2I, K/32]`` / ``[E, K, I/32]``, K and I multiples of 128;
- an activation the fused quantizer computes: ``swigluoai_uninterleave`` (with the layer's
  alpha, beta and clamp), or ``silu`` with the default activation config (alpha 1, beta 0, no
  clamp: then SwiGLU-OAI is ``silu(gate) * up``). vLLM's own ``apply`` runs that same
  SwiGLU-OAI whatever the activation; the plugin serves only the two it means;
- the dispatch table has ``scaled_grouped_mm`` ``mxfp8`` entries for both GEMMs at this call's
  routed rows ``R = tokens x top-k``: ``n`` = 2I, ``k`` = K (W13) and ``n`` = K, ``k`` = I (W2),
  with ``groups`` = the experts.

Then: the rows are sorted by expert (``common.sort_routed_rows``, shared with ``moe``: no host
sync), the tokens are quantized by vLLM's own ``mxfp8_e4m3_quantize`` and their rows (values
and scales) gathered in that order, the scaled grouped family runs its ``scaled_grouped_mm_out``
call (``ops.try_run``) for W13 into the activations' dtype, vLLM's own
``swiglu_oai_quantize_mxfp8`` quantizes the activation, the family runs W2 into bf16, and, as
vLLM does, the rows are multiplied by their router weights in fp32, put back in token order,
summed over top-k in fp32 and cast to the activations' dtype into ``output``. If either kernel
cannot run here, vLLM's ``apply`` computes the whole call.

Numerics against vLLM's path: the tokens' quantization is vLLM's (bit for bit), the activation
is quantized by vLLM's own fused quantizer from W13's output, and the router weighting and the
top-k sum are vLLM's fp32 ones, in its order. The differences:

- W2's products are rounded to bf16 (relative error at most 2^-8 each) before their router
  weights multiply them, where vLLM's kernel keeps them in fp32: the family writes bf16 or fp16
  only (bf16 for every model: fp32's range, so no overflow where fp16 could);
- both GEMMs accumulate in fp32 on the scaled MFMA, in another order than Triton's
  ``dot_scaled``: W13's rounded output can differ in its last bit, and so move an activation
  across an MXFP8 rounding boundary (one e4m3 step of that one value).

The MoE forward is an opaque op in vLLM's compiled graphs (``vllm::moe_forward``), so the
decision is made per call at run time. With ``TORCH_FLYDSL_RECORD_SHAPES`` set, both GEMMs of
every call that meets the first three conditions (``VLLM_BATCH_INVARIANT`` aside) are recorded
(``scaled_grouped_mm`` shapes: W13 with the activations' dtype as ``out_dtype``, W2 with
bfloat16), whether or not the table names them.
A vLLM without ``_select_kernel_cls``, ``Fp8MoeBackend.TRITON_MXFP8`` or ``mxfp8_e4m3_quantize``
gets a warning and its own kernels; one whose fused activation quantizer cannot be imported
keeps vLLM's ``apply`` per call (which needs the same function).

Not re-routed: MXFP4 MoE (the scaled grouped family takes e4m3 x e4m3 operands only).
"""

from __future__ import annotations

import functools
import importlib
import logging
import sys
import threading
from typing import Any, Optional

from ..._log import log
from .common import _say, arm, armed, batch_invariant, enabled, require_seam, serve_or_miss, sort_routed_rows

ORACLE_MODULE = "vllm.model_executor.layers.fused_moe.oracle.mxfp8"
NATIVE_MODULE = "vllm.model_executor.layers.fused_moe.experts.mxfp8_native_moe"
QUANT_MODULE = "vllm.model_executor.layers.quantization.utils.mxfp8_utils"
ACT_MODULE = "vllm.models.minimax_m3.amd.ops"  # imported at first use, as vLLM's own experts do
ACT_NAME = "swiglu_oai_quantize_mxfp8"
SELECT_NAME = "_select_kernel_cls"
BASE_NAME = "Mxfp8NativeTritonExperts"
EXPERTS_NAME = "FlyDSLMxfp8NativeTritonExperts"
OP = "scaled_grouped_mm"  # the dispatch table's op for both expert GEMMs
CALL = "scaled_grouped_mm_out"  # the family's call form ops.try_run runs
FORMAT = "mxfp8"  # e4m3 activations x e4m3 weights
K_ALIGN = 128  # both GEMMs' K (hidden, intermediate): the scaled MFMA's K; vLLM's kernel asserts it too
WHAT = "MXFP8 fused MoE (Mxfp8NativeTritonExperts)"
WRAPPED = "torch_flydsl_wraps"  # the attribute our wrapper carries: vLLM's function

_lock = threading.Lock()
ARM_NAME = "moe_mx"  # its name for common.arm


class _State:
    select: Any = None  # vLLM's _select_kernel_cls, while our wrapper stands in its module
    oracle: Any = None  # vLLM's oracle.mxfp8 module
    quantize: Any = None  # vLLM's mxfp8_e4m3_quantize
    experts_class: Optional[type] = None  # FlyDSLMxfp8NativeTritonExperts, made when vLLM first returns its base
    base_experts: Optional[type] = None  # vLLM's Mxfp8NativeTritonExperts


state = _State()


def install() -> None:
    """Arm the MXFP8 MoE re-route (idempotent): wraps vLLM's ``_select_kernel_cls`` when its
    MXFP8 MoE oracle has executed. Called by ``integrations.vllm.install`` (``TORCH_FLYDSL_VLLM=1``)."""
    arm(ARM_NAME, ORACLE_MODULE, _register, "MXFP8 fused-MoE layers not re-routed, vLLM's own MXFP8 MoE kernels "
                                            "serve them")


def installed() -> bool:
    return state.select is not None


# -- registration ----------------------------------------------------------------------------


def _register() -> None:
    oracle = sys.modules[ORACLE_MODULE]
    quant = importlib.import_module(QUANT_MODULE)
    # vLLM's names (untyped: Any), None where this vLLM lacks one; require_seam raises on a None.
    select: Any = getattr(oracle, SELECT_NAME, None)
    backends: Any = getattr(oracle, "Fp8MoeBackend", None)
    quantize: Any = getattr(quant, "mxfp8_e4m3_quantize", None)
    require_seam("MXFP8 MoE re-route", {f"{ORACLE_MODULE}.{SELECT_NAME}": select,
                                        f"{ORACLE_MODULE}.Fp8MoeBackend.TRITON_MXFP8": getattr(backends, "TRITON_MXFP8",
                                                                                               None),
                                        f"{QUANT_MODULE}.mxfp8_e4m3_quantize": quantize})
    with _lock:
        if state.select is not None or not armed(ARM_NAME):  # wrapped, or disarmed since (tests)
            return
        if getattr(select, WRAPPED, None) is not None:
            raise RuntimeError(f"{ORACLE_MODULE}.{SELECT_NAME} is wrapped already (by another torch_flydsl)")
        setattr(oracle, SELECT_NAME, _wrapper(select))
        state.select, state.oracle, state.quantize = select, oracle, quantize
    log.info("torch_flydsl: vLLM's MXFP8 MoE oracle builds %s where it picks %s: MoE calls whose grouped GEMMs the "
             "dispatch table names run FlyDSL, every other call runs vLLM's experts", EXPERTS_NAME, BASE_NAME)


def _uninstall() -> None:
    """Put vLLM's ``_select_kernel_cls`` back (tests; ``integrations.vllm._uninstall`` disarms).
    Layers built since keep their experts class."""
    with _lock:
        current = getattr(state.oracle, SELECT_NAME, None)
        if state.oracle is not None and getattr(current, WRAPPED, None) is state.select:
            setattr(state.oracle, SELECT_NAME, state.select)
        state.select = state.oracle = None


def _wrapper(select: Any) -> Any:
    @functools.wraps(select)
    def _select_kernel_cls(backend, config):
        cls = select(backend, config)
        if not enabled():
            return cls
        try:
            return _ours(cls, config)
        except Exception as e:  # noqa: BLE001 - a bug of ours must never fail vLLM's model load
            _say(logging.WARNING, ("select", type(e).__name__), "%s: vLLM's experts class kept: %s: %s", WHAT,
                 type(e).__name__, e)
            return cls

    setattr(_select_kernel_cls, WRAPPED, select)
    return _select_kernel_cls


def _ours(cls: Any, config: Any) -> Any:
    """``cls``, or our subclass where it is vLLM's native MXFP8 experts and ``--moe-backend`` is auto."""
    base = getattr(sys.modules.get(NATIVE_MODULE), BASE_NAME, None)
    if base is None or cls is not base:
        return cls
    backend = getattr(config, "moe_backend", "auto")
    if backend != "auto":
        _say(logging.DEBUG, ("moe-backend", backend), "%s: --moe-backend %s: vLLM's %s kept", WHAT, backend, BASE_NAME)
        return cls
    with _lock:
        if state.base_experts is not base:
            state.experts_class, state.base_experts = _experts_class(base), base
        return state.experts_class


def _experts_class(base: type) -> type:
    class FlyDSLMxfp8NativeTritonExperts(base):  # type: ignore[misc, valid-type, unused-ignore]
        """vLLM's native gfx950 MXFP8 MoE experts, with the calls whose grouped GEMMs the
        torch_flydsl dispatch table names served by FlyDSL's MXFP8 grouped GEMM
        (``torch_flydsl.integrations.vllm.moe_mx``)."""

        def apply(self, output, hidden_states, w1, w2, topk_weights, topk_ids, activation, global_num_experts,
                  expert_map, a1q_scale, a2_scale, workspace13, workspace2, expert_tokens_meta,
                  apply_router_weight_on_input):
            def where() -> str:
                return (f"tokens={hidden_states.shape[0]} top-k={topk_ids.shape[-1]} experts={w1.shape[0]} "
                        f"N={w1.shape[1]} K={w1.shape[-1]} I={w2.shape[-1]}")

            def miss():
                return base.apply(self, output, hidden_states, w1, w2, topk_weights, topk_ids, activation,
                                  global_num_experts, expert_map, a1q_scale, a2_scale, workspace13, workspace2,
                                  expert_tokens_meta, apply_router_weight_on_input)

            served = serve_or_miss(WHAT, serve, (self, output, hidden_states, w1, w2, topk_weights, topk_ids,
                                                 activation, expert_map, apply_router_weight_on_input), miss, where)
            return None if served is True else served

    FlyDSLMxfp8NativeTritonExperts.__module__ = __name__
    return FlyDSLMxfp8NativeTritonExperts


# -- a call ----------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=None)
def _serve_deps():
    """What ``serve`` needs, imported once (function-level imports cost ~1 us each per call)."""
    import torch

    from ... import dispatch_table, ops
    from ...deploy import record
    from ...registry import family_for

    return torch, dispatch_table.active, ops.try_run, family_for(OP), record


def activation_why_not(activation: Any, config: Any) -> Optional[str]:
    """Why the fused SwiGLU-OAI quantizer does not compute ``activation`` (None: it does)."""
    name = getattr(activation, "value", activation)
    if name == "swigluoai_uninterleave":
        return None
    plain = (getattr(config, "alpha", 1.0), getattr(config, "beta", 0.0), getattr(config, "clamp_limit", None))
    if name == "silu" and plain == (1.0, 0.0, None):
        return None
    return (f"activation {name} (alpha, beta, clamp {plain}): the fused quantizer computes split-layout SwiGLU-OAI, "
            "served for swigluoai_uninterleave and for silu with alpha 1, beta 0, no clamp")


def _why_not(experts, hidden_states, w1, w2, topk_ids, activation, expert_map,
             apply_router_weight_on_input) -> Optional[str]:
    torch = _serve_deps()[0]
    qc = experts.quant_config
    if getattr(qc, "w1_bias", None) is not None or getattr(qc, "w2_bias", None) is not None:
        return "expert biases"
    if getattr(experts, "_lora_context", None) is not None:
        return "LoRA"
    if expert_map is not None:
        return "expert parallelism (an expert map)"
    if apply_router_weight_on_input:
        return "router weights applied on the input"
    dtype = hidden_states.dtype
    if dtype not in (torch.bfloat16, torch.float16):
        return f"activations are {dtype}, not bf16/fp16"
    if hidden_states.dim() != 2 or w1.dim() != 3 or w2.dim() != 3 or topk_ids.dim() != 2:
        return "not hidden[T, K], w13[E, 2I, K], w2[E, K, I], topk_ids[T, top-k]"
    if w1.dtype != torch.float8_e4m3fn or w2.dtype != torch.float8_e4m3fn:
        return f"weights are {w1.dtype}/{w2.dtype}, not MXFP8 (float8_e4m3fn)"
    groups, n, k = w1.shape
    inter = w2.shape[2]
    if k != hidden_states.shape[1] or tuple(w2.shape[:2]) != (groups, k) or n != 2 * inter:
        return "weight shapes do not match the hidden size (or W13 is not [E, 2I, K])"
    if k % K_ALIGN or inter % K_ALIGN:
        return f"hidden {k} or intermediate {inter} is not a multiple of {K_ALIGN}"
    for name, s, want in (("W13", getattr(experts, "w1_scale_val", None), (groups, n, k // 32)),
                          ("W2", getattr(experts, "w2_scale_val", None), (groups, k, inter // 32))):
        if s is None or s.dtype not in (torch.uint8, torch.float8_e8m0fnu) or tuple(s.shape) != want:
            return f"{name}'s scales are not E8M0 {list(want)}"
    why = activation_why_not(activation, getattr(experts, "activation_config", None))
    if why is not None:
        return why
    hook = getattr(experts, "_uses_post_gemm2_hook", None)
    if hook is not None and hook(hidden_states.shape[0]):
        return "a post-GEMM2 hook"
    return None


def _act_quant() -> Any:
    """vLLM's fused SwiGLU-OAI + MXFP8 quantizer, or why not (a str). Imported at first use as
    vLLM's experts do: the package resolves only once the model module has loaded."""
    module = sys.modules.get(ACT_MODULE)
    if module is None:
        try:
            module = importlib.import_module(ACT_MODULE)
        except Exception as e:  # noqa: BLE001 - vLLM's own apply needs the same import
            return f"vLLM's {ACT_MODULE} cannot be imported here ({type(e).__name__}: {e})"
    fn = getattr(module, ACT_NAME, None)
    return fn if fn is not None else f"this vLLM has no {ACT_MODULE}.{ACT_NAME}"


def serve(experts, output, hidden_states, w1, w2, topk_weights, topk_ids, activation, expert_map,
          apply_router_weight_on_input):
    """(True, configs) when FlyDSL computed ``output``, else (None, why not)."""
    torch, active, try_run, family, record = _serve_deps()
    why = _why_not(experts, hidden_states, w1, w2, topk_ids, activation, expert_map, apply_router_weight_on_input)
    if why is not None:
        return None, why
    tokens, k = hidden_states.shape
    groups, n, _ = w1.shape
    inter = w2.shape[2]
    top_k = topk_ids.shape[1]
    rows = tokens * top_k
    dtype = hidden_states.dtype
    if record.recording():
        for gn, gk, out in ((n, k, str(dtype).replace("torch.", "")), (k, inter, "bfloat16")):
            record.note_shape(record.Shape.of(OP, dtype=FORMAT, out_dtype=out, m=rows, n=gn, k=gk, groups=groups))
    table = active()
    if not table.entries:
        return None, "no dispatch table (TORCH_FLYDSL_DISPATCH_TABLE)"
    cfg1 = table.lookup(OP, FORMAT, "nt", False, rows, n, k, groups)
    cfg2 = table.lookup(OP, FORMAT, "nt", False, rows, k, inter, groups) if cfg1 else None
    if cfg2 is None:
        return None, "shape not in the dispatch table"
    if rows == 0:
        return None, "empty"
    if batch_invariant():
        return None, "VLLM_BATCH_INVARIANT (vLLM's batch-invariant kernel; a per-M table choice is not)"
    act_quant = _act_quant()
    if isinstance(act_quant, str):
        return None, act_quant

    order, offs = sort_routed_rows(topk_ids, groups)  # routed rows, grouped by expert
    u8, e8m0 = torch.uint8, torch.float8_e8m0fnu
    x_q, x_scale = state.quantize(hidden_states)  # per token, as vLLM's kernel reads it for each of its rows
    token = order // top_k
    a1 = x_q.view(u8).index_select(0, token).view(x_q.dtype)
    a1_scale = x_scale.view(u8).index_select(0, token).view(e8m0)
    h1 = hidden_states.new_empty((rows, n))  # W13's output in the activations' dtype, as vLLM's
    why = try_run(family, CALL, (a1, w1.transpose(1, 2), a1_scale, experts.w1_scale_val.view(e8m0), offs),
                  {"cfg": cfg1, "out": h1})
    if why is not None:
        return None, f"FlyDSL {cfg1} cannot run: {why}"
    act = experts.activation_config
    a2, a2_scale = act_quant(h1, alpha=act.alpha, beta=act.beta, limit=act.clamp_limit)
    h2 = torch.empty((rows, k), dtype=torch.bfloat16, device=hidden_states.device)  # vLLM's is fp32
    why = try_run(family, CALL, (a2, w2.transpose(1, 2), a2_scale.view(e8m0), experts.w2_scale_val.view(e8m0), offs),
                  {"cfg": cfg2, "out": h2})
    if why is not None:
        return None, f"FlyDSL {cfg2} cannot run: {why}"
    weighted = torch.empty((rows, k), dtype=torch.float32, device=hidden_states.device)
    weighted[order] = h2.float() * topk_weights.reshape(-1).to(torch.float32)[order][:, None]
    output.copy_(weighted.view(tokens, top_k, k).sum(dim=1).to(dtype))
    return True, f"{cfg1} + {cfg2}"
