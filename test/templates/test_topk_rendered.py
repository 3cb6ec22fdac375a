"""The rendered gfx950 TopK kernels, summarized and checked with expecttest: resources and
instruction mix (global loads of the row, LDS histogram atomics, the scan and bitonic sort's
LDS traffic, barriers, branches) of a small-k and a k=1024 radix config, and of the register
kernel (no LDS, no barrier: 16-byte row loads, 64-bit compares of the candidate networks, the
cross-lane shuffles of the threshold and the butterfly merge). A change to a kernel (or to how
FlyDSL lowers it) shows as a diff.

Goldens recorded with flydsl 0.5.0; skipped on other releases. Re-record with EXPECTTEST_ACCEPT=1.
"""

import pytest
import torch
from expecttest import assert_expected_inline

from torch_flydsl.runtime.probe import flydsl_info
from torch_flydsl.templates.topk.config import TopKConfig

from rendered_kit import dump_isa_to, family_counts, isa_code, resources, summary_in_subprocess

pytestmark = [
    pytest.mark.compile,
    pytest.mark.skipif(flydsl_info().version != "0.5.0", reason="goldens recorded with flydsl 0.5.0"),
]

FAMILIES = {
    "global loads": r"(buffer|global)_load\w*",
    "global stores": r"(buffer|global)_store\w*",
    "LDS atomics": r"ds_(add|inc|max|min)\w*",
    "LDS reads": r"ds_read\w*",
    "LDS writes": r"ds_write\w*",
    "cross-lane": r"(ds_bpermute_b32|ds_swizzle_b32|v_\w+_dpp|\S+.*\b(row_shr|row_bcast|quad_perm|row_ror)\b)",
    "64-bit compares": r"v_cmp_\w+_u64",
    "exec skips": r"s_cbranch_execz",
    "barriers": r"s_barrier\b",
    "branches": r"s_cbranch\w*",
}


def render(threads: int, k_pad: int, dtype: str, dump_dir: str, algorithm: str = "radix") -> str:
    from torch_flydsl.runtime.compile import compile_gfx950
    from torch_flydsl.templates.topk.launcher import allocate, checked_problem, compile_args

    dump_isa_to(dump_dir)
    cfg = TopKConfig(threads, k_pad, algorithm)
    x = torch.empty(100, 32768, dtype=getattr(torch, dtype))  # CPU stand-in, never launched
    problem = checked_problem(x, k_pad, -1, True, True, False)
    jit_fn, args = compile_args(cfg, problem, x, *allocate(x, problem))
    (k,) = compile_gfx950(jit_fn, *args).kernels
    return "\n".join([resources(k), *family_counts(isa_code(dump_dir), FAMILIES)])


def summary(threads, k_pad, dtype, tmp_path, algorithm="radix"):
    render_fn = "render" if algorithm == "radix" else "render_register"
    return summary_in_subprocess(__file__, render_fn, (threads, k_pad, dtype), tmp_path)


def render_register(threads: int, k_pad: int, dtype: str, dump_dir: str) -> str:
    return render(threads, k_pad, dtype, dump_dir, "register")


def test_small_k_fp32(tmp_path):
    assert_expected_inline(summary(256, 8, "float32", tmp_path), """\
flydsl_topk_fp32_largest_sorted_topk_t256_kp8: vgpr=34 agpr=0 sgpr=80 lds=4192 spills=0 scratch=0
global loads: 29
global stores: 2
LDS atomics: 20
LDS reads: 34
LDS writes: 36
cross-lane: 30
64-bit compares: 0
exec skips: 49
barriers: 26
branches: 85""")


def test_k_1024_bf16(tmp_path):
    assert_expected_inline(summary(512, 1024, "bfloat16", tmp_path), """\
flydsl_topk_bf16_largest_sorted_topk_t512_kp1024: vgpr=55 agpr=0 sgpr=100 lds=16432 spills=0 scratch=0
global loads: 30
global stores: 4
LDS atomics: 20
LDS reads: 146
LDS writes: 143
cross-lane: 30
64-bit compares: 0
exec skips: 101
barriers: 75
branches: 137""")


def test_register_k8_fp32(tmp_path):
    assert_expected_inline(summary(128, 8, "float32", tmp_path, "register"), """\
flydsl_topk_fp32_largest_topk_t128_kp8_reg: vgpr=76 agpr=0 sgpr=95 lds=0 spills=0 scratch=0
global loads: 10
global stores: 2
LDS atomics: 0
LDS reads: 0
LDS writes: 0
cross-lane: 86
64-bit compares: 392
exec skips: 6
barriers: 0
branches: 12""")


@pytest.mark.slow
def test_register_k16_bf16(tmp_path):
    assert_expected_inline(summary(128, 16, "bfloat16", tmp_path, "register"), """\
flydsl_topk_bf16_largest_topk_t128_kp16_reg: vgpr=119 agpr=0 sgpr=106 lds=0 spills=14 scratch=0
global loads: 11
global stores: 2
LDS atomics: 0
LDS reads: 0
LDS writes: 0
cross-lane: 150
64-bit compares: 1280
exec skips: 6
barriers: 0
branches: 12""")
