"""The radix TopK kernel (the family's large-k path), compiled for gfx950 and run in the
emulator, against the exact reference (the register kernel: test_topk_register_emulated.py).

Every case checks: no checker finding (``run_emulated`` raises on one); values bit-identical to
the reference (NaN payloads and the sign of zero included); indices in range, distinct per row
and pointing at exactly those values; sorted results in the reference's order (key order,
equal keys by ascending index), unsorted ones the same multiset.
"""

import pytest
import torch

from torch_flydsl.templates.topk.config import TopKConfig, k_pad_for, radix_for
from torch_flydsl.templates.topk.launcher import allocate, checked_problem, run_emulated, shaped, topk
from torch_flydsl.templates.topk.reference import order_keys, reference

pytestmark = pytest.mark.emulator

_INT = {torch.float32: torch.int32, torch.float16: torch.int16, torch.bfloat16: torch.int16}


def bits(t):
    return t.contiguous().view(_INT[t.dtype])


def assert_topk(x, k, dim=-1, largest=True, sorted=True, cfg=None, got=None, config_for=radix_for,
                deterministic=None):
    """Checks the kernel ``cfg`` (default: ``config_for(problem)``, the radix config) against the
    reference; returns the kernel's ``(values, indices)``."""
    if got is None:
        cfg = cfg or config_for(checked_problem(x, k, dim, largest, sorted, deterministic))
        got = topk(x, k, dim, largest, sorted, cfg=cfg, deterministic=deterministic)
    v, i = got
    rv, ri = reference(x, k, dim, largest, sorted)
    assert v.shape == rv.shape and i.shape == ri.shape and i.dtype == torch.int64 and v.dtype == x.dtype
    # indices valid, distinct, pointing at the returned values (bit for bit)
    n = x.shape[dim]
    assert int(i.min()) >= 0 and int(i.max()) < n
    im = i.movedim(dim, -1).reshape(-1, k)
    assert all(len(set(r.tolist())) == k for r in im)
    # Gather the bit patterns, not the floats: torch.gather on bf16 CPU tensors rewrites a NaN's
    # bits (0x7FC0 comes back as 0xFFFF), which would hide or fake a payload difference.
    assert torch.equal(torch.gather(bits(x), dim, i), bits(v))
    if sorted:
        assert torch.equal(bits(v), bits(rv)), (v, rv)
        # Which of several elements equal to the k-th key are taken is unspecified (PyTorch too);
        # the kernel's order among equal keys is ascending index.
        keys = order_keys(v.movedim(dim, -1), largest).reshape(-1, k)
        same = keys[:, 1:] == keys[:, :-1]
        assert (im[:, 1:][same] > im[:, :-1][same]).all()
        if not (keys[:, -1:] == order_keys(x.movedim(dim, -1), largest).reshape(-1, n)).sum(-1).gt(1).any():
            assert torch.equal(i, ri)  # no tie at the threshold: the indices are determined
    else:  # same multiset of selected keys per row
        ours = order_keys(v.movedim(dim, -1), largest).sort(-1).values
        theirs = order_keys(rv.movedim(dim, -1), largest).sort(-1).values
        assert torch.equal(ours, theirs)
    return v, i


def randn(*shape, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).to(dtype)


@pytest.mark.parametrize("k", [1, 2, 8, 64, 300])
def test_fp32_largest_sorted_every_k_up_to_n(k):
    assert_topk(randn(3, 300), k)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("largest", [True, False])
@pytest.mark.parametrize("sorted_", [True, False])
def test_every_dtype_order_and_sortedness(dtype, largest, sorted_):
    assert_topk(randn(4, 777, dtype=dtype, seed=1), 64 if sorted_ else 9, largest=largest, sorted=sorted_)


def test_duplicates_pick_ties_by_index_and_point_at_equal_values():
    g = torch.Generator().manual_seed(2)
    x = torch.randint(0, 5, (3, 1000), generator=g).float()  # ~200 copies of each value
    for k in (1, 64, 333):
        assert_topk(x, k)
        assert_topk(x, k, largest=False, sorted=False)
    assert_topk(torch.ones(2, 513), 100)  # every key equal: the need-th tie is the threshold


