"""The grouped GEMM family's gate and configs: which operands it takes and why it declines."""

import pytest
import torch

from torch_flydsl.templates.base import Decline, TensorMeta
from torch_flydsl.templates.grouped_gemm import CURATED, GroupedGemmConfig, GroupedGemmProblem, check_problem, configs_for
from torch_flydsl.templates.grouped_gemm.family import FAMILY as family
from torch_flydsl.templates.grouped_gemm.launcher import grid_block

BF16, I32 = torch.bfloat16, torch.int32
C = TensorMeta.contiguous


def metas(t=1024, n=4096, k=2048, g=8, b_major="col", dtype=BF16):
    b = TensorMeta((g, k, n), (n * k, 1, k), dtype) if b_major == "col" else C((g, k, n), dtype)
    return C((t, k), dtype), b, C((g,), I32), C((t, n), dtype)


def test_moe_forward_is_taken_for_both_expert_majors():
    for major in ("col", "row"):
        p = check_problem(*metas(b_major=major))
        assert p == GroupedGemmProblem(1024, 4096, 2048, 8, BF16, major)


def test_batched_3d_x_3d_is_the_ragged_problem_with_fixed_groups():
    a, b, _, _ = metas()
    p = check_problem(C((8, 64, 2048), BF16), b, None, C((8, 64, 4096), BF16))
    assert p == GroupedGemmProblem(8 * 64, 4096, 2048, 8, BF16, "col", group_rows=64) and p.batched


def test_weight_gradient_form_splits_k_by_offs():
    a = TensorMeta((256, 1000), (1, 256), BF16)  # X^T of a row-major [T=1000, 256] X
    b = C((1000, 512), BF16)
    p = check_problem(a, b, C((8,), I32), C((8, 256, 512), BF16))
    assert p == GroupedGemmProblem(256, 512, 1000, 8, BF16, "row", along_k=True)
    fitting, declined = configs_for(p, "curated")
    # K=1000 fits every block_k (each group's K tail is masked); only the big prefetch tile is
    # declined along K (it would spill).
    assert len(fitting) == len(CURATED) - 1 and [c.prefetch for c, _ in declined] == [1]


def test_zero_tokens_is_a_problem_not_a_decline():
    assert isinstance(check_problem(*metas(t=0)), GroupedGemmProblem)


@pytest.mark.parametrize("change, category, text", [
    (lambda a, b, o, out: (C((8, 64, 2048), BF16), b, o, C((8, 64, 4096), BF16)), "shape", "takes no offs"),
    (lambda a, b, o, out: (TensorMeta((8, 64, 2048), (2048 * 80, 2048, 1), BF16), b, None, C((8, 64, 4096), BF16)),
     "layout", "not stacked"),
    (lambda a, b, o, out: (a, C((2048, 4096), BF16), o, C((8, 1024, 4096), BF16)), "layout", "contiguous along M"),
    (lambda a, b, o, out: (a, b, None, out), "shape", "needs offs"),
    (lambda a, b, o, out: (a, b, C((8,), torch.int64), out), "shape", "int32"),
    (lambda a, b, o, out: (TensorMeta((1024, 2048), (1, 1024), BF16), b, o, out), "layout", "row-major [T, K]"),
    (lambda a, b, o, out: (a, TensorMeta((8, 2048, 4096), (1, 8 * 4096, 8), BF16), o, out), "layout",
     "row- or column-major"),
    (lambda a, b, o, out: (C((1024, 2048), torch.float32), b, o, out), "dtype", "not bfloat16"),
    (lambda a, b, o, out: (TensorMeta((1024, 2048), (2048, 1), BF16, offset=3), b, o, out), "alignment", "16-byte"),
    (lambda a, b, o, out: (a, TensorMeta((8, 2048, 4096), (4096 * 2048 + 4, 1, 2048), BF16), o, out), "alignment",
     "B's group"),
])
def test_declines_name_category_and_reason(change, category, text):
    d = check_problem(*change(*metas()))
    assert isinstance(d, Decline) and d.category == category and text in d.reason, d


