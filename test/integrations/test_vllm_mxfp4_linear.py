"""The vLLM MXFP4 linear re-route (torch_flydsl.integrations.vllm.mxfp4) against two copies of the
seam: the real vLLM 0.33.0 (scripts/vllm_hook_test.sh) and the stand-in of vllmkit_mxfp4.py (here
and in CI).

On this CPU neither AITER nor its GEMM exists: the platform is made to look like a gfx950 ROCm
with AITER around kernel selection, and ``torch.ops.vllm.gemm_with_dynamic_quant`` (the op AITER's
kernel class calls; vLLM defines it only where AITER is installed) is defined here as
``aiter_gemm_standin``: the float64 product of the activations quantized by the plugin's
quantizer (AITER's rule, ``templates.scaled_gemm.quantize``) and the weights in the layout AITER's
Triton path leaves them (scales transposed to ``[K/32, N]``), recording its calls. Plumbing tests
run the scaled family's float64 reference (``reference-standin`` in their names); the kernel's
arithmetic is checked under the emulator.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest
import torch

import torch_flydsl_boot
from torch_flydsl import dispatch_table
from torch_flydsl.integrations import vllm as hook
from torch_flydsl.integrations.vllm import common, mx_linear
from torch_flydsl.integrations.vllm import mxfp4 as vllm_mxfp4
from torch_flydsl.templates.scaled_gemm.quantize import mxfp4_quantize
from torch_flydsl.templates.scaled_gemm.reference import e2m1_values

from vllmkit import gfx950_platform, module_seam, traced, write_table

CFG = "mx_m32n64k256_w1x2_s3_g0"  # explain scaled_mm 32 64 256 --dtype mxfp4 (baseline)
M, N, K = 32, 64, 256
TOLERANCE = 2.0**-7  # bf16 output of exact MX products vs float64: a wrong kernel lands far above
SERVE_FILE = mx_linear.__file__.replace(".pyc", ".py")
_GEMM_HOOK: list = []  # the active test's aiter_gemm_standin (the op below calls it)


def _define_aiter_gemm_op():
    if hasattr(torch.ops.vllm, "gemm_with_dynamic_quant"):
        return None
    lib = torch.library.Library("vllm", "FRAGMENT")
    lib.define("gemm_with_dynamic_quant(Tensor x, Tensor weight, Tensor weight_scale, bool rocm_use_aiter_fp4_asm_gemm"
               "=False, ScalarType? out_dtype=None, Tensor? x_scales=None) -> Tensor")
    lib.impl("gemm_with_dynamic_quant", lambda *a, **kw: _GEMM_HOOK[-1](*a, **kw), "CompositeExplicitAutograd")
    return lib


@pytest.fixture(scope="module", params=["vllm-0.33", "standin"])
def seam(request, tmp_path_factory):
    found = module_seam(request.param, tmp_path_factory)
    found.lib = _define_aiter_gemm_op()
    return found


@pytest.fixture
def env(monkeypatch, tmp_path):
    """No re-route armed, the plugin's variables unset, the table re-read; AITER's GEMM stood in
    by ``aiter_gemm_standin``; all undone after."""
    for name in ("TORCH_FLYDSL_VLLM", "TORCH_FLYDSL_VLLM_MXFP4", "TORCH_FLYDSL_DISPATCH_TABLE", "TORCH_FLYDSL_CACHE_DIR",
                 "TORCH_FLYDSL_EXECUTOR", "TORCH_FLYDSL_DISABLE", "TORCH_FLYDSL_RECORD_SHAPES", "VLLM_BATCH_INVARIANT"):
        monkeypatch.delenv(name, raising=False)
    # vLLM's RDNA3 kernel, first in its ROCm list, asks the GPU its arch: skip it by vLLM's own knob
    monkeypatch.setenv("VLLM_DISABLED_KERNELS", "Rdna3W4A8MxFp4LinearKernel")
    monkeypatch.setattr(common, "_said", set())
    hook._uninstall()
    vllm_mxfp4._uninstall()
    dispatch_table.reload()
    calls = []

    def aiter_gemm_standin(x, weight, weight_scale, asm=False, out_dtype=None, x_scales=None):
        calls.append((tuple(x.shape), tuple(weight.shape), tuple(weight_scale.shape)))
        return mxfp4_product(x, weight, weight_scale.T).to(out_dtype or x.dtype)

    _GEMM_HOOK.append(aiter_gemm_standin)
    monkeypatch.vllm_calls = calls
    yield monkeypatch
    _GEMM_HOOK.pop()
    vllm_mxfp4._uninstall()
    hook._uninstall()
    monkeypatch.undo()
    dispatch_table.reload()


def dequant(packed, scale):
    """float64 values of packed E2M1 ``[rows, K/2]`` with uint8 E8M0 scales ``[rows, K/32]``."""
    vals = torch.stack((e2m1_values(packed & 0xF), e2m1_values(packed >> 4)), dim=2).reshape(packed.shape[0], -1)
    return vals * torch.exp2(scale.double().repeat_interleave(32, dim=1) - 127)


def mxfp4_product(x, w, w_scale):
    """What an MXFP4 W4A4 linear computes exactly: x quantized by the rule, dequantized, times W."""
    x_q, x_s = mxfp4_quantize(x.reshape(-1, x.shape[-1]))
    return dequant(x_q, x_s) @ dequant(w, w_scale).T


@contextlib.contextmanager
def gfx950_with_aiter():
    """vLLM's current platform answering as a ROCm gfx950 with AITER (kernel selection only)."""
    import vllm._aiter_ops as aiter_ops

    found = aiter_ops.is_aiter_found_and_supported
    asm = aiter_ops.rocm_aiter_ops.__dict__["is_asm_fp4_gemm_supported"]
    aiter_ops.rocm_aiter_ops.is_asm_fp4_gemm_supported = staticmethod(lambda: False)  # AITER's Triton GEMM path
    aiter_ops.is_aiter_found_and_supported = lambda: True
    try:
        with gfx950_platform():
            yield
    finally:
        aiter_ops.is_aiter_found_and_supported = found
        aiter_ops.rocm_aiter_ops.is_asm_fp4_gemm_supported = asm


