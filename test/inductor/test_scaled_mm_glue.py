"""MX scaled GEMM in Inductor's max-autotune, end to end on CPU (v1 ``torch._scaled_mm`` on every
torch, v2 ``F.scaled_mm`` on 2.13+ through the plugin's lowering override).

As in test_injection.py, each compile runs in a fresh process (``compile_probe.py``) and, except
for the emulator test, kernels run through the ``reference-standin`` executor with FlyDSL's
timings forced to win: these tests check the glue. CPU PyTorch has no MX GEMM, so PyTorch's own
choice cannot be timed here: its timings are fixed (``fixed_aten_timings``).
"""

import pytest
import torch
from expecttest import assert_expected_inline

from test_injection import STANDIN, cache, compile_in_subprocess  # noqa: F401 (fixture)
from torch_flydsl.runtime.probe import _parse_version

TORCH = _parse_version(torch.__version__)[:2]
MX = dict(force_win=True, fixed_aten_timings=True)
needs_v2_lowering = pytest.mark.skipif(
    TORCH < (2, 13), reason="torch < 2.13: Inductor falls back to eager _scaled_mm_v2 before any hook (serving._unreachable)"
)


def test_mx_scaled_mm_winner_is_a_call_to_the_plugin_op_with_its_scales_and_bias(cache):
    r = compile_in_subprocess(cache, STANDIN, op="scaled_mm", bias=True, shape=[96, 80, 256], **MX)
    assert_expected_inline(
        "\n".join(r["calls"]),
        """torch.ops.torch_flydsl.scaled_mm_out.default(arg0_1, arg1_1, arg2_1, arg3_1, arg4_1, cfg='mx_m32n64k256_w1x4_s3_g0_c2', out=buf0)""",
    )
    # Beside PyTorch's own choice, never instead of it.
    (seen,) = [s for s in r["choices_seen"] if s["op"] == "scaled_mm"]
    assert seen["descriptions"] == ["FlyDSL mx_m32n64k256_w1x4_s3_g0_c2", "_scaled_mm"]
    assert r["max_rel_err"] < 1e-2 and r["flydsl_log"] == []


@pytest.mark.skipif(TORCH < (2, 12), reason="torch 2.11's autotuner cannot make float4 inputs: MXFP4 is declined "
                                            "there (test_scaled_gemm_family.py checks that decline)")
def test_mxfp4_reaches_the_plugin_op(cache):
    # (Mixed W4A8 operands never get here: Inductor's own v1 lowering asserts that A's and B's
    # packed K agree, with or without the plugin. The kernel takes them through the op.)
    r = compile_in_subprocess(cache, STANDIN, op="scaled_mm", formats=["e2m1", "e2m1"], **MX)
    assert len(r["calls"]) == 1 and "torch_flydsl.scaled_mm_out" in r["calls"][0]
    assert r["max_rel_err"] < 1e-2


@pytest.mark.emulator
def test_emulator_executor_runs_the_mx_kernel_end_to_end(cache):
    # torch.compile(max-autotune) -> our choice wins -> generated code calls the op -> the
    # gfx950 kernel runs in the emulator (races/out-of-bounds fail the op) -> float64 check.
    r = compile_in_subprocess(cache, {"TORCH_FLYDSL_EXECUTOR": "emulator"}, op="scaled_mm", bias=True,
                              shape=[40, 72, 256], **MX)
    assert "torch_flydsl.scaled_mm_out" in r["calls"][0]
    assert r["flydsl_log"] == []  # no fallback to the reference: the kernel ran
    assert r["max_rel_err"] < 1e-2


def test_non_mx_fp8_scaled_mm_keeps_pytorchs_path_with_a_reason(cache):
    r = compile_in_subprocess(cache, {**STANDIN, "TORCH_FLYDSL_LOG": "info"}, op="scaled_mm", recipe="tensorwise",
                              force_win=True)
    assert r["calls"] == [ln for ln in r["calls"] if "torch_flydsl" not in ln]
    assert any("not float8_e8m0fnu: not an MX recipe" in n for n in r["flydsl_notes"]), r["flydsl_notes"]
    assert r["max_rel_err"] < 1e-2


def test_warm_fx_graph_cache_in_a_fresh_process_calls_the_mx_op(cache):
    first = compile_in_subprocess(cache, STANDIN, op="scaled_mm", **MX)
    second = compile_in_subprocess(cache, STANDIN, op="scaled_mm", **MX)
    assert second["fx_hits"] == 1 and second["benchmarked"] == []
    assert second["calls"] == first["calls"] and second["max_rel_err"] < 1e-2


