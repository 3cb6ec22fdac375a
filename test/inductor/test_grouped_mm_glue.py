"""Grouped GEMM (``torch._grouped_mm``) in Inductor's max-autotune, end to end on CPU.

The stock lowering builds its choice list by hand; the plugin's autotuning preprocessing step
(``inductor/hooks.py``) appends FlyDSL's. As in test_injection.py, each compile runs in a fresh
process; kernels run through the ``reference-standin`` executor with FlyDSL's timings forced to
win, except where the emulator runs the real gfx950 kernel.
"""

import pytest
from expecttest import assert_expected_inline

from test_injection import STANDIN, cache, compile_in_subprocess  # noqa: F401 (fixture)

INFO = {**STANDIN, "TORCH_FLYDSL_LOG": "info"}


def test_grouped_mm_winner_is_a_call_to_the_plugin_op_beside_atens_choice(cache):
    r = compile_in_subprocess(cache, STANDIN, op="grouped_mm", force_win=True, shape=[0, 96, 128],
                              sizes=[5, 0, 40, 19], spare_rows=3)
    assert_expected_inline(
        "\n".join(r["calls"]),
        """torch.ops.torch_flydsl.grouped_mm_out.default(arg0_1, arg1_1, arg2_1, cfg='grp_m32n128k64_w1x4_s3_g0', out=buf0)""",
    )
    (seen,) = [s for s in r["choices_seen"] if s["op"] == "grouped_mm"]
    assert seen["descriptions"] == ["FlyDSL grp_m32n128k64_w1x4_s3_g0", "_grouped_mm"]
    assert r["max_rel_err"] < 1e-2 and r["flydsl_log"] == []


def test_row_major_expert_weights_are_offered_too(cache):
    r = compile_in_subprocess(cache, STANDIN, op="grouped_mm", b_major="row", force_win=True, shape=[0, 64, 64])
    assert "torch_flydsl.grouped_mm_out" in r["calls"][0] and r["max_rel_err"] < 1e-2


@pytest.mark.emulator
def test_emulator_executor_runs_the_grouped_kernel_end_to_end(cache):
    r = compile_in_subprocess(cache, {"TORCH_FLYDSL_EXECUTOR": "emulator"}, op="grouped_mm", force_win=True,
                              shape=[0, 96, 128], sizes=[5, 0, 40, 19], spare_rows=3)
    assert "torch_flydsl.grouped_mm_out" in r["calls"][0]
    assert r["flydsl_log"] == [] and r["max_rel_err"] < 1e-2


@pytest.mark.emulator
def test_a_compiled_moe_block_runs_its_grouped_gemms_through_the_kernel_and_matches_eager(cache):
    # Router (mm), top-2 routing, then the experts' two grouped GEMMs, as HF transformers 5.x runs
    # them; every GEMM of the block goes through an emulated gfx950 kernel.
    r = compile_in_subprocess(cache, {"TORCH_FLYDSL_EXECUTOR": "emulator"}, op="moe", force_win=True)
    grouped = [c for c in r["calls"] if "grouped_mm_out" in c]
    assert len(grouped) == 2, r["calls"]
    assert r["flydsl_log"] == [] and r["max_rel_err"] < 2e-2


def test_batched_3d_x_3d_calls_the_plugin_op_without_offs(cache):
    r = compile_in_subprocess(cache, STANDIN, op="grouped_mm", grouped_form="3d3d", force_win=True,
                              shape=[40, 64, 64], sizes=[0, 0, 0])
    assert_expected_inline(
        "\n".join(r["calls"]),
        """torch.ops.torch_flydsl.grouped_mm_out.default(arg0_1, arg1_1, cfg='grp_m64n128k64_w2x2_s3_g0', out=buf0)""",
    )
    assert r["max_rel_err"] < 1e-2


def test_weight_gradient_form_groups_along_k_calls_the_plugin_op(cache):
    r = compile_in_subprocess(cache, STANDIN, op="grouped_mm", grouped_form="2d2d", force_win=True, shape=[32, 64, 0],
                              sizes=[10, 0, 38])
    assert len(r["calls"]) == 1 and "torch_flydsl.grouped_mm_out" in r["calls"][0], r["calls"]
    assert r["max_rel_err"] < 1e-2


@pytest.mark.emulator
def test_weight_gradient_form_through_the_emulated_kernel(cache):
    r = compile_in_subprocess(cache, {"TORCH_FLYDSL_EXECUTOR": "emulator"}, op="grouped_mm", grouped_form="2d2d",
                              force_win=True, shape=[32, 64, 0], sizes=[10, 0, 38])
    assert "torch_flydsl.grouped_mm_out" in r["calls"][0] and r["flydsl_log"] == [] and r["max_rel_err"] < 1e-2


def test_warm_fx_graph_cache_in_a_fresh_process_calls_the_grouped_op(cache):
    first = compile_in_subprocess(cache, STANDIN, op="grouped_mm", force_win=True, shape=[0, 64, 64])
    second = compile_in_subprocess(cache, STANDIN, op="grouped_mm", force_win=True, shape=[0, 64, 64])
    assert second["fx_hits"] == 1 and second["benchmarked"] == []
    assert second["calls"] == first["calls"] and second["max_rel_err"] < 1e-2


def test_without_flydsl_in_the_backends_the_list_is_pytorchs(cache):
    r = compile_in_subprocess(cache, STANDIN, op="grouped_mm", backends="ATEN", shape=[0, 64, 64])
    assert not any("torch_flydsl" in c for c in r["calls"]) and r["benchmarked"] == []
