"""The gate matrix of the MX scaled GEMM family: which operand descriptions it takes (formats,
TN layout, unswizzled [rows, K/32] E8M0 scales, output, bias), and the reason when not."""

import pytest
import torch
import torch.nn.functional as F

from torch_flydsl.templates.base import Decline, TensorMeta
from torch_flydsl.templates.scaled_gemm import ScaledGemmProblem, check_problem, contiguous_metas

E4M3, E5M2, FP4 = torch.float8_e4m3fn, torch.float8_e5m2, torch.float4_e2m1fn_x2
E8M0, BF16, FP16 = torch.float8_e8m0fnu, torch.bfloat16, torch.float16


def packed(dtype, k):
    return k // 2 if dtype == FP4 else k


def a_(m, k, dtype=E4M3, ld=None, offset=0):
    """A [M, K] row-major (K/2 bytes per row for FP4)."""
    kp = packed(dtype, k)
    return TensorMeta((m, kp), (ld or kp, 1), dtype, offset)


def b_(k, n, dtype=E4M3, ld=None, offset=0):
    """B [K, N] column-major."""
    kp = packed(dtype, k)
    return TensorMeta((kp, n), (1, ld or kp), dtype, offset)


def s_(rows, k, ld=None, offset=0, dtype=E8M0):
    return TensorMeta((rows, k // 32), (ld or k // 32, 1), dtype, offset)


def out_(m, n, dtype=BF16, ld=None, offset=0):
    return TensorMeta((m, n), (ld or n, 1), dtype, offset)


def problem(m=64, n=96, k=256, fa=E4M3, fb=E4M3, out=BF16, bias=None, **kw):
    return check_problem(a_(m, k, fa), b_(k, n, fb), s_(m, k), s_(n, k), out_(m, n, out), bias, **kw)


@pytest.mark.parametrize(
    "fa, fb, names",
    [(E4M3, E4M3, ("e4m3", "e4m3")), (E5M2, E5M2, ("e5m2", "e5m2")), (FP4, FP4, ("e2m1", "e2m1")),
     (E4M3, FP4, ("e4m3", "e2m1")), (FP4, E4M3, ("e2m1", "e4m3")), (E4M3, E5M2, ("e4m3", "e5m2"))],
)
def test_every_format_pair_is_taken_and_k_is_counted_in_values(fa, fb, names):
    p = problem(64, 96, 512, fa, fb)
    assert p == ScaledGemmProblem(64, 96, 512, *names, BF16, False)


def test_fp16_output_bias_and_decode_rows_are_taken():
    p = problem(1, 4096, 1024, out=FP16, bias=TensorMeta((4096,), (1,), FP16))
    assert p == ScaledGemmProblem(1, 4096, 1024, "e4m3", "e4m3", FP16, True)
    expanded = TensorMeta((8, 96), (0, 1), BF16)  # as Inductor's autotuning passes it
    assert problem(8, 96, 256, bias=expanded).bias


def test_scales_padded_to_more_rows_and_a_wider_row_stride_are_taken():
    # torch 2.13's _scaled_mm on ROCm wants round_up(M, 128) * K/32 scale elements: rows past M
    # are never read. A row stride > K/32 (a multiple of 4 bytes) works too.
    m, n, k = 40, 72, 384
    p = check_problem(a_(m, k), b_(k, n), s_(128, k), s_(128, k, ld=16, offset=4), out_(m, n))
    assert isinstance(p, ScaledGemmProblem)


def test_contiguous_metas_pose_the_torch_scaled_mm_problem():
    p = check_problem(*contiguous_metas(32, 4096, 7168, "e4m3", "e2m1", FP16, bias=True))
    assert p == ScaledGemmProblem(32, 4096, 7168, "e4m3", "e2m1", FP16, True)
    d = check_problem(*contiguous_metas(32, 4096, 7168)[:5], scale_result=TensorMeta((), (), torch.float32))
    assert isinstance(d, Decline) and "scale_result" in d.reason


@pytest.mark.parametrize("swizzle", [None, F.SwizzleType.NO_SWIZZLE, 0, "NO_SWIZZLE"])
def test_no_swizzle_in_any_spelling_is_taken(swizzle):
    assert isinstance(problem(swizzle_a=swizzle, swizzle_b=swizzle, scale_recipe_a=F.ScalingType.BlockWise1x32,
                              scale_recipe_b=3), ScaledGemmProblem)


@pytest.mark.parametrize(
    "args, kw, category, text",
    [
        # formats and recipes
        ((a_(64, 256, BF16), b_(256, 96), s_(64, 256), s_(96, 256), out_(64, 96)), {}, "dtype", "not an MX element"),
        ((a_(64, 256, torch.float8_e4m3fnuz), b_(256, 96), s_(64, 256), s_(96, 256), out_(64, 96)), {}, "dtype",
         "gfx942"),
        ((a_(64, 256), b_(256, 96), s_(64, 256, dtype=torch.float32), s_(96, 256), out_(64, 96)), {}, "dtype",
         "not float8_e8m0fnu"),
        ((a_(64, 256), b_(256, 96), s_(64, 256), s_(96, 256), out_(64, 96)),
         {"scale_recipe_b": F.ScalingType.RowWise}, "dtype", "RowWise"),
        ((a_(64, 256), b_(256, 96), s_(64, 256), s_(96, 256), out_(64, 96)),
         {"swizzle_a": F.SwizzleType.SWIZZLE_32_4_4}, "layout", "SWIZZLE_32_4_4"),
        ((a_(64, 256), b_(256, 96), s_(64, 256), s_(96, 256), out_(64, 96)), {"swizzle_b": 1}, "layout",
         "SWIZZLE_32_4_4"),
        # shapes
        ((TensorMeta((64,), (1,), E4M3), b_(256, 96), s_(64, 256), s_(96, 256), out_(64, 96)), {}, "shape", "2-D"),
        ((a_(64, 256), b_(512, 96, FP4), s_(64, 256), s_(96, 256), out_(64, 96)), {}, "shape", "K=256 vs 512"),
        ((a_(64, 48), b_(48, 96), s_(64, 32), s_(96, 32), out_(64, 96)), {}, "shape", "multiple of 32"),
        ((a_(64, 160), b_(160, 96), s_(64, 160), s_(96, 160), out_(64, 96)), {}, "shape", "multiple of 128"),
        ((a_(0, 256), b_(256, 96), s_(1, 256), s_(96, 256), out_(0, 96)), {}, "shape", "empty"),
        # scales
        ((a_(64, 256), b_(256, 96), s_(32, 256), s_(96, 256), out_(64, 96)), {}, "shape", "M=64"),
        ((a_(64, 256), b_(256, 96), TensorMeta((64 * 8,), (1,), E8M0), s_(96, 256), out_(64, 96)), {}, "shape",
         "K/32=8"),
        ((a_(64, 256), b_(256, 96), TensorMeta((64, 8), (1, 64), E8M0), s_(96, 256), out_(64, 96)), {}, "layout",
         "not row-major"),
        ((a_(64, 256), b_(256, 96), s_(64, 256, offset=2), s_(96, 256), out_(64, 96)), {}, "alignment", "4-byte"),
        ((a_(64, 256), b_(256, 96), s_(64, 256), s_(96, 256, ld=10), out_(64, 96)), {}, "alignment", "4-byte"),
        # layouts, alignment, size
        ((TensorMeta((64, 256), (1, 64), E4M3), b_(256, 96), s_(64, 256), s_(96, 256), out_(64, 96)), {}, "layout",
         "A must be row-major"),
        ((a_(64, 256), TensorMeta((256, 96), (96, 1), E4M3), s_(64, 256), s_(96, 256), out_(64, 96)), {}, "layout",
         "B must be column-major"),
        ((a_(64, 256), b_(256, 96), s_(64, 256), s_(96, 256), TensorMeta((64, 96), (1, 64), BF16)), {}, "layout",
         "output strides"),
        ((a_(64, 256, offset=8), b_(256, 96), s_(64, 256), s_(96, 256), out_(64, 96)), {}, "alignment", "starts 8"),
        ((a_(64, 256), b_(256, 96, ld=264), s_(64, 256), s_(96, 256), out_(64, 96)), {}, "alignment",
         "leading stride 264"),
        ((a_(64, 256), b_(256, 96), s_(64, 256), s_(96, 256), out_(64, 96, ld=100)), {}, "alignment", "output"),
        ((a_(2**17, 2**15), b_(2**15, 96), s_(2**17, 2**15), s_(96, 2**15), out_(2**17, 96)), {}, "size", "4 GiB"),
        # output
        ((a_(64, 256), b_(256, 96), s_(64, 256), s_(96, 256), out_(64, 96, torch.float32)), {}, "dtype",
         "not bfloat16 or float16"),
        ((a_(64, 256), b_(256, 96), s_(64, 256), s_(96, 256), out_(64, 96)), {"out_dtype": FP16}, "dtype",
         "out_dtype"),
        # bias
        ((a_(64, 256), b_(256, 96), s_(64, 256), s_(96, 256), out_(64, 96), TensorMeta((96,), (1,), FP16)), {},
         "dtype", "bias dtype"),
        ((a_(64, 256), b_(256, 96), s_(64, 256), s_(96, 256), out_(64, 96), TensorMeta((64, 96), (96, 1), BF16)), {},
         "layout", "per-column vector"),
    ],
)
def test_declines_name_category_and_reason(args, kw, category, text):
    d = check_problem(*args, **kw)
    assert isinstance(d, Decline), d
    assert d.category == category and text in d.reason, d
