"""The vLLM fused-MoE re-route (torch_flydsl.integrations.vllm.moe) against two copies of the seam:
the real vLLM 0.33.0 (scripts/vllm_hook_test.sh) and the stand-in package of vllmkit.py (here
and in CI).

On this CPU, vLLM's Triton MoE kernels and its ``_C`` activation and ``moe_sum`` ops cannot run
(the CUDA wheel registers them for GPUs only). Every test replaces, on the experts object, the
activation with ``silu_and_mul_standin`` and ``moe_sum`` with ``moe_sum_standin`` (both written
here in float32), and ``TritonExperts.apply`` with ``vllm_apply_standin``, which records that
vLLM's path was taken. Plumbing tests run the grouped family's float64 reference
(``reference-standin`` in their names); the kernels' arithmetic is checked under the emulator.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import torch_flydsl_boot
from torch_flydsl import dispatch_table
from torch_flydsl.integrations import vllm as hook
from torch_flydsl.integrations.vllm import common
from torch_flydsl.integrations.vllm import moe as vllm_moe

from vllmkit import module_seam

CFG = "grp_m32n128k64_w1x4_s3_g0"  # explain grouped_mm 32 128 128 --groups 4 (and 32 128 64)
T, TOP_K, E, H, I = 16, 2, 4, 128, 64  # tokens, experts per token, experts, hidden, intermediate
ROWS = T * TOP_K
TOLERANCE = 2e-2  # bf16 intermediates vs float64: a right kernel lands far below, a wrong one far above


@pytest.fixture(scope="module", params=["vllm-0.33", "standin"])
def seam(request, tmp_path_factory):
    return module_seam(request.param, tmp_path_factory)


def silu_and_mul_standin(activation, output, input):
    d = input.shape[-1] // 2
    x = input.float()
    output.copy_(torch.nn.functional.silu(x[:, :d]) * x[:, d:])


def moe_sum_standin(input, output, topk_ids=None, expert_map=None):
    output.copy_(input.float().sum(dim=1))


@pytest.fixture
def env(monkeypatch, tmp_path):
    for name in ("TORCH_FLYDSL_VLLM", "TORCH_FLYDSL_DISPATCH_TABLE", "TORCH_FLYDSL_CACHE_DIR", "TORCH_FLYDSL_EXECUTOR",
                 "TORCH_FLYDSL_DISABLE", "VLLM_BATCH_INVARIANT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(common, "_said", set())
    hook._uninstall()
    dispatch_table.reload()
    import vllm.model_executor.layers.fused_moe.experts.triton_moe as triton_moe

    calls = []

    def vllm_apply_standin(self, output, hidden_states, *rest):
        calls.append(tuple(hidden_states.shape))
        output.fill_(-1.0)  # what vLLM's kernel "computed": only that it ran matters here

    monkeypatch.setattr(triton_moe.TritonExperts, "apply", vllm_apply_standin)
    monkeypatch.vllm_calls = calls
    yield monkeypatch
    hook._uninstall()
    monkeypatch.undo()
    dispatch_table.reload()


def table_file(path: Path, rows=ROWS) -> str:
    import json

    entries = [{"op": "grouped_mm", "dtype": "bfloat16", "layout": "nt", "m": rows, "n": n, "k": k, "groups": E,
                "config": CFG} for n, k in ((2 * I, H), (H, I))]
    path.write_text(json.dumps({"format": dispatch_table.FORMAT, "version": dispatch_table.VERSION,
                                "arch": "gfx950", "entries": entries}))
    return str(path)


def reroute_on(env, tmp_path, executor: str, rows=ROWS):
    env.setenv("TORCH_FLYDSL_VLLM", "1")
    env.setenv("TORCH_FLYDSL_EXECUTOR", executor)
    env.setenv("TORCH_FLYDSL_DISPATCH_TABLE", table_file(tmp_path / "table.json", rows))
    torch_flydsl_boot.vllm_register()
    import vllm.model_executor.layers.fused_moe.unquantized_fused_moe_method  # noqa: F401 - fires the hook

    assert vllm_moe.installed(), common.install_error


def moe_config(seam):
    if seam.name == "standin":
        return None
    from vllm.model_executor.layers.fused_moe.activation import MoEActivation
    from vllm.model_executor.layers.fused_moe.config import (FusedMoEConfig, FusedMoEParallelConfig,
                                                             RoutingMethodType)

    return FusedMoEConfig(num_experts=E, experts_per_token=TOP_K, hidden_dim=H, intermediate_size=I,
                          num_local_experts=E, num_logical_experts=E, activation=MoEActivation.SILU, device="cpu",
                          routing_method=RoutingMethodType.Renormalize,
                          moe_parallel_config=FusedMoEParallelConfig.make_no_parallel(), in_dtype=torch.bfloat16)


def experts_of(seam, cls):
    from vllm.model_executor.layers.fused_moe.config import FUSED_MOE_UNQUANTIZED_CONFIG

    experts = cls(moe_config(seam), FUSED_MOE_UNQUANTIZED_CONFIG)
    experts.activation = silu_and_mul_standin
    experts.moe_sum = moe_sum_standin
    return experts


def problem(tokens=T, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(tokens, H, generator=g).to(torch.bfloat16)
    w1 = (torch.randn(E, 2 * I, H, generator=g) / H**0.5).to(torch.bfloat16)
    w2 = (torch.randn(E, H, I, generator=g) / I**0.5).to(torch.bfloat16)
    ids = torch.stack([torch.randperm(E, generator=g)[:TOP_K] for _ in range(tokens)]).to(torch.int32)
    ids[0] = torch.tensor([0, 1])  # expert 3 may get no row at all: an empty group
    weights = torch.rand(tokens, TOP_K, generator=g).softmax(-1)
    return x, w1, w2, weights, ids


def reference(x, w1, w2, weights, ids):
    out = torch.zeros(x.shape[0], H, dtype=torch.float64)
    for t in range(x.shape[0]):
        for j in range(ids.shape[1]):
            e = int(ids[t, j])
            h = x[t].double() @ w1[e].double().T
            a = torch.nn.functional.silu(h[:I]) * h[I:]
            out[t] += weights[t, j].double() * (a @ w2[e].double().T)
    return out


def apply(experts, x, w1, w2, weights, ids, expert_map=None, workspaces=False):
    """``experts.apply`` as vLLM's modular kernel calls it; with ``workspaces``, vLLM's two
    workspaces (NaN-filled, shaped as TritonExperts asks) and ``output`` inside workspace13."""
    from vllm.model_executor.layers.fused_moe.activation import MoEActivation

    ws13 = ws2 = None
    if workspaces:
        tokens = x.shape[0]
        ws13 = torch.full((tokens, TOP_K, max(I, H)), float("nan"), dtype=x.dtype)
        ws2 = torch.full((tokens, TOP_K, max(2 * I, H)), float("nan"), dtype=x.dtype)
        out = ws13.view(-1)[: tokens * H].view(tokens, H)
    else:
        out = torch.full((x.shape[0], H), float("nan"), dtype=x.dtype)
    experts.apply(out, x, w1, w2, weights, ids, MoEActivation.SILU, E, expert_map, None, None, ws13, ws2, None,
                  False)
    return out


def rel_err(out, ref) -> float:
    return float((out.double() - ref).abs().max() / ref.abs().max())


def method_with_triton_experts(env, seam):
    """``UnquantizedFusedMoEMethod(moe)`` as vLLM builds it where its oracle picks TritonExperts
    (the oracle itself answers for this CPU otherwise)."""
    import vllm.model_executor.layers.fused_moe.unquantized_fused_moe_method as methods
    from vllm.model_executor.layers.fused_moe.experts.triton_moe import TritonExperts

    if seam.name == "standin":
        return methods.UnquantizedFusedMoEMethod(moe_config(seam))
    from vllm.config import VllmConfig, set_current_vllm_config
    from vllm.model_executor.layers.fused_moe.oracle.unquantized import UnquantizedMoeBackend

    backend = UnquantizedMoeBackend.TRITON
    env.setattr(methods, "select_unquantized_moe_backend", lambda moe_config: (backend, TritonExperts))
    with set_current_vllm_config(VllmConfig()):  # what a CustomOp reads when it is built
        return methods.UnquantizedFusedMoEMethod(moe_config(seam))


# -- registration ------------------------------------------------------------------------------------


def test_knob_unset_vllm_builds_its_own_method_and_experts(seam, env, tmp_path):
    from vllm.model_executor.custom_op import op_registry_oot
    from vllm.model_executor.layers.fused_moe.experts.triton_moe import TritonExperts

    env.setenv("TORCH_FLYDSL_DISPATCH_TABLE", table_file(tmp_path / "t.json"))
    torch_flydsl_boot.vllm_register()
    method = method_with_triton_experts(env, seam)
    assert type(method).__name__ == "UnquantizedFusedMoEMethod" and method.experts_cls is TritonExperts
    assert "UnquantizedFusedMoEMethod" not in op_registry_oot and not vllm_moe.installed()


def test_knob_on_vllms_method_is_built_as_ours_with_flydsl_experts(seam, env, tmp_path):
    from vllm.model_executor.custom_op import op_registry_oot
    from vllm.model_executor.layers.fused_moe.experts.triton_moe import TritonExperts

    reroute_on(env, tmp_path, "reference-standin")
    method = method_with_triton_experts(env, seam)
    assert type(method).__name__ == "FlyDSLUnquantizedFusedMoEMethod"
    assert type(method).name == "unquantized_fused_moe"  # vLLM's custom-op name, for its custom_ops switch
    assert method.experts_cls is vllm_moe.state.experts_class and issubclass(method.experts_cls, TritonExperts)
    common._guarded(vllm_moe._register, "again")  # a second post-import firing changes nothing
    assert op_registry_oot["UnquantizedFusedMoEMethod"] is type(method)
    hook._uninstall()
    assert "UnquantizedFusedMoEMethod" not in op_registry_oot


# -- which calls FlyDSL serves -------------------------------------------------------------------------


@pytest.mark.emulator
def test_emulator_moe_call_of_table_shapes_is_computed_by_two_flydsl_grouped_kernels(seam, env, tmp_path):
    from torch_flydsl.templates.grouped_gemm.family import FAMILY

    reroute_on(env, tmp_path, "emulator")
    runs, real = [], FAMILY.run_emulated
    env.setattr(FAMILY, "run_emulated", lambda cfg, *a, **kw: runs.append(cfg.key()) or real(cfg, *a, **kw))
    experts = experts_of(seam, vllm_moe.state.experts_class)
    x, w1, w2, weights, ids = problem()
    out = apply(experts, x, w1, w2, weights, ids)
    assert runs == [CFG, CFG] and env.vllm_calls == []
    assert rel_err(out, reference(x, w1, w2, weights, ids)) < TOLERANCE


@pytest.mark.parametrize("workspaces", [False, True], ids=["own buffers", "vllm workspaces, output inside one"])
def test_reference_standin_plumbing_table_shapes_run_the_grouped_custom_op(seam, env, tmp_path, workspaces):
    reroute_on(env, tmp_path, "reference-standin")
    experts = experts_of(seam, vllm_moe.state.experts_class)
    x, w1, w2, weights, ids = problem(seed=1)
    out = apply(experts, x, w1, w2, weights, ids, workspaces=workspaces)
    assert env.vllm_calls == [] and not out.isnan().any()
    assert rel_err(out, reference(x, w1, w2, weights, ids)) < TOLERANCE


@pytest.mark.parametrize("case", ["tokens not in the table", "expert map", "LoRA", "batch invariant", "no table"])
def test_reference_standin_plumbing_misses_run_vllms_apply(seam, env, tmp_path, case):
    reroute_on(env, tmp_path, "reference-standin")
    experts = experts_of(seam, vllm_moe.state.experts_class)
    x, w1, w2, weights, ids = problem(tokens=T + 1 if case == "tokens not in the table" else T)
    expert_map = torch.arange(E, dtype=torch.int32) if case == "expert map" else None
    if case == "LoRA":
        experts._lora_context = object()
    elif case == "batch invariant":
        env.setenv("VLLM_BATCH_INVARIANT", "1")
    elif case == "no table":
        env.delenv("TORCH_FLYDSL_DISPATCH_TABLE")
    out = apply(experts, x, w1, w2, weights, ids, expert_map)
    assert env.vllm_calls == [tuple(x.shape)] and bool((out == -1).all())


def test_a_dispatch_table_names_grouped_entries_by_their_experts(tmp_path):
    t = dispatch_table.load(table_file(tmp_path / "t.json"))
    bf = torch.bfloat16
    assert t.lookup("grouped_mm", bf, "nt", False, ROWS, 2 * I, H, E) == CFG
    assert t.lookup("grouped_mm", bf, "nt", False, ROWS, H, I, E) == CFG
    assert t.lookup("grouped_mm", bf, "nt", False, ROWS, H, I, E + 1) is None
    assert t.lookup("mm", bf, "nt", False, ROWS, H, I) is None
    with pytest.raises(dispatch_table.TableError, match="needs groups"):
        dispatch_table.parse({"format": dispatch_table.FORMAT, "version": 1, "entries": [
            {"op": "grouped_mm", "dtype": "bfloat16", "m": 1, "n": 8, "k": 8, "config": CFG}]})


def test_reference_standin_plumbing_record_shapes_notes_both_grouped_gemms_before_any_table(seam, env, tmp_path):
    from torch_flydsl.deploy import record
    from torch_flydsl.deploy.spec import Shape

    env.setattr(record, "_process", None)
    env.setenv("TORCH_FLYDSL_RECORD_SHAPES", str(tmp_path / "shapes.json"))
    reroute_on(env, tmp_path, "reference-standin")
    env.delenv("TORCH_FLYDSL_DISPATCH_TABLE")
    experts = experts_of(seam, vllm_moe.state.experts_class)
    x, w1, w2, weights, ids = problem()
    apply(experts, x, w1, w2, weights, ids)
    assert env.vllm_calls == [tuple(x.shape)]  # no table: vLLM's kernel serves it
    assert record._process.shapes == {Shape.of("grouped_mm", dtype="bfloat16", groups=E, b_major="col", top_k=TOP_K, m=ROWS, n=2 * I, k=H): 1,
                                      Shape.of("grouped_mm", dtype="bfloat16", groups=E, b_major="col", top_k=TOP_K, m=ROWS, n=H, k=I): 1}
    record._process.shapes.clear()  # nothing for the at-exit save of this test process