@needs_v2_lowering
def test_f_scaled_mm_v2_is_offered_beside_pytorchs_own_v2_kernel(cache):
    # A CPU wheel's meta functions check CUDA's swizzled MX scales; simulate_rocm_meta makes
    # them check ROCm's unswizzled ones (the layout our kernel reads). Square, as 2.11-2.13's
    # ROCm meta sizes scale_b from M.
    r = compile_in_subprocess(cache, STANDIN, op="scaled_mm_v2", simulate_rocm_meta=True, shape=[128, 128, 256], **MX)
    assert_expected_inline(
        "\n".join(r["calls"]),
        """torch.ops.torch_flydsl.scaled_mm_out.default(arg2_1, arg3_1, arg0_1, arg1_1, cfg='mx_m32n64k256_w1x4_s3_g0_c2', out=buf0)""",
    )
    (seen,) = [s for s in r["choices_seen"] if s["op"] == "scaled_mm"]
    assert seen["descriptions"] == ["FlyDSL mx_m32n64k256_w1x4_s3_g0_c2", "PyTorch _scaled_mm_v2 (the op's own kernel)"]
    assert r["max_rel_err"] < 1e-2


@needs_v2_lowering
def test_when_pytorchs_v2_kernel_wins_generated_code_calls_the_baseline_op(cache):
    r = compile_in_subprocess(cache, STANDIN, op="scaled_mm_v2", simulate_rocm_meta=True, shape=[128, 128, 256],
                              force_lose=True, fixed_aten_timings=True)
    assert_expected_inline(
        "\n".join(r["calls"]),
        """torch.ops.torch_flydsl.aten_scaled_mm_out.default(arg2_1, arg3_1, arg0_1, arg1_1, out=buf0)""",
    )
    assert r["max_rel_err"] < 1e-2


def test_v1_is_never_deferred_and_v2_only_where_the_in_tree_backend_serves_it(cache):
    # torch 2.15's in-tree FlyDSL lowers only _scaled_mm_v2; v1 _scaled_mm stays the plugin's.
    import json
    import os
    import subprocess
    import sys

    from test_injection import PROBE
    from torch_flydsl.runtime.intree import install_status

    env = {**STANDIN, "TORCH_FLYDSL_INTREE_POLICY": "defer", "TORCH_FLYDSL_LOG": "info"}
    v1 = compile_in_subprocess(cache / "v1", env, op="scaled_mm", **MX)
    assert "torch_flydsl.scaled_mm_out" in v1["calls"][0]
    if TORCH < (2, 13):
        return
    # Where in-tree serves v2, the node is PyTorch's, whose kernel cannot run on a CPU: only
    # the decision is checked, from the log.
    opts = dict(op="scaled_mm_v2", simulate_rocm_meta=True, shape=[128, 128, 256], **MX)
    r = subprocess.run([sys.executable, str(PROBE), json.dumps(opts)], capture_output=True, text=True, timeout=600,
                       env={**os.environ, **env, "TORCHINDUCTOR_CACHE_DIR": str(cache / "v2")})
    deferred = "[coexistence] torch's in-tree FlyDSL backend serves scaled_mm_v2" in r.stderr
    assert deferred is install_status().usable, r.stderr[-3000:]
    if not deferred:
        assert r.returncode == 0 and "torch_flydsl.scaled_mm_out" in json.loads(r.stdout.splitlines()[-1])["calls"][0]


BAD_SCALES = """
import torch, torch_flydsl
import torch._inductor.config as ic
ic.max_autotune_gemm_backends = "ATEN,FLYDSL"
a = torch.zeros(64, 256, dtype=torch.uint8).view(torch.float8_e4m3fn)
b = torch.zeros(128, 256, dtype=torch.uint8).view(torch.float8_e4m3fn).t()
sa = torch.zeros(64, 8, dtype=torch.uint8).view(torch.float8_e8m0fnu)  # v1 wants round_up(M, 128) rows
sb = torch.zeros(128, 8, dtype=torch.uint8).view(torch.float8_e8m0fnu)
try:
    torch.compile(lambda *xs: torch._scaled_mm(*xs, out_dtype=torch.bfloat16), mode="max-autotune-no-cudagraphs")(a, b, sa, sb)
except Exception as e:
    print("ERROR", type(e).__name__, str(e).splitlines()[0])
"""


def test_bad_scale_shapes_get_pytorchs_own_error_unchanged(tmp_path):
    from script_runner import run_script

    with_plugin = run_script(BAD_SCALES, tmp_path / "on", **STANDIN).stdout
    without = run_script(BAD_SCALES, tmp_path / "off", TORCH_FLYDSL_DISABLE="1").stdout
    assert "ERROR" in with_plugin and with_plugin == without
