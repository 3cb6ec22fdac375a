"""The vLLM MXFP8 linear re-route (torch_flydsl.integrations.vllm.mx) against two copies of the
seam: the real vLLM 0.33.0 (scripts/vllm_hook_test.sh) and the stand-in package of vllmkit.py
(here and in CI).

On this CPU, vLLM's native MXFP8 GEMM (a Triton ``dot_scaled`` kernel in
``rocm_native._mxfp8_dot_scaled_linear``) cannot run: every test replaces that one module
function with ``dot_scaled_standin`` (the dequantized float64 product, recording its calls), so
that a call served by vLLM's own ``apply_weights`` is visible and computable. The platform is
made to look like a gfx950 ROCm only around kernel selection (vLLM's quantizer would pick its
Triton path under it). Plumbing tests run the scaled family's float64 reference
(``reference-standin`` in their names); the kernel's arithmetic is checked under the emulator.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import torch_flydsl_boot
from torch_flydsl import dispatch_table
from torch_flydsl.integrations import vllm as hook
from torch_flydsl.integrations.vllm import common
from torch_flydsl.integrations.vllm import mx as vllm_mx
from torch_flydsl.integrations.vllm import mx_linear

from vllmkit import gfx950_platform, module_seam, traced, write_table

CFG = "mx_m32n64k256_w1x2_s3_g0"  # explain scaled_mm 32 64 256 --dtype mxfp8 (baseline)
M, N, K = 32, 64, 256
TOLERANCE = 2.0**-7  # bf16 output of exact MX products vs float64: a wrong kernel lands far above
MX_FILE = vllm_mx.__file__.replace(".pyc", ".py")
SERVE_FILE = mx_linear.__file__.replace(".pyc", ".py")  # the op body shared with the MXFP4 route


@pytest.fixture(scope="module", params=["vllm-0.33", "standin"])
def seam(request, tmp_path_factory):
    return module_seam(request.param, tmp_path_factory)


@pytest.fixture
def env(monkeypatch, tmp_path):
    """No re-route armed, the plugin's variables unset, the table re-read; vLLM's Triton GEMM
    replaced by ``dot_scaled_standin``; all undone after."""
    for name in ("TORCH_FLYDSL_VLLM", "TORCH_FLYDSL_DISPATCH_TABLE", "TORCH_FLYDSL_CACHE_DIR", "TORCH_FLYDSL_EXECUTOR",
                 "TORCH_FLYDSL_DISABLE", "TORCH_FLYDSL_RECORD_SHAPES", "VLLM_BATCH_INVARIANT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(common, "_said", set())
    hook._uninstall()
    dispatch_table.reload()
    import vllm.model_executor.kernels.linear.mxfp8.rocm_native as native

    calls = []

    def dot_scaled_standin(x, w, w_scale):
        calls.append((tuple(x.shape), tuple(w.shape)))
        return mx_product(x, w, w_scale).to(x.dtype)

    monkeypatch.setattr(native, "_mxfp8_dot_scaled_linear", dot_scaled_standin)
    monkeypatch.vllm_calls = calls
    yield monkeypatch
    hook._uninstall()
    monkeypatch.undo()
    dispatch_table.reload()


def linear_module():
    import vllm.model_executor.kernels.linear as linear

    return linear


def quantize(x):
    from vllm.model_executor.layers.quantization.utils.mxfp8_utils import mxfp8_e4m3_quantize

    return mxfp8_e4m3_quantize(x)


def dequant(q, scale):
    """float64 values of an MXFP8 [rows, K] tensor with uint8 E8M0 scales [rows, K/32]."""
    exp = scale.double().repeat_interleave(32, dim=1)[:, : q.shape[1]] - 127
    return q.double() * torch.exp2(exp)


def mx_product(x, w, w_scale):
    """What vLLM's MXFP8 linear computes, exactly: quantize x its way, dequantize, multiply."""
    x_q, x_s = quantize(x)
    return dequant(x_q, x_s) @ dequant(w, w_scale).T


def table_file(path: Path, *entries) -> str:
    """A dispatch table naming (scaled_mm, mxfp8, N, K, CFG) for each (m, bias) of ``entries``."""
    return write_table(path, "scaled_mm", "mxfp8", N, K, CFG, entries)


