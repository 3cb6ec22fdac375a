"""vLLM on ROCm: unquantized fused-MoE layers whose expert GEMMs the dispatch table names run the
plugin's grouped GEMM; every other MoE call keeps vLLM's Triton experts, called unchanged.

Armed with the other re-routes (``torch_flydsl.integrations.vllm.install``, ``TORCH_FLYDSL_VLLM=1``).

The seam (vLLM 0.33.0)
----------------------
An unquantized ``FusedMoE`` layer's method is ``UnquantizedFusedMoEMethod``, a vLLM ``CustomOp``
(``@CustomOp.register("unquantized_fused_moe")``). Its ``__init__`` asks the unquantized MoE
oracle for a backend and an experts class (``self.experts_cls``); on ROCm without AITER that is
``TritonExperts`` (``fused_moe/experts/triton_moe.py``), whose ``apply`` runs the two expert GEMMs
(gathering token rows by ``moe_align_block_size`` order), the activation and ``moe_sum``.

vLLM's documented out-of-tree hook for a CustomOp is ``CustomOp.register_oot(cls,
name=<the class name>)``: every later ``UnquantizedFusedMoEMethod(...)`` builds the registered
subclass instead. The plugin registers ``FlyDSLUnquantizedFusedMoEMethod``, whose ``__init__`` is
vLLM's and then, only when vLLM picked ``TritonExperts``, swaps in ``FlyDSLTritonExperts``, a
``TritonExperts`` subclass (the class keeps vLLM's ``unquantized_fused_moe`` custom-op name). Its
``apply`` serves a call when all of these hold, and calls ``TritonExperts.apply`` otherwise:

- unquantized bf16/fp16 activations and weights, no expert biases, no LoRA, no expert map
  (expert parallelism), router weights applied after the second GEMM (vLLM's default), no
  post-GEMM2 hook, ``VLLM_BATCH_INVARIANT`` off;
- the dispatch table has ``grouped_mm`` entries for both GEMMs at this call's routed rows
  ``R = tokens x top-k``: ``[R, K] x W13[e].T`` (``n`` = W13's rows, ``k`` = hidden) and
  ``[R, I] x W2[e].T`` (``n`` = hidden, ``k`` = I), with ``groups`` = the experts.

Then: token rows are sorted by expert (a stable ``argsort`` of ``topk_ids``; counts by
``index_add_``, no host sync, so it captures in a CUDA graph), the grouped family runs
``grouped_mm_out`` for W13, vLLM's own ``self.activation`` runs on the result, the grouped
family runs W2, the rows go back to token order scaled by their router weights (fp32 product,
one rounding), and vLLM's own ``_finalize_expert_output`` (``moe_sum``) reduces over top-k into
``output``. If either grouped kernel cannot run here, vLLM's ``apply`` computes the whole call.

The MoE forward is an opaque op in vLLM's compiled graphs (``vllm::moe_forward``), so the
decision is made per call at run time; the table's digest is in vLLM's compile-cache key.
With ``TORCH_FLYDSL_RECORD_SHAPES`` set, both GEMMs of every call that passes the first list
are recorded (``grouped_mm`` shapes), whether or not the table names them.
``--moe-backend``, AITER (``VLLM_ROCM_USE_AITER_MOE``) or a quantized MoE leave vLLM's choice
alone. A vLLM without these names gets a warning and its own MoE kernels.
"""

from __future__ import annotations

import functools
import sys
import threading
from typing import Any, Optional

from ..._log import log
from .common import arm, armed, batch_invariant, enabled, require_seam, serve_or_miss, sort_routed_rows

METHOD_MODULE = "vllm.model_executor.layers.fused_moe.unquantized_fused_moe_method"
TRITON_MODULE = "vllm.model_executor.layers.fused_moe.experts.triton_moe"
CUSTOM_OP_MODULE = "vllm.model_executor.custom_op"
METHOD_NAME = "UnquantizedFusedMoEMethod"
WHAT = "fused MoE (TritonExperts)"

_lock = threading.Lock()
ARM_NAME = "moe"  # its name for common.arm


class _State:
    method_class: Optional[type] = None  # FlyDSLUnquantizedFusedMoEMethod once registered
    experts_class: Optional[type] = None  # FlyDSLTritonExperts
    base_experts: Optional[type] = None  # vLLM's TritonExperts
    registry: Any = None  # vLLM's op_registry_oot it was registered in


state = _State()


def install() -> None:
    """Arm the MoE re-route (idempotent): registers the method class when vLLM's unquantized MoE
    method module has executed. Called by ``integrations.vllm.install``."""
    arm(ARM_NAME, METHOD_MODULE, _register, "fused MoE layers not re-routed, vLLM's own MoE kernels serve them")


def installed() -> bool:
    return state.method_class is not None


