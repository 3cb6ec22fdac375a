"""The TopK family's choice between its two kernels, the config keys, and the deterministic
flag reaching the kernel spec (no compile)."""

import pytest
import torch

from torch_flydsl.templates.topk.config import (RADIX, REGISTER, TopKConfig, baseline_for, choose, config_fits,
                                                search_space)
from torch_flydsl.templates.topk.eligibility import check_problem
from torch_flydsl.templates.topk.launcher import grid_for, kernel_spec
from torch_flydsl.templates.base import TensorMeta


def problem(rows=64, n=4096, k=8, dtype=torch.float32, deterministic=False):
    return check_problem(TensorMeta.contiguous((rows, n), dtype), k, -1, True, True, deterministic)


@pytest.mark.parametrize("k,algorithm,key", [(1, REGISTER, "topk_t128_kp1_reg"), (5, REGISTER, "topk_t128_kp8_reg"),
                                             (16, REGISTER, "topk_t128_kp16_reg"), (17, RADIX, "topk_t256_kp32")])
def test_register_kernel_serves_k_up_to_16_and_radix_above(k, algorithm, key):
    p = problem(k=k)
    assert choose(p)[0] == algorithm and baseline_for(p).key() == key
    assert TopKConfig.from_key(key) == baseline_for(p)


def test_register_configs_decline_with_reasons():
    assert "holds fewer than k=9" in str(config_fits(TopKConfig(128, 8, REGISTER), problem(k=9)))
    assert "runs 128 (two waves, a row each)" in str(config_fits(TopKConfig(256, 8, REGISTER), problem()))
    assert "not a power of two in [1, 16]" in str(config_fits(TopKConfig(128, 32, REGISTER), problem(k=17)))
    big = check_problem(TensorMeta.contiguous((40000, 32768), torch.float32), 8, -1)
    assert choose(big)[0] == RADIX and "row buffers address at most 2 GiB" in choose(big)[1]
    assert [c.algorithm for c in search_space(big)] == [RADIX, RADIX]
    with pytest.raises(ValueError, match="not a TopK config key"):
        TopKConfig.from_key("topk_t128_kp8_radix")


def test_two_rows_per_register_workgroup_and_the_deterministic_flag_reaches_the_radix_spec():
    p = problem(rows=9)
    assert grid_for(p, baseline_for(p)) == 5 and grid_for(p, TopKConfig(256, 8)) == 9
    assert kernel_spec(TopKConfig(256, 8), problem(deterministic=True)).index_order is True
    assert kernel_spec(TopKConfig(256, 8), problem()).index_order is False
    torch.use_deterministic_algorithms(True)
    try:
        assert check_problem(TensorMeta.contiguous((4, 100), torch.float32), 3).deterministic is True
    finally:
        torch.use_deterministic_algorithms(False)
    assert check_problem(TensorMeta.contiguous((4, 100), torch.float32), 3).deterministic is False
