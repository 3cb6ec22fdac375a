"""Eager overrides (``torch_flydsl.eager``): the MXFP8 grouped GEMM family serving
``F.scaled_grouped_mm`` / ``aten::_scaled_grouped_mm_v2`` with PyTorch's kernel kept for
everything else. Each case runs in a fresh process: overrides are registered at import, for
the dispatch keys this process's executor allows (CPU only under the emulator / stand-in)."""

import json
import os
import subprocess
import sys
import textwrap

import pytest


def _torch_minor():
    import torch

    from torch_flydsl.runtime.probe import _parse_version

    return _parse_version(torch.__version__)[:2]

SCRIPT = textwrap.dedent("""
    import json, logging, torch, torch.nn.functional as F
    import torch_flydsl
    from torch_flydsl import eager
    from torch_flydsl.templates.scaled_grouped_gemm import reference
    notes = []
    class Rec(logging.Handler):
        def emit(self, r): notes.append(r.getMessage())
    logging.getLogger("torch_flydsl").addHandler(Rec(logging.DEBUG))
    g = torch.Generator().manual_seed(0)
    t, n, k, sizes = 50, 64, 256, [7, 0, 30, 13]
    def codes(*shape):
        c = torch.randint(0, 256, shape, generator=g, dtype=torch.uint8); c[(c & 0x7F) == 0x7F] ^= 1
        return c.view(torch.float8_e4m3fn)
    a = codes(t, k); b = codes(len(sizes), n, k).transpose(1, 2)
    sa = torch.randint(120, 134, (t, k // 32), generator=g, dtype=torch.uint8).view(torch.float8_e8m0fnu)
    sb = torch.randint(120, 134, (len(sizes), n * k // 32), generator=g, dtype=torch.uint8).view(torch.float8_e8m0fnu)
    offs = torch.tensor(sizes, dtype=torch.int32).cumsum(0).to(torch.int32)
    mx = F.ScalingType.BlockWise1x32
    swizzle = getattr(F.SwizzleType, SWIZZLE)
    result = {"registered": sorted(map(list, eager._registered))}
    def call_eager():
        return F.scaled_grouped_mm(a, b, sa, mx, sb, mx, swizzle_a=swizzle, swizzle_b=swizzle, offs=offs)
    call = torch.compile(call_eager) if COMPILED else call_eager
    try:
        with (torch_flydsl.disabled() if DISABLED else __import__("contextlib").nullcontext()):
            out = call()
        ref = reference(a, b, sa, sb, offs)
        result["err"] = ((out.double() - ref).abs().max() / ref.abs().max()).item()
    except NotImplementedError as e:
        result["error"] = str(e).splitlines()[0]
    result["notes"] = notes
    print(json.dumps(result))
""")


def run(env, swizzle="NO_SWIZZLE", disabled=False, compiled=False):
    code = f"SWIZZLE = {swizzle!r}\nDISABLED = {disabled!r}\nCOMPILED = {compiled!r}\n" + SCRIPT
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600,
                       env={**os.environ, "TORCH_FLYDSL_LOG": "debug", **env})
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.mark.emulator
def test_mx_grouped_gemm_runs_the_emulated_kernel_through_the_eager_op():
    r = run({"TORCH_FLYDSL_EXECUTOR": "emulator"})
    assert ["_scaled_grouped_mm_v2", "CPU"] in r["registered"]  # beside the other families' overrides
    assert r["err"] < 1e-2
    assert "aten._scaled_grouped_mm_v2: FlyDSL mxgrp_m32n64k256_w1x4_s3_g0_c2" in r["notes"]


@pytest.mark.emulator
@pytest.mark.skipif(_torch_minor() < (2, 14), reason="torch < 2.14 has no meta kernel for _scaled_grouped_mm_v2: "
                                                   "F.scaled_grouped_mm cannot be compiled there")
def test_compiled_graphs_reach_the_kernel_through_inductors_eager_fallback(tmp_path):
    # Every torch sends MXFP8 grouped GEMM nodes to the eager op (E8M0 scales), which we serve.
    r = run({"TORCH_FLYDSL_EXECUTOR": "emulator", "TORCHINDUCTOR_CACHE_DIR": str(tmp_path)}, compiled=True)
    assert r["err"] < 1e-2 and "aten._scaled_grouped_mm_v2: FlyDSL mxgrp_m32n64k256_w1x4_s3_g0_c2" in r["notes"]


def test_disabled_sends_the_call_to_pytorchs_kernel():
    # CPU PyTorch has no MXFP8 grouped GEMM: its answer is "not implemented", unchanged.
    r = run({"TORCH_FLYDSL_EXECUTOR": "reference-standin"}, disabled=True)
    assert "Could not run 'aten::_scaled_grouped_mm_v2" in r["error"] and "err" not in r  # (2.15: its .out)


def test_swizzled_scales_are_declined_with_a_reason_and_keep_pytorchs_path():
    r = run({"TORCH_FLYDSL_EXECUTOR": "reference-standin"}, swizzle="SWIZZLE_32_4_4")
    assert "Could not run" in r["error"]
    assert any("unswizzled (NO_SWIZZLE) scales only" in n for n in r["notes"]), r["notes"]


def test_without_a_gfx950_or_a_cpu_executor_nothing_is_registered():
    # A CPU build with the device executor: no call could be ours, so PyTorch's dispatch table
    # is untouched.
    env = {k: v for k, v in os.environ.items() if k != "TORCH_FLYDSL_EXECUTOR"}
    code = "import torch, torch_flydsl.eager as e; print(len(e._registered))"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0 and r.stdout.strip() == "0", r.stderr[-2000:]


def test_a_failure_of_ours_before_the_kernel_keeps_pytorchs_path(monkeypatch, caplog):
    import logging

    import torch

    from torch_flydsl import eager
    from torch_flydsl.registry import EagerOverride

    def broken(target, args, kwargs):
        raise KeyError("planted bug")

    family = type("FamilyStandIn", (), {"eager_call": staticmethod(broken)})
    monkeypatch.setattr(eager, "_said", set())
    monkeypatch.setenv("TORCH_FLYDSL_EXECUTOR", "reference-standin")  # the CPU tensor's device is ours
    monkeypatch.setattr(eager, "_DEVICE_GATES", {})
    with caplog.at_level(logging.WARNING, logger="torch_flydsl"):
        taken = eager._take(family, EagerOverride("_scaled_grouped_mm_v2", "x"), (torch.zeros(1),), {})
    assert taken is None  # None: the router calls PyTorch's kernel
    assert "PyTorch's kernel runs: KeyError" in caplog.text and "planted bug" in caplog.text