def rocm_kernel_names() -> list:
    from vllm.platforms import PlatformEnum

    return [c.__name__ for c in linear_module()._POSSIBLE_MXFP8_KERNELS[PlatformEnum.ROCM]]


def reroute_on(env, tmp_path, executor: str, *entries):
    env.setenv("TORCH_FLYDSL_VLLM", "1")
    env.setenv("TORCH_FLYDSL_EXECUTOR", executor)
    env.setenv("TORCH_FLYDSL_DISPATCH_TABLE", table_file(tmp_path / "table.json", *(entries or [(M, False)])))
    torch_flydsl_boot.vllm_register()
    linear_module()
    assert vllm_mx.installed(), common.install_error


def mx_layer(seed: int = 0):
    """An MXFP8 linear layer as vLLM's checkpoint loader leaves it: fp8 weight [N, K], uint8 E8M0
    scales [N, K/32] (codes 120..134: no 32 rows alike, so no block-scaled path)."""
    g = torch.Generator().manual_seed(seed)
    layer = torch.nn.Module()
    w = (torch.randn(N, K, generator=g) * 64).clamp(-448, 448).to(torch.float8_e4m3fn)
    s = torch.randint(120, 135, (N, K // 32), generator=g, dtype=torch.uint8)
    layer.weight = torch.nn.Parameter(w, requires_grad=False)
    layer.weight_scale = torch.nn.Parameter(s, requires_grad=False)
    return layer


def loaded_kernel(layer):
    """The kernel vLLM picks for ``layer`` on a gfx950, after its weights are processed."""
    with gfx950_platform():
        kernel = linear_module().init_mxfp8_linear_kernel(weight_shape=tuple(layer.weight.shape))
    kernel.process_weights_after_loading(layer)
    return kernel


def activations(m=M, lead=None, bias=False):
    g = torch.Generator().manual_seed(100 + m)
    x = torch.randn(*(lead or (m,)), K, generator=g).to(torch.bfloat16)
    b = torch.randn(N, generator=g).to(torch.bfloat16) if bias else None
    return x, b


def ran(codes, name: str) -> bool:
    return any(c.co_filename in (MX_FILE, SERVE_FILE) and c.co_name == name for c in codes)


def rel_err(out, ref) -> float:
    return float((out.double() - ref).abs().max() / ref.abs().max())


# -- knob off: vLLM's kernel list and selection untouched --------------------------------------------


def test_knob_unset_leaves_vllms_mxfp8_kernels_and_choice_unchanged(seam, env, tmp_path):
    env.setenv("TORCH_FLYDSL_DISPATCH_TABLE", table_file(tmp_path / "t.json", (M, False)))
    torch_flydsl_boot.vllm_register()
    before = rocm_kernel_names()
    assert "FlyDSLMxfp8LinearKernel" not in before and before[0] == "RocmDotScaledMxfp8LinearKernel"
    layer = mx_layer()
    kernel = loaded_kernel(layer)
    assert type(kernel).__name__ == "RocmDotScaledMxfp8LinearKernel" and not vllm_mx.installed()
    x, _ = activations()
    out, codes = traced(kernel.apply_weights, layer, x, None)
    assert env.vllm_calls == [((M, K), (N, K))] and not any(c.co_filename in (MX_FILE, SERVE_FILE) for c in codes)


# -- knob on: registration and selection -------------------------------------------------------------


def test_knob_on_registers_the_flydsl_kernel_just_ahead_of_vllms_native_one(seam, env, tmp_path):
    before = rocm_kernel_names()
    reroute_on(env, tmp_path, "reference-standin")
    after = rocm_kernel_names()
    assert after == ["FlyDSLMxfp8LinearKernel"] + before  # vLLM's order otherwise unchanged
    torch_flydsl_boot.vllm_register()
    common._guarded(vllm_mx._register, "again")
    assert rocm_kernel_names() == after  # registered once
    kernel = loaded_kernel(mx_layer())
    assert type(kernel).__name__ == "FlyDSLMxfp8LinearKernel"
    assert isinstance(kernel, vllm_mx.state.base)  # it is vLLM's kernel, with its weight handling
    hook._uninstall()
    assert rocm_kernel_names() == before


def test_off_rocm_the_flydsl_kernel_is_skipped_with_vllms_reason(seam, env, tmp_path):
    reroute_on(env, tmp_path, "reference-standin")
    cls = vllm_mx.state.kernel_class
    assert cls.is_supported() == vllm_mx.state.base.is_supported() == (False, "not ROCm")
    with gfx950_platform():
        assert cls.is_supported() == (True, None)
    env.setenv("TORCH_FLYDSL_VLLM", "0")
    with gfx950_platform():
        assert cls.is_supported() == (False, "TORCH_FLYDSL_VLLM is off")


# -- knob on: which layers and calls FlyDSL serves ----------------------------------------------------


@pytest.mark.emulator
def test_emulator_mxfp8_layer_of_a_table_shape_is_computed_by_the_flydsl_kernel(seam, env, tmp_path):
    from torch_flydsl.templates.scaled_gemm.family import FAMILY

    reroute_on(env, tmp_path, "emulator", (M, False))
    runs, real = [], FAMILY.run_emulated
    env.setattr(FAMILY, "run_emulated", lambda cfg, *a, **kw: runs.append(cfg.key()) or real(cfg, *a, **kw))
    layer = mx_layer()
    kernel = loaded_kernel(layer)
    x, _ = activations(lead=(2, M // 2))  # [2, 16, K]: M is x.numel() // K
    out = kernel.apply_weights(layer, x, None)
    assert runs == [CFG] and env.vllm_calls == []
    assert out.shape == (2, M // 2, N) and out.dtype == torch.bfloat16
    assert rel_err(out.reshape(M, N), mx_product(x.reshape(M, K), layer.weight, layer.weight_scale)) < TOLERANCE


def test_reference_standin_plumbing_table_shape_runs_the_scaled_custom_op_with_bias(seam, env, tmp_path):
    reroute_on(env, tmp_path, "reference-standin", (M, True))
    layer = mx_layer()
    kernel = loaded_kernel(layer)
    x, b = activations(bias=True)
    out, codes = traced(kernel.apply_weights, layer, x, b)
    assert ran(codes, "serve") and env.vllm_calls == []
    # the stand-in's float64 result of vLLM's quantized operands, bias added before one rounding
    assert torch.equal(out, (mx_product(x, layer.weight, layer.weight_scale) + b.double()).to(torch.bfloat16))


@pytest.mark.parametrize("case", ["M not in the table", "bias not in the table", "batch invariant"])
def test_reference_standin_plumbing_misses_run_vllms_apply_weights(seam, env, tmp_path, case):
    reroute_on(env, tmp_path, "reference-standin", (M, False))
    layer = mx_layer()
    m, bias = (M + 1, False) if case == "M not in the table" else (M, case == "bias not in the table")
    if case == "batch invariant":
        env.setenv("VLLM_BATCH_INVARIANT", "1")
    kernel = loaded_kernel(layer)
    x, b = activations(m=m, bias=bias)
    out, codes = traced(kernel.apply_weights, layer, x, b)
    assert env.vllm_calls == [((m, K), (N, K))]  # vLLM's GEMM computed it
    assert vllm_mx.state.base.apply_weights.__code__ in codes
    expected = mx_product(x, layer.weight, layer.weight_scale).to(torch.bfloat16)
    assert torch.equal(out, expected if b is None else expected + b)
    # the layer was routed (the table names its [N, K]) unless batch invariance is on
    assert ran(codes, "serve") == (case != "batch invariant")


def test_reference_standin_plumbing_layers_the_table_does_not_name_never_reach_the_op(seam, env, tmp_path):
    reroute_on(env, tmp_path, "reference-standin", (M, False))
    layer = mx_layer()
    layer.weight = torch.nn.Parameter(layer.weight[:, : K - 128].contiguous(), requires_grad=False)  # [N, 128]
    layer.weight_scale = torch.nn.Parameter(layer.weight_scale[:, : (K - 128) // 32].contiguous(), requires_grad=False)
    kernel = loaded_kernel(layer)
    assert getattr(layer, vllm_mx.ROUTE_ATTR) is False
    x = torch.randn(M, K - 128).to(torch.bfloat16)
    out, codes = traced(kernel.apply_weights, layer, x, None)
    assert env.vllm_calls == [((M, K - 128), (N, K - 128))] and not ran(codes, "_op_impl")


def test_reference_standin_plumbing_compiled_fullgraph_holds_the_op_with_a_symbolic_m(seam, env, tmp_path):
    """vLLM compiles its models with fullgraph=True and a dynamic token count: the routed layer
    traces to one graph holding the opaque op, and M is decided per call inside it."""
    reroute_on(env, tmp_path, "reference-standin", (M, False))
    layer = mx_layer()
    kernel = loaded_kernel(layer)
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    fn = torch.compile(lambda x: kernel.apply_weights(layer, x, None), backend=backend, fullgraph=True, dynamic=True)
    hit, _ = activations()
    miss, _ = activations(m=M + 5)
    expected = [mx_product(v, layer.weight, layer.weight_scale).to(torch.bfloat16) for v in (hit, miss)]
    assert torch.equal(fn(hit), expected[0]) and env.vllm_calls == []
    assert torch.equal(fn(miss), expected[1]) and env.vllm_calls == [((M + 5, K), (N, K))]
    assert len(graphs) == 1
    targets = [str(n.target) for n in graphs[0].graph.nodes if n.op == "call_function"]
    assert [t for t in targets if t.startswith("torch_flydsl.vllm_mxfp8_linear")], targets


@pytest.mark.parametrize("table", ["table names the layer", "no table yet"])
def test_reference_standin_plumbing_record_shapes_notes_mxfp8_calls_hit_or_miss(seam, env, tmp_path, table):
    """TORCH_FLYDSL_RECORD_SHAPES: every MXFP8 layer's calls are recorded, before any table
    exists too (then vLLM's kernel serves them all)."""
    from torch_flydsl.deploy import record
    from torch_flydsl.deploy.spec import Shape

    env.setattr(record, "_process", None)
    env.setenv("TORCH_FLYDSL_RECORD_SHAPES", str(tmp_path / "shapes.json"))
    reroute_on(env, tmp_path, "reference-standin", (M, False))
    if table == "no table yet":
        env.delenv("TORCH_FLYDSL_DISPATCH_TABLE")
        assert not dispatch_table.active().entries
    layer = mx_layer()
    kernel = loaded_kernel(layer)
    kernel.apply_weights(layer, activations()[0], None)
    kernel.apply_weights(layer, *activations(m=M + 3, bias=True))
    assert record._process.shapes == {Shape.of("scaled_mm", dtype="mxfp8", out_dtype="bfloat16", bias=False, m=M, n=N, k=K): 1,
                                      Shape.of("scaled_mm", dtype="mxfp8", out_dtype="bfloat16", bias=True, m=M + 3, n=N, k=K): 1}
    assert env.vllm_calls == [((M + 3, K), (N, K))] if table != "no table yet" else len(env.vllm_calls) == 2
    record._process.shapes.clear()  # nothing for the at-exit save of this test process


def test_reference_standin_plumbing_an_error_deciding_a_route_keeps_the_layer_on_vllms_kernel(seam, env, tmp_path):
    reroute_on(env, tmp_path, "reference-standin", (M, False))

    def broken(weight, weight_scale):
        raise RuntimeError("stand-in failure")

    env.setattr(vllm_mx, "routable", broken)
    layer = mx_layer()
    kernel = loaded_kernel(layer)  # the load itself must not fail
    assert getattr(layer, vllm_mx.ROUTE_ATTR) is False
    x, _ = activations()
    kernel.apply_weights(layer, x, None)
    assert env.vllm_calls == [((M, K), (N, K))]


def test_reference_standin_plumbing_a_bug_of_ours_at_call_time_warns_once_and_vllm_serves(seam, env, tmp_path,
                                                                                        caplog):
    import logging

    reroute_on(env, tmp_path, "reference-standin", (M, False))

    def planted(*args):
        raise KeyError("planted bug")

    env.setattr(mx_linear, "serve", planted)
    layer = mx_layer()
    kernel = loaded_kernel(layer)
    x, _ = activations()
    with caplog.at_level(logging.WARNING, logger="torch_flydsl"):
        outs = [kernel.apply_weights(layer, x, None) for _ in range(2)]
    assert env.vllm_calls == [((M, K), (N, K))] * 2
    assert torch.equal(outs[0], mx_product(x, layer.weight, layer.weight_scale).to(torch.bfloat16))
    said = [r.getMessage() for r in caplog.records if "planted bug" in r.getMessage()]
    assert said == [f"{vllm_mx.OP_NAME}: vLLM's kernel runs: KeyError: 'planted bug'"], caplog.text
