"""The register TopK kernel (k <= 16: a wave per row, per-lane sorted lists in VGPRs, a
butterfly merge), compiled for gfx950 and run in the emulator against the exact reference and
against PyTorch's own ``torch.topk``.

Every case goes through ``assert_topk`` (test_topk_emulated.py): no checker finding (the run
raises on a race, an out-of-bounds access or an uninitialized read), values bit-identical to the
reference (NaN payloads, the sign of zero), indices pointing at exactly those values; and here,
because the register kernel orders candidates by (key, index), the indices equal the
reference's on every input (ties by ascending index), sorted or not.
"""

import pytest
import torch

from torch_flydsl.templates.topk.config import REGISTER, register_for
from torch_flydsl.templates.topk.launcher import allocate, checked_problem, run_emulated, shaped
from torch_flydsl.templates.topk.reference import reference

from test_topk_emulated import assert_topk, bits, randn

pytestmark = pytest.mark.emulator

nan, inf = float("nan"), float("inf")


def check(x, k, dim=-1, largest=True, sorted=True):
    problem = checked_problem(x, k, dim, largest, sorted, False)
    cfg = register_for(problem)
    assert cfg.algorithm == REGISTER
    v, i = assert_topk(x, k, dim, largest, sorted, cfg=cfg)
    _, ri = reference(x, k, dim, largest, sorted)
    assert torch.equal(i, ri), (i, ri)  # ties by ascending index, also unsorted (always sorted)
    return v, i


def test_matches_pytorch_on_fresh_random_rows_with_a_tail():
    # 4500 = 4 full loop steps of 4 chunks (4096) + a masked tail of 404; 3 rows: one workgroup
    # has a second wave without a row.
    x = randn(3, 4500, seed=11)
    v, i = check(x, 8)
    with torch.no_grad():
        tv, ti = torch.topk(x, 8)  # distinct random values: PyTorch's answer is unique
    assert torch.equal(v, tv) and torch.equal(i, ti)
    check(x, 8, sorted=False)  # the same kernel: the order of a sorted result is allowed


def test_bf16_smallest_with_nan_signed_zeros_and_ties():
    row = torch.tensor([0.0, -0.0, 1.0, nan, -inf, inf, -0.0, 0.0, -1.0, nan, 5.0, -5.0] * 30)
    x = torch.stack([row, row.flip(0), torch.full_like(row, 2.0)]).bfloat16()  # the last row: all tied
    for k in (1, 3, 4):
        check(x, k, largest=False)
    v, i = check(x, 4, largest=False)
    # the 30 -inf first, the lowest indices first; the all-tied row takes indices 0..3
    assert v[0].tolist() == [-inf] * 4 and i[0].tolist() == [4, 16, 28, 40] and i[2].tolist() == [0, 1, 2, 3]


def test_fp16_largest_nan_first_zero_signs_and_k16():
    row = torch.tensor([0.0, -0.0, 1.0, nan, -inf, inf, -0.0, 0.0, -1.0, nan, 5.0, -5.0] * 30)
    x = torch.stack([row, row.flip(0)]).half()
    v, i = check(x, 16)
    assert torch.isnan(v[:, :16]).all() and int(i[0, 0]) == 3  # NaNs first, the lowest index first
    z = torch.tensor([[-0.0, 0.0, -0.0, 0.0, -1.0] * 4]).half()
    v, i = check(z, 16)
    plus, minus = [1, 3, 6, 8, 11, 13, 16, 18], [0, 2, 5, 7, 10, 12, 15, 17]
    assert i.tolist() == [plus + minus] and bits(v).tolist() == bits(z[:, plus + minus]).tolist()


def test_rows_shorter_than_a_wave_padded_strides_and_a_transposed_dim():
    check(randn(5, 37, seed=3), 8)  # lanes past 37 masked
    check(randn(2, 7, seed=3), 7)  # k == n
    wide = randn(5, 600, seed=5)
    check(wide[:, 13:513], 7)  # row stride 600, storage offset 13: unaligned 16-byte chunks
    check(randn(4, 300, seed=6).t(), 8, dim=0)  # [300, 4], dim 0 unit-stride


def test_rows_loop_when_the_grid_is_smaller_than_the_rows_and_results_repeat_bit_for_bit():
    x = torch.randint(0, 3, (9, 700), generator=torch.Generator().manual_seed(4)).float()  # ties everywhere
    problem = checked_problem(x, 8, -1, True, True, False)
    cfg = register_for(problem)
    runs = []
    for _ in range(2):
        values, indices = allocate(x, problem)
        run_emulated(cfg, problem, x, values, indices, grid=2)  # 2 workgroups x 2 waves: rows loop
        runs.append((shaped(x, -1, values), shaped(x, -1, indices)))
    assert_topk(x, 8, got=runs[0])
    assert torch.equal(bits(runs[0][0]), bits(runs[1][0])) and torch.equal(runs[0][1], runs[1][1])
    assert torch.equal(runs[0][1], reference(x, 8)[1])  # the lowest-index ties, in index order


@pytest.mark.slow
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("largest", [True, False])
@pytest.mark.parametrize("k", [1, 2, 5, 8, 16])
def test_sweep(dtype, largest, k):
    for n, rows in ((k, 1), (63, 3), (1024, 2), (4097, 2)):
        x = randn(rows, n, dtype=dtype, seed=n + k)
        x[0, ::7] = nan
        if rows > 1:
            x[1, ::5] = 0.0
            x[1, ::11] = -0.0
        check(x, k, largest=largest)
        check(x, k, largest=largest, sorted=False)
