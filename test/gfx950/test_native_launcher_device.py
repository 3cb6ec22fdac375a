"""The native launcher on a real MI350 (gfx950 tier: fails without one when requested).

The library is built against this torch, the cases' code objects are exported (compile-only,
as ``python -m torch_flydsl native export`` does) into a deployment cache, and the plugin's
custom ops then run through the C++ CUDA-key kernel: the native launch counter moves, the
Python launcher launches nothing, and the output is byte for byte what the Python launcher's
launch of the same kernel gives (``torch_flydsl_native::python_<op>``), on the current stream,
in a CUDA graph and twice in a row for split-K (its counters reset themselves).
"""

from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.gfx950


@pytest.fixture
def spy(monkeypatch):
    """Counts the Python launchers' launches (the three families' ``launcher.launch``)."""
    import importlib
    import types

    counted = types.SimpleNamespace(launches=0)
    for family in ("dense_gemm", "scaled_gemm", "grouped_gemm"):
        module = importlib.import_module(f"torch_flydsl.templates.{family}.launcher")
        real = module.launch

        def launch(*args, _real=real, **kwargs):
            counted.launches += 1
            return _real(*args, **kwargs)

        monkeypatch.setattr(module, "launch", launch)
    return counted


@pytest.fixture(scope="module")
def deployment(tmp_path_factory):
    import os

    from gfx950_kit import NEED, gfx950_devices

    from torch_flydsl import ops
    from torch_flydsl.native import build

    os.environ.setdefault("TORCH_FLYDSL_EXECUTOR", "device")
    if not gfx950_devices()[0]:  # before a minute of building (module fixtures come first)
        pytest.fail(f"{NEED}: {gfx950_devices()[1]}", pytrace=False)

    build.build()
    ops.register_native_fallbacks()
    cache = tmp_path_factory.mktemp("native_deploy")
    torch.ops.torch_flydsl_native.use_cache_dir(str(cache))
    return cache


def _export(cache, op: str, args: tuple, kwargs: dict):
    from torch_flydsl.native import export

    family = next(f for f in _families() if op in {c.name for c in f.custom_ops})
    cfg, problem = family.check_call(family.parse_call(op, args, kwargs))
    dropped = op == "dense_addmm_out" and kwargs.get("beta", 1.0) == 0.0
    export.write(cache, [export.unit_for(family, cfg, problem, False if dropped else None)])
    torch.ops.torch_flydsl_native.use_cache_dir(str(cache))


def _families():
    from torch_flydsl.registry import families

    return families()


def _native_and_python(cache, op: str, args: tuple, kwargs: dict, spy):
    """(native output, Python launcher's output) for one call; checks who launched."""
    _export(cache, op, args, kwargs)
    out = kwargs["out"]
    python_out = out.clone()
    before = torch.ops.torch_flydsl_native.launch_count()
    getattr(torch.ops.torch_flydsl, op)(*args, **kwargs)
    torch.cuda.synchronize()
    assert torch.ops.torch_flydsl_native.launch_count() == before + 1, "the native launcher did not launch"
    assert spy.launches == 0, "the Python launcher launched instead"
    getattr(torch.ops.torch_flydsl_native, f"python_{op}")(*args, **{**kwargs, "out": python_out})
    torch.cuda.synchronize()
    assert spy.launches == 1
    return out, python_out


def _dense(device, m=300, n=200, k=520, bias=False):
    a = torch.randn(m, k + 8, device=device).bfloat16()[:, :k]
    b = torch.randn(n, k + 8, device=device).bfloat16()[:, :k].t()
    out = torch.full((m, n), float("nan"), device=device, dtype=torch.bfloat16)
    return a, b, out, (torch.randn(n, device=device).bfloat16() if bias else None)