def test_nan_counts_as_largest_and_zero_signs_order_like_pytorchs_radix_keys():
    nan, inf = float("nan"), float("inf")
    row = torch.tensor([0.0, -0.0, 1.0, nan, -inf, inf, -0.0, 0.0, -1.0, nan, 5.0, -5.0] * 30)
    x = torch.stack([row, row.flip(0)])
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        xd = x.to(dtype)
        for k in (1, 2, 64, 100, 360):
            assert_topk(xd, k, largest=True)
            assert_topk(xd, k, largest=False)
    # The rule itself, as PyTorch's convert() orders it: NaN first for largest, last for smallest;
    # +0.0 above -0.0.
    v, _ = assert_topk(x, 62)
    assert torch.isnan(v[:, :60]).all() and torch.equal(v[:, 60:], torch.full((2, 2), inf))
    z = torch.tensor([[-0.0, 0.0, -0.0, 0.0]])
    v, i = assert_topk(z, 2)
    assert torch.equal(bits(v), bits(torch.tensor([[0.0, 0.0]]))) and i.tolist() == [[1, 3]]
    v, i = assert_topk(z, 3, largest=False)
    assert i.tolist() == [[0, 2, 1]] and torch.signbit(v[0, :2]).all() and not torch.signbit(v[0, 2])
    v, _ = assert_topk(torch.tensor([[nan, 1.0, 2.0]]), 2, largest=False)
    assert v.tolist() == [[1.0, 2.0]]


def test_big_row_k_1024():
    assert_topk(randn(1, 32768, seed=3), 1024)


def test_rows_loop_when_the_grid_is_smaller_than_the_rows():
    x = randn(7, 200, seed=4)
    problem = checked_problem(x, 5, -1, True, True)
    values, indices = allocate(x, problem)
    run_emulated(TopKConfig(256, k_pad_for(5)), problem, x, values, indices, grid=3)
    assert_topk(x, 5, got=(shaped(x, -1, values), shaped(x, -1, indices)))


def test_padded_rows_and_a_transposed_dim_are_read_in_place():
    wide = randn(5, 600, seed=5)
    assert_topk(wide[:, 13:513], 16)  # row stride 600, storage offset 13
    t = randn(4, 300, seed=6).t()  # [300, 4] with strides (1, 300): dim 0 is unit-stride
    assert_topk(t, 8, dim=0)
    assert_topk(randn(2, 3, 129, seed=7), 4)  # 3-d: rows collapse


@pytest.mark.parametrize("threads", [512])
def test_wider_workgroups(threads):
    assert_topk(randn(2, 3000, seed=8), 100, cfg=TopKConfig(threads, 128))


@pytest.mark.slow
@pytest.mark.parametrize("n", [1, 63, 1024, 4097, 32768])
@pytest.mark.parametrize("k", [1, 2, 8, 64, 1024])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_sweep(n, k, dtype):
    if k > n:
        pytest.skip("k > n is PyTorch's error")
    x = randn(2, n, dtype=dtype, seed=n + k)
    x[0, ::7] = float("nan")
    x[1, ::5] = 0.0
    x[1, ::11] = -0.0
    for largest in (True, False):
        assert_topk(x, k, largest=largest)
        assert_topk(x, k, largest=largest, sorted=False)


def test_deterministic_mode_takes_the_lowest_index_ties_in_index_order_bit_for_bit():
    """Under torch.use_deterministic_algorithms(True) the gather takes elements in index order:
    the lowest-index ties at the k-th place, equal values in index order (sorted and unsorted),
    the same bits on every run. Without it, ties at the k-th place come in lane-strided order."""
    x = torch.randint(0, 4, (3, 1000), generator=torch.Generator().manual_seed(9)).float()  # ~250 ties each
    rv, ri = reference(x, 100)
    cfg = TopKConfig(256, 128)
    torch.use_deterministic_algorithms(True)
    try:  # deterministic=None: the kernel follows torch's flag
        runs = [assert_topk(x, 100, cfg=cfg) for _ in range(2)]
        v, i = assert_topk(x, 100, sorted=False, cfg=cfg)
    finally:
        torch.use_deterministic_algorithms(False)
    assert all(torch.equal(bits(r[0]), bits(rv)) and torch.equal(r[1], ri) for r in runs)
    assert torch.equal(i.sort(-1).values, ri.sort(-1).values)  # the same (lowest-index) elements
    keys = order_keys(v).reshape(-1, 100)
    later = (keys[:, None, :] == keys[:, :, None]) & (torch.arange(100)[None, :, None] < torch.arange(100))
    assert (i[:, :, None] < i[:, None, :])[later].all()  # equal keys: index order in the slots too
    fast = assert_topk(x, 100, cfg=cfg, deterministic=False)
    assert torch.equal(bits(fast[0]), bits(rv)) and not torch.equal(fast[1], ri)  # lane-strided ties