def _register() -> None:
    import importlib

    methods = sys.modules[METHOD_MODULE]
    triton = importlib.import_module(TRITON_MODULE)
    custom_op = importlib.import_module(CUSTOM_OP_MODULE)
    # vLLM's names (untyped: Any), None where this vLLM lacks one; require_seam raises on a None
    # (on a CustomOp without register_oot too).
    method_base: Any = getattr(methods, METHOD_NAME, None)
    experts_base: Any = getattr(triton, "TritonExperts", None)
    op_class: Any = getattr(custom_op, "CustomOp", None)
    registry: Any = getattr(custom_op, "op_registry_oot", None)
    require_seam("MoE re-route", {f"{METHOD_MODULE}.{METHOD_NAME}": method_base,
                                  f"{TRITON_MODULE}.TritonExperts": experts_base,
                                  f"{CUSTOM_OP_MODULE}.CustomOp.register_oot": getattr(op_class, "register_oot", None),
                                  f"{CUSTOM_OP_MODULE}.op_registry_oot": registry})
    with _lock:
        if state.method_class is not None or not armed(ARM_NAME):
            return
        if METHOD_NAME in registry:
            raise RuntimeError(f"another plugin already replaced vLLM's {METHOD_NAME} "
                               f"({registry[METHOD_NAME].__module__}.{registry[METHOD_NAME].__name__})")
        experts_cls = _experts_class(experts_base)
        method_cls = _method_class(method_base, experts_base, experts_cls)
        op_class.register_oot(method_cls, name=METHOD_NAME)
        # vLLM's custom-op name, for custom_ops
        setattr(method_cls, "name", getattr(method_base, "name", METHOD_NAME))
        state.method_class, state.experts_class, state.base_experts = method_cls, experts_cls, experts_base
        state.registry = registry
    log.info("torch_flydsl: %s replaces vLLM's %s through CustomOp.register_oot: MoE calls whose grouped GEMMs "
             "the dispatch table names run FlyDSL, every other call runs vLLM's TritonExperts", method_cls.__name__,
             METHOD_NAME)


def _uninstall() -> None:
    """Take the method class out of vLLM's out-of-tree registry (tests;
    ``integrations.vllm._uninstall`` disarms)."""
    with _lock:
        if state.registry is not None and state.registry.get(METHOD_NAME) is state.method_class:
            del state.registry[METHOD_NAME]
        state.method_class = state.registry = None


def _method_class(method_base: type, experts_base: type, experts_cls: type) -> type:
    class FlyDSLUnquantizedFusedMoEMethod(method_base):  # type: ignore[misc, valid-type, unused-ignore]
        """vLLM's unquantized MoE method; when vLLM picks ``TritonExperts``, its experts are
        ``FlyDSLTritonExperts`` (``torch_flydsl.integrations.vllm.moe``)."""

        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            if enabled() and getattr(self, "experts_cls", None) is experts_base:
                self.experts_cls = experts_cls

    FlyDSLUnquantizedFusedMoEMethod.__module__ = __name__
    return FlyDSLUnquantizedFusedMoEMethod


def _experts_class(base: type) -> type:
    class FlyDSLTritonExperts(base):  # type: ignore[misc, valid-type, unused-ignore]
        """vLLM's ``TritonExperts``, with the calls whose grouped GEMMs the torch_flydsl dispatch
        table names served by FlyDSL's grouped GEMM."""

        def apply(self, output, hidden_states, w1, w2, topk_weights, topk_ids, activation, global_num_experts,
                  expert_map, a1q_scale, a2_scale, workspace13, workspace2, expert_tokens_meta,
                  apply_router_weight_on_input):
            def where() -> str:
                return (f"tokens={hidden_states.shape[0]} top-k={topk_ids.shape[-1]} experts={w1.shape[0]} "
                        f"N={w1.shape[1]} K={w1.shape[2]} I={w2.shape[2]}")

            def miss():
                return base.apply(self, output, hidden_states, w1, w2, topk_weights, topk_ids, activation,
                                  global_num_experts, expert_map, a1q_scale, a2_scale, workspace13, workspace2,
                                  expert_tokens_meta, apply_router_weight_on_input)

            served = serve_or_miss(WHAT, serve, (self, output, hidden_states, w1, w2, topk_weights, topk_ids,
                                                 activation, expert_map, apply_router_weight_on_input, workspace13,
                                                 workspace2), miss, where)
            return None if served is True else served

    FlyDSLTritonExperts.__module__ = __name__
    return FlyDSLTritonExperts


@functools.lru_cache(maxsize=None)
def _serve_deps():
    import torch

    from ... import dispatch_table, ops
    from ...deploy import record
    from ...registry import family_for

    return torch, dispatch_table.active, ops.try_run, family_for("grouped_mm"), record


