"""The vLLM MXFP8 fused-MoE re-route (torch_flydsl.integrations.vllm.moe_mx) against two copies of
the seam: the real vLLM 0.33.0 (scripts/vllm_hook_test.sh) and the stand-in modules of
vllmkit_moe_mx.py (here and in CI).

On this CPU, vLLM's native MXFP8 experts (Triton ``dot_scaled`` kernels) and its fused SwiGLU-OAI
+ MXFP8 quantizer (a Triton kernel, in a package that needs torchvision) cannot run. Every test
replaces ``Mxfp8NativeTritonExperts.apply`` with ``vllm_apply_standin``, which records that vLLM's
path was taken, and the quantizer's module with one whose ``swiglu_oai_quantize_mxfp8`` is
``act_quant_standin`` (SwiGLU-OAI in fp32, then the seam's own ``mxfp8_e4m3_quantize``, what
vLLM's docstring says the fused kernel computes), recording what it was given and returned. The
platform looks like a gfx950 ROCm only around kernel selection. Plumbing tests run the scaled
grouped family's float64 reference (``reference-standin`` in their names); the kernel's
arithmetic is checked under the emulator.

Accuracy: the route's output against the float64 product of the same quantized operands (the
activations vLLM's quantizer made, the weights, and the activation quantizer's output the route
fed W2), weighted by the router weights and summed over top-k, relative to the largest output:
within 2^-6. Two bf16 roundings stand between them (W2's products, which vLLM keeps in fp32, and
the output), each at most 2^-8 of what it rounds; where top-k terms cancel that can pass 2^-7 of
the largest output (measured: 3e-3 to 6e-3). W13's output, before the activation, against its
float64 product: within 2^-7 (one bf16 rounding, at most 2^-8, and fp32 accumulation; measured
2e-3 to 3e-3). A wrong kernel (a group's rows, a scale, a tile) lands far above both.
"""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path

import pytest
import torch

import torch_flydsl_boot
from torch_flydsl import dispatch_table
from torch_flydsl.integrations import vllm as hook
from torch_flydsl.integrations.vllm import common
from torch_flydsl.integrations.vllm import moe_mx

from vllmkit import gfx950_platform, module_seam

CFG = "mxgrp_m32n64k256_w1x2_s3_g0"  # explain scaled_grouped_mm 16 512 256 --groups 4 (baseline; and 16 256 256)
T, TOP_K, E, H, I = 8, 2, 4, 256, 256  # tokens, experts per token, experts, hidden, intermediate
ROWS = T * TOP_K
TOLERANCE = 2.0**-6  # the output vs the float64 product of the same quantized operands
W13_TOLERANCE = 2.0**-7  # W13's bf16 output vs its float64 product


@pytest.fixture(scope="module", params=["vllm-0.33", "standin"])
def seam(request, tmp_path_factory):
    return module_seam(request.param, tmp_path_factory)


def quantize(x):
    from vllm.model_executor.layers.quantization.utils.mxfp8_utils import mxfp8_e4m3_quantize

    return mxfp8_e4m3_quantize(x)


def swiglu_oai(gate_up, alpha, beta, limit):
    i = gate_up.shape[-1] // 2
    gate, up = gate_up[:, :i].float(), gate_up[:, i:].float()
    if limit is not None:
        gate, up = gate.clamp(max=limit), up.clamp(-limit, limit)
    return gate * torch.sigmoid(alpha * gate) * (up + beta)


def uninstall():
    moe_mx._uninstall()
    hook._uninstall()


