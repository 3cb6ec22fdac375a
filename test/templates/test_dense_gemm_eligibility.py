"""The gate matrix: which operand descriptions the dense GEMM family takes, and the reason when not."""

import pytest
import torch

from torch_flydsl.templates.base import Decline, TensorMeta
from torch_flydsl.templates.dense_gemm.eligibility import check_problem
from torch_flydsl.templates.dense_gemm.problem import GemmProblem

BF16 = torch.bfloat16


def row(m, n, dtype=BF16, ld=None, offset=0):
    return TensorMeta((m, n), (ld or n, 1), dtype, offset)


def col(m, n, dtype=BF16, ld=None, offset=0):
    return TensorMeta((m, n), (1, ld or m), dtype, offset)


@pytest.mark.parametrize(
    "a_major, b_major, layout",
    [("row", "row", "nn"), ("row", "col", "nt"), ("col", "row", "tn"), ("col", "col", "tt")],
)
def test_every_layout_is_taken_from_strides(a_major, b_major, layout):
    make = {"row": row, "col": col}
    p = check_problem(make[a_major](64, 128), make[b_major](128, 256), row(64, 256))
    assert p == GemmProblem(64, 256, 128, BF16, a_major, b_major, None)
    assert p.layout == layout


def test_padded_leading_stride_and_aligned_offset_are_taken():
    p = check_problem(row(64, 128, ld=136, offset=8), col(128, 256, ld=144), row(64, 256, ld=264))
    assert isinstance(p, GemmProblem)


@pytest.mark.parametrize(
    "bias, ok",
    [
        (TensorMeta((256,), (1,), BF16), True),
        (TensorMeta((64, 256), (0, 1), BF16), True),  # expanded, as autotuning benchmarks it
        (TensorMeta((64, 256), (256, 1), BF16), False),  # a full matrix
        (TensorMeta((64, 1), (1, 1), BF16), False),  # per-row
        (TensorMeta((256,), (1,), torch.float16), False),  # dtype differs
    ],
)
def test_bias_must_be_one_value_per_output_column(bias, ok):
    p = check_problem(row(64, 128), row(128, 256), row(64, 256), bias)
    assert isinstance(p, GemmProblem) is ok
    if ok:
        assert p.bias == "row"


@pytest.mark.parametrize(
    "a, b, out, kw, category, text",
    [
        (row(64, 128, torch.float32), row(128, 256, torch.float32), row(64, 256, torch.float32), {}, "dtype", "float32"),
        (row(64, 128), row(128, 256, torch.float16), row(64, 256), {}, "dtype", "mixed"),
        (row(64, 128), row(128, 256), row(64, 256), {"out_dtype": torch.float32}, "dtype", "out_dtype"),
        (row(64, 128, offset=3), row(128, 256), row(64, 256), {}, "alignment", "starts 3 elements"),
        (row(64, 128, ld=131), row(128, 256), row(64, 256), {}, "alignment", "leading stride 131"),
        (row(64, 128), col(128, 256, ld=130), row(64, 256), {}, "alignment", "leading stride 130"),
        (TensorMeta((64, 128), (256, 2), BF16), row(128, 256), row(64, 256), {}, "layout", "neither"),
        (row(64, 128), row(128, 256), col(64, 256), {}, "layout", "not row-major"),
        (row(0, 128), row(128, 256), row(0, 256), {}, "shape", "empty"),
        (row(64, 128), row(64, 256), row(64, 256), {}, "shape", "inconsistent"),
        (row(2**16, 2**15 + 8), row(2**15 + 8, 256), row(2**16, 256), {}, "size", "4 GiB"),
    ],
)
def test_declines_carry_a_category_and_a_readable_reason(a, b, out, kw, category, text):
    d = check_problem(a, b, out, **kw)
    assert isinstance(d, Decline)
    assert d.category == category
    assert text in d.reason


def test_three_d_operands_are_declined():
    a = TensorMeta((2, 64, 128), (8192, 128, 1), BF16)
    d = check_problem(a, row(128, 256), row(64, 256))
    assert isinstance(d, Decline) and d.category == "shape"


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_an_m_or_n_contiguous_operand_must_end_on_a_dword(dtype):
    # Column-major A / row-major B are loaded in 16-byte vectors that may run past their last
    # element; the buffer unit zero-fills whole dwords past num_records, which is exact only
    # when the operand's span ends on a dword: odd M (A) or odd N (B) is declined, even is taken.
    def gate(a, b):
        return check_problem(a, b, row(a.shape[0], b.shape[1], dtype, ld=104))

    d = gate(col(97, 128, dtype, ld=104), row(128, 96, dtype))
    assert isinstance(d, Decline) and d.category == "shape"
    assert "A is contiguous along M and M=97 is odd" in d.reason and "dword" in d.reason
    d = gate(row(96, 128, dtype), row(128, 97, dtype, ld=104))
    assert isinstance(d, Decline) and "B is contiguous along N and N=97 is odd" in d.reason
    assert isinstance(gate(col(98, 128, dtype, ld=104), row(128, 100, dtype, ld=104)), GemmProblem)
    # K-contiguous operands never load past their last element: odd M / N are fine there.
    assert isinstance(gate(row(97, 128, dtype), col(128, 97, dtype)), GemmProblem)


@pytest.mark.parametrize("stride", [(256, 1), (0, 1)])
def test_a_one_row_bias_is_a_column_vector_whatever_its_row_stride(stride):
    # M == 1: a [1, N] bias (e.g. bias[None], strides (N, 1)) is the per-column vector itself.
    p = check_problem(row(1, 128), row(128, 256), row(1, 256), TensorMeta((1, 256), stride, BF16))
    assert isinstance(p, GemmProblem) and p.bias == "row"
