"""The scaled GEMM family's glue side: what it reads from the FX node being lowered, and how v1
and v2 arguments become one problem (or a decline with a reason)."""

import pytest
import torch

from torch_flydsl.registry import family_for, override_for
from torch_flydsl.templates.base import Decline
from torch_flydsl.templates.scaled_gemm.family import FAMILY as family
from torch_flydsl.templates.scaled_gemm.eligibility import contiguous_metas
from torch_flydsl.templates.scaled_gemm.problem import ScaledGemmProblem

METAS = contiguous_metas(32, 4096, 4096)  # a, b, scale_a, scale_b, out, bias(None)
MX, NO_SWIZZLE = 3, 0  # F.ScalingType.BlockWise1x32, F.SwizzleType.NO_SWIZZLE


def v2_scalars(**over):
    node_args = ("a", "b", ["sa"], [MX], [NO_SWIZZLE], ["sb"], [MX], [NO_SWIZZLE], None, torch.bfloat16)
    scalars = family.scalars_from_node("scaled_mm", "_scaled_mm_v2", node_args, {})
    scalars.update(over)
    return scalars


def test_both_entry_points_resolve_to_this_family():
    assert family_for("scaled_mm").name == family_for("scaled_mm_v2").name == "scaled_gemm"
    assert override_for("scaled_mm_v2").target == "_scaled_mm_v2"
    assert [op.name for op in family.custom_ops] == ["scaled_mm_out", "aten_scaled_mm_out"]
    assert family.aten_ops == ("scaled_mm",)  # the baseline op serves no aten op itself


def test_v1_node_scalars_carry_scale_result_and_out_dtype():
    s = family.scalars_from_node("scaled_mm", "_scaled_mm", ("a", "b", "sa", "sb"), {"scale_result": "r",
                                                                                    "out_dtype": torch.float16})
    assert s == {"entry": "v1", "scale_result": True, "out_dtype": torch.float16}
    d = family.problem_from_metas("scaled_mm", list(METAS[:4]), METAS[4], s)
    assert isinstance(d, Decline) and "scale_result" in d.reason


def test_v2_mx_no_swizzle_poses_the_same_problem_as_v1():
    v1 = family.problem_from_metas("scaled_mm", list(METAS[:4]), METAS[4], {})
    v2 = family.problem_from_metas("scaled_mm", list(METAS[:4]), METAS[4], v2_scalars())
    assert isinstance(v1, ScaledGemmProblem) and v1 == v2


@pytest.mark.parametrize(
    "over, category, text",
    [
        ({"swizzle_b": [1]}, "layout", "SWIZZLE_32_4_4"),
        ({"swizzle_a": [2]}, "layout", "SWIZZLE_32_8"),
        ({"recipe_a": [1]}, "dtype", "RowWise"),
        ({"levels": (2, 2)}, "dtype", "multi-level"),
        ({"contraction_dim": [0, 1]}, "layout", "contraction_dim"),
        ({"out_dtype": torch.float16}, "dtype", "out_dtype=float16"),
    ],
)
def test_v2_arguments_the_kernel_cannot_honour_are_declined_with_a_reason(over, category, text):
    d = family.problem_from_metas("scaled_mm", list(METAS[:4]), METAS[4], v2_scalars(**over))
    assert isinstance(d, Decline) and d.category == category and text in d.reason, d


def test_lowering_operands_take_the_first_scale_level_and_the_bias():
    args = ("a", "b", ["sa"], [MX], [NO_SWIZZLE], ["sb"], [MX], [NO_SWIZZLE], "bias", torch.float16)
    assert family.lowering_operands("_scaled_mm_v2", args, {}) == (["a", "b", "sa", "sb", "bias"], torch.float16)


@pytest.mark.parametrize("dtype, formats", [("mxfp8", ("e4m3", "e4m3")), ("mxfp4", ("e2m1", "e2m1")),
                                            ("w4a8", ("e4m3", "e2m1")), ("mxfp8-e5m2", ("e5m2", "e5m2"))])
def test_explain_problem_names_each_mx_dtype(dtype, formats):
    p = family.explain_problem("scaled_mm", 32, 4096, 4096, dtype)
    assert (p.a_format, p.b_format) == formats


def test_explain_problem_declines_per_tensor_fp8_with_a_reason():
    d = family.explain_problem("scaled_mm", 32, 4096, 4096, "fp8")
    assert isinstance(d, Decline) and "not an MX format" in d.reason


def metas_with_scale_rows(rows_a, rows_b, m=32, n=4096, k=4096, fmt="e4m3"):
    from torch_flydsl.templates.base import TensorMeta
    from torch_flydsl.templates.scaled_gemm.problem import SCALE_DTYPE

    a, b, _, _, out, _ = contiguous_metas(m, n, k, fmt, fmt)
    return [a, b, TensorMeta.contiguous((rows_a, k // 32), SCALE_DTYPE),
            TensorMeta.contiguous((rows_b, k // 32), SCALE_DTYPE)], out


@pytest.mark.parametrize("entry, rows_a, rows_b, fmt, taken", [
    ("v1", 128, 4096, "e4m3", True),   # round_up(M, 128) rows: what v1 checks (read unswizzled on ROCm)
    ("v1", 32, 4096, "e4m3", False),   # PyTorch rejects it; the kernel could read it, but must not widen the op
    ("v2", 32, 4096, "e4m3", True),    # v2 on ROCm: ceil(M/32)*K elements
    ("v2", 128, 4096, "e4m3", False),
    ("v2", 32, 4096, "e2m1", True),
])
def test_each_entry_point_takes_exactly_the_scale_rows_pytorch_accepts(entry, rows_a, rows_b, fmt, taken):
    inputs, out = metas_with_scale_rows(rows_a, rows_b, fmt=fmt)
    got = family.problem_from_metas("scaled_mm", inputs, out, {"entry": entry})
    assert isinstance(got, ScaledGemmProblem) is taken, got
    if not taken:
        assert got.category == "shape" and "PyTorch's own check decides" in got.reason


def test_v2_mxfp4_scale_rows_round_to_16():
    from torch_flydsl.templates.scaled_gemm.family import scale_rows_pytorch_wants

    assert scale_rows_pytorch_wants("v2", 20, "e2m1") == 32 and scale_rows_pytorch_wants("v2", 20, "e4m3") == 32
    assert scale_rows_pytorch_wants("v2", 8, "e2m1") == 16 and scale_rows_pytorch_wants("v1", 8, "e2m1") == 128


def test_torch_2_11_cannot_autotune_float4_so_mxfp4_is_declined_there(monkeypatch):
    inputs, out = metas_with_scale_rows(128, 4096, fmt="e2m1")
    monkeypatch.setattr(torch, "__version__", "2.11.0+cu130")
    d = family.problem_from_metas("scaled_mm", inputs, out, {"entry": "v1"})
    assert isinstance(d, Decline) and d.category == "version" and "float4_e2m1fn_x2" in d.reason
    monkeypatch.setattr(torch, "__version__", "2.12.1")
    assert isinstance(family.problem_from_metas("scaled_mm", inputs, out, {"entry": "v1"}), ScaledGemmProblem)


def test_explain_problem_poses_each_entry_points_own_scale_rows():
    assert isinstance(family.explain_problem("scaled_mm", 32, 4096, 4096, "mxfp8"), ScaledGemmProblem)
    assert isinstance(family.explain_problem("scaled_mm_v2", 1, 4096, 4096, "mxfp4"), ScaledGemmProblem)