@pytest.mark.parametrize("cfg", ["m128n128k32_w2x2_s4_g0", "m16n64k128_w1x4_s3_g0"])
def test_dense_mm_runs_natively_and_equals_the_python_launch(deployment, device, spy, cfg):
    a, b, out, _ = _dense(device)
    native, python = _native_and_python(deployment, "dense_mm_out", (a, b), {"cfg": cfg, "out": out}, spy)
    assert torch.equal(native, python)
    torch.testing.assert_close(native.float(), a.float() @ b.float(), rtol=2e-2, atol=2e-2)


def test_dense_addmm_with_bias_alpha_beta(deployment, device, spy):
    a, b, out, bias = _dense(device, bias=True)
    kwargs = {"alpha": 0.5, "beta": 2.0, "cfg": "m128n128k32_w2x2_s4_g0", "out": out}
    native, python = _native_and_python(deployment, "dense_addmm_out", (bias, a, b), kwargs, spy)
    assert torch.equal(native, python)


def test_split_k_twice_in_a_row(deployment, device, spy):
    from torch_flydsl.templates.dense_gemm.config import CURATED

    cfg = next(c for c in CURATED if c.split_k > 1).key()
    a, b, out, _ = _dense(device, m=16, n=1024, k=4096)
    native, python = _native_and_python(deployment, "dense_mm_out", (a, b), {"cfg": cfg, "out": out}, spy)
    assert torch.equal(native, python)
    again = torch.empty_like(out)
    torch.ops.torch_flydsl.dense_mm_out(a, b, cfg=cfg, out=again)
    torch.cuda.synchronize()
    assert torch.equal(again, native)


def test_on_a_side_stream_and_in_a_cuda_graph(deployment, device, spy):
    a, b, out, _ = _dense(device)
    cfg = "m128n128k32_w2x2_s4_g0"
    _export(deployment, "dense_mm_out", (a, b), {"cfg": cfg, "out": out})
    expected = out.clone()
    torch.ops.torch_flydsl_native.python_dense_mm_out(a, b, cfg=cfg, out=expected)
    side = torch.cuda.Stream(device)
    with torch.cuda.stream(side):
        torch.ops.torch_flydsl.dense_mm_out(a, b, cfg=cfg, out=out)
    side.synchronize()
    assert torch.equal(out, expected)
    graph_out = torch.zeros_like(out)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        torch.ops.torch_flydsl.dense_mm_out(a, b, cfg=cfg, out=graph_out)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(graph_out, expected)


def test_mxfp8_scaled_mm(deployment, device, spy):
    m, n, k = 256, 512, 1024
    a = torch.randn(m, k, device=device).to(torch.float8_e4m3fn)
    b = torch.randn(n, k, device=device).to(torch.float8_e4m3fn).t()
    sa = torch.randint(120, 134, (m, k // 32), device=device, dtype=torch.uint8).view(torch.float8_e8m0fnu)
    sb = torch.randint(120, 134, (n, k // 32), device=device, dtype=torch.uint8).view(torch.float8_e8m0fnu)
    out = torch.empty(m, n, device=device, dtype=torch.bfloat16)
    cfg = "mx_m128n128k128_w2x2_s2_g0"
    native, python = _native_and_python(deployment, "scaled_mm_out", (a, b, sa, sb, None), {"cfg": cfg, "out": out},
                                        spy)
    assert torch.equal(native, python)


@pytest.mark.parametrize("b_major", ["col", "row"])
def test_grouped_mm_moe_forward(deployment, device, spy, b_major):
    tokens, groups, n, k = 600, 8, 256, 512
    a = torch.randn(tokens, k, device=device).bfloat16()
    b = (torch.randn(groups, n, k, device=device).bfloat16().transpose(1, 2) if b_major == "col"
         else torch.randn(groups, k, n, device=device).bfloat16())
    offs = torch.tensor([0, 70, 70, 200, 333, 400, 512, 580], device=device, dtype=torch.int32)
    out = torch.zeros(tokens, n, device=device, dtype=torch.bfloat16)
    native, python = _native_and_python(deployment, "grouped_mm_out", (a, b, offs),
                                        {"cfg": "grp_m128n128k32_w2x2_s4_g0", "out": out}, spy)
    assert torch.equal(native, python)
