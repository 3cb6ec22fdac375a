"""No FlyDSL compile (or module load) ever happens while a CUDA graph is captured, on a real
capture (the lent NVIDIA H200). FlyDSL cannot run there: the plugin's device gate is told this
GPU is usable and the kernel builder is replaced by a recorder, so what is under test is the
path a first use takes during capture (refused, PyTorch's kernel captured instead) and after
it (the kernel's first use runs outside capture). Skipped without a CUDA (non-ROCm) GPU.
"""

import os

import pytest
import torch

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available() or torch.version.hip is not None, reason="needs an NVIDIA GPU (capture tests)"
)


def test_first_use_inside_a_real_capture_is_refused_and_the_capture_goes_on():
    from torch_flydsl.runtime import kernel_cache

    built = []
    key = ("capture-test", os.getpid(), object())
    x = torch.ones(8, device="cuda")
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        (x * 2).sum()  # warm-up outside capture, as torch.cuda.graphs require
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    refused = []
    with torch.cuda.graph(g):
        try:
            kernel_cache.first_use(key, lambda: built.append(1) or "kernel")
        except kernel_cache.CaptureRefused as e:
            refused.append(str(e))
        y = x * 3
    g.replay()
    torch.cuda.synchronize()
    assert refused and "capturing a CUDA graph" in refused[0]
    assert built == [] and torch.equal(y, torch.full((8,), 3.0, device="cuda"))
    assert kernel_cache.first_use(key, lambda: built.append(1) or "kernel") == ("kernel", True)


def test_a_dense_op_first_used_inside_capture_captures_pytorchs_mm_and_builds_nothing(monkeypatch):
    from torch_flydsl import ops
    from torch_flydsl.runtime import kernel_cache, launch_guard
    from torch_flydsl.templates.dense_gemm import launcher

    traced = []

    def fake_kernel(*spec):
        def jit_fn(*args):
            traced.append(spec)  # a FlyDSL trace/compile/launch would happen here
        return jit_fn

    monkeypatch.setenv("TORCH_FLYDSL_EXECUTOR", "device")
    monkeypatch.setattr(launch_guard, "device_decline", lambda device: None)  # pretend: a gfx950
    monkeypatch.setattr(launcher, "_kernel", fake_kernel)
    ops.register()
    a = torch.randn(64, 256, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(256, 128, device="cuda", dtype=torch.bfloat16)
    out = torch.empty(64, 128, device="cuda", dtype=torch.bfloat16)
    op = ops.op("dense_mm_out")
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        torch.mm(a, b)  # cuBLAS warm-up outside capture
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    before = dict(kernel_cache._COMPILED), dict(kernel_cache._FAILED)
    with torch.cuda.graph(g):
        op(a, b, cfg="m128n128k32_w2x2_s4_g0", out=out)
    out.zero_()
    g.replay()
    torch.cuda.synchronize()
    assert traced == []
    assert (dict(kernel_cache._COMPILED), dict(kernel_cache._FAILED)) == before
    ref = (a.double() @ b.double()).float()
    assert (out.float() - ref).abs().max() / ref.abs().max() < 1e-2