def test_a_bias_is_declined_by_the_family():
    a, b, o, out = metas()
    d = family.problem_from_metas("grouped_mm", [a, b, o], out, {"bias": True})
    assert isinstance(d, Decline) and "bias" in d.reason


def test_configs_need_k_a_multiple_of_block_k_and_no_group_m():
    fitting, declined = configs_for(GroupedGemmProblem(64, 256, 80, 4, BF16), "curated")
    assert fitting == [] and all("not a multiple of block_k" in d.reason for _, d in declined)
    assert "group_m must be 0" in GroupedGemmConfig(128, 128, 64, 2, 2, 2, 8).static_problems()[0]
    assert all(c.is_valid() for c in CURATED)


@pytest.mark.parametrize("tokens, groups, expected", [(1024, 8, "grp_m128n128k32_w2x2_s4_g0"),
                                                      (256, 8, "grp_m32n128k64_w1x4_s3_g0"),
                                                      (512, 8, "grp_m64n128k64_w2x2_s3_g0")])
def test_autotuning_off_picks_the_tile_by_mean_rows_per_group(tokens, groups, expected):
    (cfg,), _ = configs_for(GroupedGemmProblem(tokens, 4096, 2048, groups, BF16), "baseline")
    assert cfg.key() == expected


def test_grid_is_the_tile_bound_or_what_the_gpu_holds_whichever_is_smaller():
    from torch_flydsl.templates.gemm.limits import NUM_CUS
    from torch_flydsl.templates.gemm.persistent import tile_upper_bound
    from torch_flydsl.templates.grouped_gemm.launcher import resident_per_cu

    cfg = GroupedGemmConfig(32, 128, 64, 1, 4, 3, 0)
    # Worst split of 100 rows into 4 groups: each adds one partial tile to ceil(100 / 32) = 4.
    assert tile_upper_bound(100, 4, 256, 32, 128) == (4 + 4) * 2
    assert sum(-(-s // 32) for s in (1, 1, 1, 97)) * 2 <= tile_upper_bound(100, 4, 256, 32, 128)
    assert grid_block(cfg, tokens=100, groups=4, n=256)[0] == (16, 1, 1)
    big = grid_block(cfg, tokens=131072, groups=128, n=4096)[0][0]
    assert big == NUM_CUS * resident_per_cu(cfg) == 256 * 2  # 61440 B of LDS: two per CU
    assert grid_block(cfg, 100, 4, 256, workgroups=3)[0] == (3, 1, 1)


def test_weight_gradient_operands_keep_room_under_4_gib_for_the_masked_tail():
    # The K tail's loads point at the span's end; a span within 32 bytes of 4 GiB would wrap.
    t = (2**32 - 16) // 16  # A [8, T] contiguous along M: 16 bytes per K row
    a = TensorMeta((8, t), (1, 8), BF16)
    assert a.byte_span() == 2**32 - 16
    d = check_problem(a, C((t, 8), BF16), C((8,), I32), C((8, 8, 8), BF16))
    assert isinstance(d, Decline) and d.category == "size" and "under 4 GiB" in d.reason


def test_the_big_prefetch_tile_serves_the_forward_not_groups_along_k_and_says_why():
    from torch_flydsl.templates.grouped_gemm import CURATED, GroupedGemmProblem, config_fits

    (big,) = [c for c in CURATED if c.prefetch]
    for major in ("col", "row"):
        assert config_fits(big, GroupedGemmProblem(8192, 4096, 2048, 8, torch.bfloat16, major)) is None
    why = config_fits(big, GroupedGemmProblem(64, 4096, 8192, 8, torch.bfloat16, "row", along_k=True))
    assert why is not None and "spills" in why.reason and "along K" in why.reason, why