def _why_not(experts, hidden_states, w1, w2, topk_ids, expert_map, apply_router_weight_on_input) -> Optional[str]:
    torch = _serve_deps()[0]
    qc = experts.quant_config
    if getattr(qc, "quant_dtype", None) is not None or getattr(qc, "use_int4_w4a16", False) \
            or getattr(qc, "use_int8_w8a16", False):
        return "quantized MoE"
    if getattr(qc, "w1_bias", None) is not None or getattr(qc, "w2_bias", None) is not None:
        return "expert biases"
    if getattr(experts, "_lora_context", None) is not None:
        return "LoRA"
    if expert_map is not None:
        return "expert parallelism (an expert map)"
    if apply_router_weight_on_input:
        return "router weights applied on the input"
    dtype = hidden_states.dtype
    if dtype not in (torch.bfloat16, torch.float16) or w1.dtype != dtype or w2.dtype != dtype:
        return f"activations {dtype}, weights {w1.dtype}/{w2.dtype}: not one of bf16/fp16"
    if hidden_states.dim() != 2 or w1.dim() != 3 or w2.dim() != 3 or topk_ids.dim() != 2:
        return "not hidden[T, K], w13[E, N, K], w2[E, K, I], topk_ids[T, top-k]"
    if w1.shape[2] != hidden_states.shape[1] or w2.shape[1] != hidden_states.shape[1] or w2.shape[0] != w1.shape[0]:
        return "weight shapes do not match the hidden size"
    hook = getattr(experts, "_uses_post_gemm2_hook", None)
    if hook is not None and hook(hidden_states.shape[0]):
        return "a post-GEMM2 hook"
    return None


def serve(experts, output, hidden_states, w1, w2, topk_weights, topk_ids, activation, expert_map,
          apply_router_weight_on_input, workspace13=None, workspace2=None):
    """(True, configs) when FlyDSL computed ``output``, else (None, why not)."""
    torch, active, try_run, family, record = _serve_deps()
    why = _why_not(experts, hidden_states, w1, w2, topk_ids, expert_map, apply_router_weight_on_input)
    if why is not None:
        return None, why
    tokens, k = hidden_states.shape
    groups, n, _ = w1.shape
    inter = w2.shape[2]
    top_k = topk_ids.shape[1]
    rows = tokens * top_k
    dtype = hidden_states.dtype
    if record.recording():
        name = str(dtype).replace("torch.", "")
        for gn, gk in ((n, k), (k, inter)):
            record.note_shape(record.Shape.of("grouped_mm", dtype=name, m=rows, n=gn, k=gk, groups=groups, b_major="col",
                                               top_k=top_k))
    table = active()
    if not table.entries:
        return None, "no dispatch table (TORCH_FLYDSL_DISPATCH_TABLE)"
    cfg1 = table.lookup("grouped_mm", dtype, "nt", False, rows, n, k, groups)
    cfg2 = table.lookup("grouped_mm", dtype, "nt", False, rows, k, inter, groups) if cfg1 else None
    if cfg2 is None:
        return None, "shape not in the dispatch table"
    if rows == 0:
        return None, "empty"
    if batch_invariant():
        return None, "VLLM_BATCH_INVARIANT (vLLM's batch-invariant kernel; a per-M table choice is not)"
    act_n = experts.adjust_N_for_activation(n, activation)
    if act_n != inter:
        return None, f"the activation gives {act_n} columns, W2 takes {inter}"

    order, offs = sort_routed_rows(topk_ids, groups)  # routed rows, grouped by expert
    a1 = hidden_states.index_select(0, order // top_k)
    # vLLM's workspaces where they fit, as its own kernel uses them: workspace2 holds W13's
    # output, then (dead after the activation) the weighted rows; workspace13 the activation.
    # ``output`` may live in workspace13: nothing is written there after the second GEMM.
    h1 = _scratch(workspace2, (rows, n), hidden_states)
    why = try_run(family, "grouped_mm_out", (a1, w1.transpose(1, 2), offs), {"cfg": cfg1, "out": h1})
    if why is not None:
        return None, f"FlyDSL {cfg1} cannot run: {why}"
    h1_act = _scratch(workspace13, (rows, inter), hidden_states)
    experts.activation(activation, h1_act, h1)
    h2 = hidden_states.new_empty((rows, k))
    why = try_run(family, "grouped_mm_out", (h1_act, w2.transpose(1, 2), offs), {"cfg": cfg2, "out": h2})
    if why is not None:
        return None, f"FlyDSL {cfg2} cannot run: {why}"
    weighted = _scratch(workspace2, (rows, k), hidden_states)
    weighted[order] = (h2.float() * topk_weights.reshape(-1)[order].float()[:, None]).to(dtype)
    experts._finalize_expert_output(weighted.view(tokens, top_k, k), output, topk_ids, expert_map)
    return True, f"{cfg1} + {cfg2}"


def _scratch(workspace, shape: tuple, like):
    """A ``shape`` view of the start of vLLM's ``workspace`` when it is a contiguous tensor of
    ``like``'s dtype and device with room for it, else a new tensor."""
    numel = shape[0] * shape[1]
    if (workspace is not None and workspace.dtype == like.dtype and workspace.device == like.device
            and workspace.is_contiguous() and workspace.numel() >= numel):
        return workspace.view(-1)[:numel].view(shape)
    return like.new_empty(shape)