def linear_module():
    import vllm.model_executor.kernels.linear as linear

    return linear


def rocm_kernel_names() -> list:
    from vllm.platforms import PlatformEnum

    return [c.__name__ for c in linear_module()._POSSIBLE_MXFP4_KERNELS[PlatformEnum.ROCM]]


def reroute_on(env, tmp_path, executor: str, *entries, opt_in: bool = True):
    env.setenv("TORCH_FLYDSL_VLLM", "1")
    if opt_in:
        env.setenv("TORCH_FLYDSL_VLLM_MXFP4", "1")
    env.setenv("TORCH_FLYDSL_EXECUTOR", executor)
    env.setenv("TORCH_FLYDSL_DISPATCH_TABLE",
               write_table(tmp_path / "table.json", "scaled_mm", "mxfp4", N, K, CFG, entries or [(M, False)]))
    torch_flydsl_boot.vllm_register()
    linear_module()
    assert vllm_mxfp4.installed(), common.install_error


def mxfp4_layer(k: int = K, seed: int = 0):
    """An MXFP4 linear layer as vLLM's checkpoint loader leaves it: packed E2M1 uint8 [N, K/2],
    E8M0 uint8 scales [N, K/32] (codes 118..130)."""
    g = torch.Generator().manual_seed(seed)
    layer = torch.nn.Module()
    w = torch.randint(0, 256, (N, k // 2), generator=g, dtype=torch.uint8)
    s = torch.randint(118, 131, (N, k // 32), generator=g, dtype=torch.uint8)
    layer.weight = torch.nn.Parameter(w, requires_grad=False)
    layer.weight_scale = torch.nn.Parameter(s, requires_grad=False)
    return layer


def loaded_kernel(layer, activation="dynamic"):
    """The kernel vLLM picks for ``layer`` on a gfx950 with AITER, after its weights are processed;
    ``activation``: ``dynamic`` (W4A4, kMxfp4Dynamic) or ``none`` (weight-only)."""
    from vllm.model_executor.layers.quantization.utils.quant_utils import kMxfp4Dynamic

    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)  # vLLM builds layers under the model's dtype (AITER's out_dtype)
    try:
        with gfx950_with_aiter():
            kernel = linear_module().init_mxfp4_linear_kernel(kMxfp4Dynamic if activation == "dynamic" else None)
    finally:
        torch.set_default_dtype(default)
    kernel.process_weights_after_loading(layer)
    return kernel


def activations(m=M, lead=None, bias=False, k=K):
    g = torch.Generator().manual_seed(100 + m)
    x = torch.randn(*(lead or (m,)), k, generator=g).to(torch.bfloat16)
    b = torch.randn(N, generator=g).to(torch.bfloat16) if bias else None
    return x, b


def original(layer):
    """The checkpoint's weight and scales (AITER's Triton path leaves the scales transposed)."""
    return layer.weight.data, layer.weight_scale.data.T


def ran(codes, name: str) -> bool:
    return any(c.co_filename in (SERVE_FILE, vllm_mxfp4.__file__) and c.co_name == name for c in codes)


def rel_err(out, ref) -> float:
    return float((out.double() - ref).abs().max() / ref.abs().max())


# -- registration and selection -----------------------------------------------------------------------


def test_opt_in_off_leaves_vllms_aiter_kernel_selected_with_the_reason_named(seam, env, tmp_path):
    reroute_on(env, tmp_path, "reference-standin", opt_in=False)
    names = rocm_kernel_names()
    assert names.index("FlyDSLAiterMxfp4LinearKernel") + 1 == names.index("AiterMxfp4LinearKernel")
    assert names.index("FlyDSLEmulationMxfp4LinearKernel") + 1 == names.index("EmulationMxfp4LinearKernel")
    flydsl = linear_module()._POSSIBLE_MXFP4_KERNELS[vllm_mxfp4_rocm()][names.index("FlyDSLAiterMxfp4LinearKernel")]
    assert flydsl.is_supported() == (False, "TORCH_FLYDSL_VLLM_MXFP4 is off")
    layer = mxfp4_layer()
    kernel = loaded_kernel(layer)
    assert type(kernel).__name__ == "AiterMxfp4LinearKernel"
    kernel.apply_weights(layer, activations()[0], None)
    assert env.vllm_calls == [((M, K), (N, K // 2), (K // 32, N))]


def vllm_mxfp4_rocm():
    from vllm.platforms import PlatformEnum

    return PlatformEnum.ROCM


def test_opt_in_on_selects_the_flydsl_subclass_of_aiters_kernel(seam, env, tmp_path):
    reroute_on(env, tmp_path, "reference-standin")
    layer = mxfp4_layer()
    kernel = loaded_kernel(layer)
    assert type(kernel).__name__ == "FlyDSLAiterMxfp4LinearKernel"
    assert type(kernel).__mro__[1].__name__ == "AiterMxfp4LinearKernel"
    # the checkpoint's weights kept for FlyDSL: the weight is the base's own tensor (no copy), the
    # scales are the untransposed [N, K/32] the base replaced
    w, s = getattr(layer, vllm_mxfp4.WEIGHT), getattr(layer, vllm_mxfp4.SCALE)
    assert w.data_ptr() == layer.weight.data_ptr() and tuple(s.shape) == (N, K // 32)
    assert torch.equal(s, layer.weight_scale.data.T)
    assert vllm_mxfp4.state.kept_bytes == s.numel()


# -- which layers and calls FlyDSL serves ---------------------------------------------------------------


@pytest.mark.emulator
def test_emulator_mxfp4_layer_of_a_table_shape_is_computed_by_the_flydsl_kernel(seam, env, tmp_path):
    from torch_flydsl.templates.scaled_gemm.family import FAMILY

    reroute_on(env, tmp_path, "emulator", (M, False))
    runs, real = [], FAMILY.run_emulated
    env.setattr(FAMILY, "run_emulated", lambda cfg, *a, **kw: runs.append(cfg.key()) or real(cfg, *a, **kw))
    layer = mxfp4_layer()
    kernel = loaded_kernel(layer)
    x, _ = activations(lead=(2, M // 2))  # [2, 16, K]: M is x.numel() // K
    out = kernel.apply_weights(layer, x, None)
    assert runs == [CFG] and env.vllm_calls == []
    assert out.shape == (2, M // 2, N) and out.dtype == torch.bfloat16
    assert rel_err(out.reshape(M, N), mxfp4_product(x, *original(layer))) < TOLERANCE


def test_reference_standin_plumbing_table_shape_runs_the_scaled_op_with_bias_in_one_rounding(seam, env, tmp_path):
    reroute_on(env, tmp_path, "reference-standin", (M, True))
    layer = mxfp4_layer()
    kernel = loaded_kernel(layer)
    x, b = activations(bias=True)
    out, codes = traced(kernel.apply_weights, layer, x, b)
    assert ran(codes, "serve") and env.vllm_calls == []
    assert torch.equal(out, (mxfp4_product(x, *original(layer)) + b.double()).to(torch.bfloat16))


@pytest.mark.parametrize("case", ["M not in the table", "bias not in the table", "batch invariant"])
def test_reference_standin_plumbing_misses_run_vllms_kernel_on_its_own_weights(seam, env, tmp_path, case):
    reroute_on(env, tmp_path, "reference-standin", (M, False))
    layer = mxfp4_layer()
    m, bias = (M + 1, False) if case == "M not in the table" else (M, case == "bias not in the table")
    if case == "batch invariant":
        env.setenv("VLLM_BATCH_INVARIANT", "1")
    kernel = loaded_kernel(layer)
    x, b = activations(m=m, bias=bias)
    out, codes = traced(kernel.apply_weights, layer, x, b)
    assert env.vllm_calls == [((m, K), (N, K // 2), (K // 32, N))]  # AITER's GEMM, its transposed scales
    expected = mxfp4_product(x, *original(layer)).to(torch.bfloat16)
    assert torch.equal(out, expected if b is None else expected + b)
    assert ran(codes, "serve") == (case != "batch invariant")  # routed unless batch invariance is on


@pytest.mark.parametrize("why", ["weight-only (no activation quantization)", "[N, K] not in the table"])
def test_reference_standin_plumbing_unrouted_layers_never_reach_the_op(seam, env, tmp_path, why):
    reroute_on(env, tmp_path, "reference-standin", (M, False))
    if why.startswith("weight-only"):  # AITER's kernel takes W4A4 only: vLLM's emulation kernel (quark) serves it
        import vllm.model_executor.kernels.linear.mxfp4.emulation as emulation

        env.setattr(emulation, "has_quark", lambda: True)
    layer = mxfp4_layer(k=K if why.startswith("weight-only") else K - 128)
    kernel = loaded_kernel(layer, activation="none" if why.startswith("weight-only") else "dynamic")
    assert not hasattr(layer, vllm_mxfp4.ROUTE_ATTR) and not hasattr(layer, vllm_mxfp4.WEIGHT)
    if why.startswith("weight-only"):
        assert type(kernel).__name__ == "FlyDSLEmulationMxfp4LinearKernel"
        return  # the emulation kernel's weight-only path is vLLM's (quark) to compute; nothing of ours runs
    x = activations(k=K - 128)[0]
    out, codes = traced(kernel.apply_weights, layer, x, None)
    assert env.vllm_calls == [((M, K - 128), (N, (K - 128) // 2), ((K - 128) // 32, N))] and not ran(codes, "_op_impl")


def test_reference_standin_plumbing_compiled_fullgraph_holds_the_op_with_a_symbolic_m(seam, env, tmp_path):
    reroute_on(env, tmp_path, "reference-standin", (M, False))
    layer = mxfp4_layer()
    kernel = loaded_kernel(layer)
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    fn = torch.compile(lambda x: kernel.apply_weights(layer, x, None), backend=backend, fullgraph=True, dynamic=True)
    hit, miss = activations()[0], activations(m=M + 5)[0]
    expected = [mxfp4_product(v, *original(layer)).to(torch.bfloat16) for v in (hit, miss)]
    assert torch.equal(fn(hit), expected[0]) and env.vllm_calls == []
    assert torch.equal(fn(miss), expected[1]) and len(env.vllm_calls) == 1
    assert len(graphs) == 1
    targets = [str(n.target) for n in graphs[0].graph.nodes if n.op == "call_function"]
    assert [t for t in targets if t.startswith("torch_flydsl.vllm_mxfp4_linear")], targets


def test_reference_standin_plumbing_record_shapes_notes_every_mxfp4_call(seam, env, tmp_path):
    from torch_flydsl.deploy import record
    from torch_flydsl.deploy.spec import Shape

    env.setattr(record, "_process", None)
    env.setenv("TORCH_FLYDSL_RECORD_SHAPES", str(tmp_path / "shapes.json"))
    reroute_on(env, tmp_path, "reference-standin", (M, False))
    layer = mxfp4_layer()
    kernel = loaded_kernel(layer)
    kernel.apply_weights(layer, activations()[0], None)
    kernel.apply_weights(layer, *activations(m=M + 3, bias=True))
    assert record._process.shapes == {
        Shape.of("scaled_mm", dtype="mxfp4", out_dtype="bfloat16", bias=False, m=M, n=N, k=K): 1,
        Shape.of("scaled_mm", dtype="mxfp4", out_dtype="bfloat16", bias=True, m=M + 3, n=N, k=K): 1}
    assert len(env.vllm_calls) == 1  # the miss (M + 3) ran AITER's GEMM
    record._process.shapes.clear()  # nothing for the at-exit save of this test process


def test_reference_standin_plumbing_a_bug_of_ours_at_call_time_warns_once_and_vllm_serves(seam, env, tmp_path,
                                                                                        caplog):
    import logging

    reroute_on(env, tmp_path, "reference-standin", (M, False))

    def planted(*args):
        raise KeyError("planted bug")

    env.setattr(mx_linear, "serve", planted)
    layer = mxfp4_layer()
    kernel = loaded_kernel(layer)
    x, _ = activations()
    with caplog.at_level(logging.WARNING, logger="torch_flydsl"):
        outs = [kernel.apply_weights(layer, x, None) for _ in range(2)]
    assert len(env.vllm_calls) == 2
    assert torch.equal(outs[0], mxfp4_product(x, *original(layer)).to(torch.bfloat16))
    assert len([r for r in caplog.records if "planted bug" in r.getMessage()]) == 1


def test_a_bad_TORCH_FLYDSL_VLLM_MXFP4_value_warns_once_and_keeps_vllms_kernel(seam, env, tmp_path, caplog):
    import logging

    reroute_on(env, tmp_path, "reference-standin", opt_in=False)
    env.setenv("TORCH_FLYDSL_VLLM_MXFP4", "perhaps")
    with caplog.at_level(logging.WARNING, logger="torch_flydsl"):
        kernels = [loaded_kernel(mxfp4_layer()) for _ in range(2)]
    said = [r.getMessage() for r in caplog.records if "TORCH_FLYDSL_VLLM_MXFP4=" in r.getMessage()]
    assert len(said) == 1 and "'perhaps'" in said[0] and said[0].endswith("using the default 0"), caplog.text
    assert [type(k).__name__ for k in kernels] == ["AiterMxfp4LinearKernel"] * 2


@pytest.mark.parametrize("where", ["deciding the route", "keeping the weights"])
def test_reference_standin_plumbing_an_error_at_load_keeps_the_layer_on_vllms_kernel(seam, env, tmp_path, where):
    reroute_on(env, tmp_path, "reference-standin", (M, False))

    def broken(*args):
        raise RuntimeError("stand-in failure")

    env.setattr(vllm_mxfp4, "routable" if where == "deciding the route" else "_keep", broken)
    layer = mxfp4_layer()
    kernel = loaded_kernel(layer)  # the load itself must not fail
    assert type(kernel).__name__ == "FlyDSLAiterMxfp4LinearKernel" and not hasattr(layer, vllm_mxfp4.ROUTE_ATTR)
    kernel.apply_weights(layer, activations()[0], None)
    assert env.vllm_calls == [((M, K), (N, K // 2), (K // 32, N))]