@pytest.fixture
def env(monkeypatch, tmp_path):
    """No re-route armed, the plugin's variables unset, the table re-read; vLLM's native apply and
    fused activation quantizer replaced by stand-ins that record their calls; all undone after."""
    for name in ("TORCH_FLYDSL_VLLM", "TORCH_FLYDSL_DISPATCH_TABLE", "TORCH_FLYDSL_CACHE_DIR", "TORCH_FLYDSL_EXECUTOR",
                 "TORCH_FLYDSL_DISABLE", "TORCH_FLYDSL_RECORD_SHAPES", "VLLM_BATCH_INVARIANT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(common, "_said", set())
    uninstall()
    dispatch_table.reload()
    import vllm.model_executor.layers.fused_moe.experts.mxfp8_native_moe as native

    calls, acts = [], []

    def vllm_apply_standin(self, output, hidden_states, *rest, **kwargs):
        calls.append(tuple(hidden_states.shape))
        output.fill_(-1.0)  # what vLLM's kernel "computed": only that it ran matters here

    def act_quant_standin(gate_up, alpha, beta, limit, block_m=64):
        q, s = quantize(swiglu_oai(gate_up, alpha, beta, limit))
        acts.append({"input": gate_up.clone(), "q": q, "s": s, "args": (alpha, beta, limit)})
        return q, s

    monkeypatch.setattr(native.Mxfp8NativeTritonExperts, "apply", vllm_apply_standin)
    fused = types.SimpleNamespace(swiglu_oai_quantize_mxfp8=act_quant_standin)
    monkeypatch.setitem(sys.modules, moe_mx.ACT_MODULE, fused)
    monkeypatch.vllm_calls, monkeypatch.acts = calls, acts
    yield monkeypatch
    uninstall()
    monkeypatch.undo()
    dispatch_table.reload()


def table_file(path: Path, rows=ROWS, config=CFG) -> str:
    entries = [{"op": "scaled_grouped_mm", "dtype": "mxfp8", "layout": "nt", "m": rows, "n": n, "k": k, "groups": E,
                "config": config} for n, k in ((2 * I, H), (H, I))]
    path.write_text(json.dumps({"format": dispatch_table.FORMAT, "version": dispatch_table.VERSION,
                                "arch": "gfx950", "entries": entries}))
    return str(path)


def oracle():
    import vllm.model_executor.layers.fused_moe.oracle.mxfp8 as mxfp8_oracle  # fires the hook when armed

    return mxfp8_oracle


def reroute_on(env, tmp_path, executor: str, rows=ROWS, config=CFG):
    env.setenv("TORCH_FLYDSL_VLLM", "1")
    env.setenv("TORCH_FLYDSL_EXECUTOR", executor)
    env.setenv("TORCH_FLYDSL_DISPATCH_TABLE", table_file(tmp_path / "table.json", rows, config))
    torch_flydsl_boot.vllm_register()
    oracle()
    assert moe_mx.installed(), common.install_error


def activation(name: str = "SILU"):
    from vllm.model_executor.layers.fused_moe.activation import MoEActivation

    return getattr(MoEActivation, name)


def moe_config(seam, act="SILU", moe_backend="auto"):
    if seam.name == "standin":
        return types.SimpleNamespace(moe_backend=moe_backend, activation=activation(act), swiglu_limit=None,
                                     swiglu_alpha=None, swiglu_beta=None)
    from vllm.model_executor.layers.fused_moe.config import (FusedMoEConfig, FusedMoEParallelConfig,
                                                             RoutingMethodType)

    return FusedMoEConfig(num_experts=E, experts_per_token=TOP_K, hidden_dim=H, intermediate_size=I,
                          num_local_experts=E, num_logical_experts=E, activation=activation(act), device="cpu",
                          routing_method=RoutingMethodType.Renormalize,
                          moe_parallel_config=FusedMoEParallelConfig.make_no_parallel(), in_dtype=torch.bfloat16,
                          moe_backend=moe_backend)


def quant_config(seam, w1s, w2s, biases=False, alpha=None, beta=None, limit=None):
    b1 = torch.zeros(E, 2 * I) if biases else None
    b2 = torch.zeros(E, H) if biases else None
    if seam.name == "standin":
        return types.SimpleNamespace(w1_scale=w1s, w2_scale=w2s, w1_bias=b1, w2_bias=b2, quant_dtype="mxfp8",
                                     gemm1_alpha=alpha, gemm1_beta=beta, gemm1_clamp_limit=limit)
    from vllm.model_executor.layers.fused_moe.config import FusedMoEQuantConfig

    return FusedMoEQuantConfig.make("mxfp8", w1_scale=w1s, w2_scale=w2s, w1_bias=b1, w2_bias=b2, block_shape=[1, 32],
                                    is_scale_swizzled=False, gemm1_alpha=alpha, gemm1_beta=beta,
                                    gemm1_clamp_limit=limit)


def weights(seed=0):
    """MXFP8 experts as vLLM's online quantization leaves them: each expert's weight quantized by
    the seam's ``mxfp8_e4m3_quantize`` (fp8 [E, N, K], uint8 E8M0 scales [E, N, K/32])."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for n, k in ((2 * I, H), (H, I)):
        w = torch.randn(E, n, k, generator=g) / k**0.5
        q, s = zip(*(quantize(w[e]) for e in range(E)))
        out += [torch.stack(q), torch.stack(s)]
    return out  # w1, w1 scales, w2, w2 scales


def routing(tokens=T, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(tokens, H, generator=g).to(torch.bfloat16)
    ids = torch.stack([torch.randperm(E - 1, generator=g)[:TOP_K] for _ in range(tokens)]).to(torch.int32)
    topk_weights = torch.rand(tokens, TOP_K, generator=g).softmax(-1)
    return x, ids, topk_weights  # expert E-1 gets no row: an empty group


def experts_of(seam, cls, act="SILU", seed=0, **quant):
    w1, w1s, w2, w2s = weights(seed)
    experts = cls(moe_config(seam, act), quant_config(seam, w1s, w2s, **quant))
    return experts, w1, w2


def apply(experts, w1, w2, x, ids, topk_weights, act="SILU", expert_map=None, on_input=False):
    """``experts.apply`` as vLLM's modular kernel calls it (keywords; no workspaces used)."""
    out = torch.full((x.shape[0], H), float("nan"), dtype=x.dtype)
    experts.apply(output=out, hidden_states=x, w1=w1, w2=w2, topk_weights=topk_weights, topk_ids=ids,
                  activation=activation(act), global_num_experts=E, expert_map=expert_map, a1q_scale=None,
                  a2_scale=None, workspace13=None, workspace2=None, expert_tokens_meta=None,
                  apply_router_weight_on_input=on_input)
    return out


def dequant(q, scale):
    """float64 values of MXFP8 rows [rows, K] with uint8 E8M0 scales [rows, K/32]."""
    exp = scale.view(torch.uint8).double().repeat_interleave(32, dim=-1) - 127
    return q.double() * torch.exp2(exp)


def rel_err(out, ref) -> float:
    return float((out.double() - ref).abs().max() / ref.abs().max())


def check_against_float64(experts, w1, w2, x, ids, topk_weights, out, act_call) -> tuple[float, float]:
    """(W13's error, the output's error) against the float64 products of the same quantized
    operands: vLLM's quantization of ``x``, the weights, and what the activation quantizer gave
    the route for W2 (rows in the route's expert order)."""
    flat = ids.reshape(-1).long()
    order = torch.argsort(flat, stable=True)
    x_q, x_s = quantize(x)
    xd = dequant(x_q, x_s)
    w1s, w2s = experts.w1_scale_val, experts.w2_scale_val
    h1 = torch.stack([xd[int(r) // TOP_K] @ dequant(w1[flat[r]], w1s[flat[r]]).T for r in order])
    a2 = dequant(act_call["q"], act_call["s"])
    ref = torch.zeros(x.shape[0], H, dtype=torch.float64)
    for i, r in enumerate(order.tolist()):
        e = int(flat[r])
        ref[r // TOP_K] += float(topk_weights.reshape(-1)[r]) * (a2[i] @ dequant(w2[e], w2s[e]).T)
    return rel_err(act_call["input"], h1), rel_err(out, ref)


def end_to_end_reference(experts, w1, w2, x, ids, topk_weights, alpha=1.0, beta=0.0, limit=None):
    """The whole MoE in float64 from the quantized weights and vLLM's quantization of ``x``,
    re-quantizing the activation from W13's bf16-rounded float64 product (no operand taken from
    the route)."""
    x_q, x_s = quantize(x)
    xd = dequant(x_q, x_s)
    ref = torch.zeros(x.shape[0], H, dtype=torch.float64)
    for t in range(x.shape[0]):
        for j in range(TOP_K):
            e = int(ids[t, j])
            h1 = (xd[t:t + 1] @ dequant(w1[e], experts.w1_scale_val[e]).T).to(torch.bfloat16)
            q, s = quantize(swiglu_oai(h1, alpha, beta, limit))
            ref[t] += float(topk_weights[t, j]) * (dequant(q, s) @ dequant(w2[e], experts.w2_scale_val[e]).T)[0]
    return ref


def native_class():
    from vllm.model_executor.layers.fused_moe.experts.mxfp8_native_moe import Mxfp8NativeTritonExperts

    return Mxfp8NativeTritonExperts


def flydsl_class(seam):
    """The experts class vLLM's oracle hands an MXFP8 MoE layer on a gfx950 with the re-route on."""
    with gfx950_platform():
        backend, cls = oracle().select_mxfp8_moe_backend(moe_config(seam))
    assert backend.value == "TRITON_MXFP8" and cls.__name__ == "FlyDSLMxfp8NativeTritonExperts", (backend, cls)
    return cls


# -- selection ---------------------------------------------------------------------------------------


def test_knob_unset_vllms_oracle_picks_its_own_native_experts(seam, env, tmp_path):
    env.setenv("TORCH_FLYDSL_DISPATCH_TABLE", table_file(tmp_path / "t.json"))
    torch_flydsl_boot.vllm_register()
    moe_mx.install()  # armed by hand, as if another install had; the knob is still off
    with gfx950_platform():
        backend, cls = oracle().select_mxfp8_moe_backend(moe_config(seam))
    assert backend.value == "TRITON_MXFP8" and cls is native_class()


def test_knob_unset_the_package_install_arms_nothing(seam, env, tmp_path):
    torch_flydsl_boot.vllm_register()
    assert not moe_mx.installed() and getattr(oracle()._select_kernel_cls, moe_mx.WRAPPED, None) is None


def test_knob_on_swaps_the_experts_class_only_where_vllm_picked_its_native_triton_experts(seam, env, tmp_path):
    reroute_on(env, tmp_path, "reference-standin")
    o = oracle()
    cls = flydsl_class(seam)
    assert issubclass(cls, native_class()) and cls is moe_mx.state.experts_class
    assert [k for k in vars(cls) if not k.startswith("_")] == ["apply"]  # vLLM's class but for apply
    with gfx950_platform():  # every other backend's class is vLLM's
        assert o._select_kernel_cls(o.Fp8MoeBackend.EMULATION, moe_config(seam)).__name__ == \
            "Mxfp8EmulationTritonExperts"
        # an explicit --moe-backend keeps vLLM's class
        assert o.select_mxfp8_moe_backend(moe_config(seam, moe_backend="triton"))[1] is native_class()
        env.delenv("TORCH_FLYDSL_VLLM")  # the knob is read when a layer is built
        assert o.select_mxfp8_moe_backend(moe_config(seam))[1] is native_class()
    env.setenv("TORCH_FLYDSL_VLLM", "1")
    common._guarded(moe_mx._register, "again")  # a second post-import firing changes nothing
    assert getattr(o._select_kernel_cls, moe_mx.WRAPPED) is moe_mx.state.select
    uninstall()
    assert getattr(o._select_kernel_cls, moe_mx.WRAPPED, None) is None
    with gfx950_platform():
        assert o.select_mxfp8_moe_backend(moe_config(seam))[1] is native_class()


def test_off_gfx950_vllms_choice_is_unchanged(seam, env, tmp_path):
    """This CPU: vLLM's oracle skips the native experts (and so ours) for the emulation ones."""
    reroute_on(env, tmp_path, "reference-standin")
    assert oracle().select_mxfp8_moe_backend(moe_config(seam))[1].__name__ == "Mxfp8EmulationTritonExperts"


def test_vllms_online_mxfp8_moe_method_gets_the_flydsl_experts(seam, env, tmp_path):
    """One of the five callers, which imports select_mxfp8_moe_backend by name (vLLM only)."""
    if seam.name == "standin":
        pytest.skip("the stand-in has no quantization methods")
    from vllm.config import VllmConfig, set_current_vllm_config
    from vllm.model_executor.layers.quantization.online.mxfp8 import Mxfp8OnlineMoEMethod

    reroute_on(env, tmp_path, "reference-standin")
    with set_current_vllm_config(VllmConfig()), gfx950_platform():
        method = Mxfp8OnlineMoEMethod(moe=moe_config(seam))
    assert method.fp8_backend.value == "TRITON_MXFP8" and method.experts_cls is moe_mx.state.experts_class


# -- which calls FlyDSL serves -------------------------------------------------------------------------


@pytest.mark.emulator
def test_emulator_moe_call_of_table_shapes_runs_two_flydsl_mxfp8_grouped_kernels(seam, env, tmp_path):
    from torch_flydsl.templates.scaled_grouped_gemm.family import FAMILY

    reroute_on(env, tmp_path, "emulator")
    runs, real = [], FAMILY.run_emulated
    env.setattr(FAMILY, "run_emulated", lambda cfg, *a, **kw: runs.append(cfg.key()) or real(cfg, *a, **kw))
    experts, w1, w2 = experts_of(seam, flydsl_class(seam))
    x, ids, topk_weights = routing()
    out = apply(experts, w1, w2, x, ids, topk_weights)
    assert runs == [CFG, CFG] and env.vllm_calls == [] and len(env.acts) == 1
    assert env.acts[0]["args"] == (1.0, 0.0, None)
    w13_err, err = check_against_float64(experts, w1, w2, x, ids, topk_weights, out, env.acts[0])
    assert w13_err < W13_TOLERANCE and err < TOLERANCE, (w13_err, err)
    assert rel_err(out, end_to_end_reference(experts, w1, w2, x, ids, topk_weights)) < 2e-2


@pytest.mark.parametrize("act, quant, dtype", [
    ("SILU", {}, torch.bfloat16), ("SILU", {}, torch.float16),
    ("SWIGLUOAI_UNINTERLEAVE", {"alpha": 1.702, "beta": 1.0, "limit": 7.0}, torch.bfloat16)],
    ids=["silu", "silu fp16", "swigluoai_uninterleave"])
def test_reference_standin_plumbing_table_shapes_run_the_scaled_grouped_family(seam, env, tmp_path, act, quant,
                                                                                dtype):
    reroute_on(env, tmp_path, "reference-standin")
    experts, w1, w2 = experts_of(seam, flydsl_class(seam), act, seed=1, **quant)
    x, ids, topk_weights = routing(seed=1)
    x = x.to(dtype)
    out = apply(experts, w1, w2, x, ids, topk_weights, act)
    assert env.vllm_calls == [] and not out.isnan().any() and len(env.acts) == 1
    assert out.dtype == env.acts[0]["input"].dtype == dtype  # W13's output in the activations' dtype, as vLLM's
    assert env.acts[0]["args"] == ((quant["alpha"], quant["beta"], quant["limit"]) if quant else (1.0, 0.0, None))
    w13_err, err = check_against_float64(experts, w1, w2, x, ids, topk_weights, out, env.acts[0])
    assert w13_err < W13_TOLERANCE and err < TOLERANCE, (w13_err, err)


MISSES = ["tokens not in the table", "no table", "expert map", "expert biases", "router weights on the input", "LoRA",
          "batch invariant", "gelu", "silu with a clamp", "bf16 weights", "no fused quantizer", "config does not fit"]


@pytest.mark.parametrize("case", MISSES)
def test_reference_standin_plumbing_misses_run_vllms_apply(seam, env, tmp_path, case):
    reroute_on(env, tmp_path, "reference-standin", config="mxgrp_m16n16k512_w1x1_s4_g0" if case == "config does not fit"
               else CFG)  # block_k 512 > K: the family declines the call
    quant = {"biases": True} if case == "expert biases" else {"limit": 7.0} if case == "silu with a clamp" else {}
    act = "GELU" if case == "gelu" else "SILU"
    experts, w1, w2 = experts_of(seam, flydsl_class(seam), act, **quant)
    x, ids, topk_weights = routing(tokens=T + 1 if case == "tokens not in the table" else T)
    expert_map = torch.arange(E, dtype=torch.int32) if case == "expert map" else None
    if case == "no table":
        env.delenv("TORCH_FLYDSL_DISPATCH_TABLE")
    elif case == "LoRA":
        experts._lora_context = object()
    elif case == "batch invariant":
        env.setenv("VLLM_BATCH_INVARIANT", "1")
    elif case == "bf16 weights":  # what a layer dequantized at load would hand the experts
        w1, w2 = w1.to(torch.bfloat16), w2.to(torch.bfloat16)
    elif case == "no fused quantizer":
        env.setitem(sys.modules, moe_mx.ACT_MODULE, types.SimpleNamespace())
    out = apply(experts, w1, w2, x, ids, topk_weights, act, expert_map, on_input=case == "router weights on the input")
    assert env.vllm_calls == [tuple(x.shape)] and bool((out == -1).all())
    assert env.acts == []


def test_the_serve_says_why_each_miss_missed(seam, env, tmp_path):
    reroute_on(env, tmp_path, "reference-standin")
    experts, w1, w2 = experts_of(seam, flydsl_class(seam), "GELU")
    x, ids, topk_weights = routing()
    out = torch.empty(T, H, dtype=x.dtype)
    served, why = moe_mx.serve(experts, out, x, w1, w2, topk_weights, ids, activation("GELU"), None, False)
    assert served is None and why.startswith("activation gelu") and "swigluoai_uninterleave" in why
    served, why = moe_mx.serve(experts, out, x[:, :128], w1, w2, topk_weights, ids, activation(), None, False)
    assert served is None and "hidden size" in why
    env.setitem(sys.modules, moe_mx.ACT_MODULE, types.SimpleNamespace())
    served, why = moe_mx.serve(experts, out, x, w1, w2, topk_weights, ids, activation(), None, False)
    assert served is None and why == f"this vLLM has no {moe_mx.ACT_MODULE}.{moe_mx.ACT_NAME}"


def test_a_dispatch_table_names_scaled_grouped_entries_by_their_experts(tmp_path):
    t = dispatch_table.load(table_file(tmp_path / "t.json"))
    assert t.lookup("scaled_grouped_mm", "mxfp8", "nt", False, ROWS, 2 * I, H, E) == CFG
    assert t.lookup("scaled_grouped_mm", "mxfp8", "nt", False, ROWS, H, I, E) == CFG
    assert t.lookup("scaled_grouped_mm", "mxfp8", "nt", False, ROWS, H, I, E + 1) is None
    assert t.lookup("grouped_mm", torch.bfloat16, "nt", False, ROWS, H, I, E) is None
    base = {"op": "scaled_grouped_mm", "dtype": "mxfp8", "m": 1, "n": 256, "k": 256, "config": CFG}
    for bad, says in (({}, "needs groups"), ({"groups": 4, "bias": True}, "entries have no bias"),
                      ({"groups": 4, "dtype": "mxfp4"}, "dtype 'mxfp4' is not one of mxfp8"),
                      ({"groups": 4, "config": "grp_m32n128k64_w1x4_s3_g0"}, "not an MXFP8 grouped GEMM config")):
        with pytest.raises(dispatch_table.TableError, match=says):
            dispatch_table.parse({"format": dispatch_table.FORMAT, "version": 1, "entries": [dict(base, **bad)]})


def test_reference_standin_plumbing_record_shapes_notes_both_gemms_before_any_table(seam, env, tmp_path):
    from torch_flydsl.deploy import record
    from torch_flydsl.deploy.spec import Shape

    env.setattr(record, "_process", None)
    env.setenv("TORCH_FLYDSL_RECORD_SHAPES", str(tmp_path / "shapes.json"))
    reroute_on(env, tmp_path, "reference-standin")
    env.delenv("TORCH_FLYDSL_DISPATCH_TABLE")
    experts, w1, w2 = experts_of(seam, flydsl_class(seam))
    x, ids, topk_weights = routing()
    apply(experts, w1, w2, x, ids, topk_weights)
    assert env.vllm_calls == [tuple(x.shape)]  # no table: vLLM's kernel serves it
    shape = lambda n, k: Shape.of("scaled_grouped_mm", dtype="mxfp8", out_dtype="bfloat16", groups=E,  # noqa: E731
                                  m=ROWS, n=n, k=k)
    assert record._process.shapes == {shape(2 * I, H): 1, shape(H, I): 1}
    record._process.shapes.clear()  # nothing for the at-exit save of this test process
