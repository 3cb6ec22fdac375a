"""The rendered gfx950 RMSNorm kernel, summarized and checked with expecttest: resources and
instruction mix (16-byte vector loads/stores of the row body, scalar head/tail accesses, the
cross-lane reduction, barriers) of a one-wave and a multi-wave config. A change to the kernel
(or to how FlyDSL lowers it) shows as a diff.

Goldens recorded with flydsl 0.5.0; skipped on other releases. Re-record with EXPECTTEST_ACCEPT=1.
"""

import pytest
import torch
from expecttest import assert_expected_inline

from torch_flydsl.runtime.probe import flydsl_info
from torch_flydsl.templates.rmsnorm import RmsNormConfig

from rendered_kit import dump_isa_to, family_counts, isa_code, resources, summary_in_subprocess
from test_rmsnorm_compile import compile_one  # same directory: pytest puts it on sys.path

pytestmark = [
    pytest.mark.compile,
    pytest.mark.skipif(flydsl_info().version != "0.5.0", reason="goldens recorded with flydsl 0.5.0"),
]

FAMILIES = {
    "16-byte loads": r"buffer_load_dwordx4\b",
    "scalar loads": r"buffer_load_(ushort|short_d16|dword)\b",
    "16-byte stores": r"buffer_store_dwordx4\b",
    "scalar stores": r"buffer_store_(short|dword)\b",
    "cross-lane": r"(ds_bpermute_b32|ds_swizzle_b32|v_\w+_dpp|\S+.*\b(row_shr|row_bcast|quad_perm|row_ror)\b)",
    "LDS reads": r"ds_read\w*",
    "LDS writes": r"ds_write\w*",
    "barriers": r"s_barrier\b",
    "sqrt/rsq/rcp": r"v_(rsq|sqrt|rcp)_f32",
    "branches": r"s_cbranch\w*",
}


def render(key: str, dtype: str, dump_dir: str) -> str:
    dump_isa_to(dump_dir)
    ck = compile_one(RmsNormConfig.from_key(key), getattr(torch, dtype), True)
    (k,) = ck.kernels
    return "\n".join([resources(k), *family_counts(isa_code(dump_dir), FAMILIES)])


def summary(key, dtype, tmp_path):
    return summary_in_subprocess(__file__, "render", (key, dtype), tmp_path)


def test_one_wave_per_row_bf16(tmp_path):
    assert_expected_inline(summary("rms_w1_r4_s2", "bfloat16", tmp_path), """\
flydsl_rmsnorm_bf16_rms_w1_r4_s2_w1: vgpr=56 agpr=0 sgpr=42 lds=0 spills=0 scratch=0
16-byte loads: 4
scalar loads: 2
16-byte stores: 2
scalar stores: 2
cross-lane: 4
LDS reads: 0
LDS writes: 0
barriers: 0
sqrt/rsq/rcp: 4
branches: 2""")


def test_four_waves_per_row_bf16(tmp_path):
    assert_expected_inline(summary("rms_w4_r1_s4", "bfloat16", tmp_path), """\
flydsl_rmsnorm_bf16_rms_w4_r1_s4_w1: vgpr=62 agpr=0 sgpr=55 lds=32 spills=0 scratch=0
16-byte loads: 8
scalar loads: 2
16-byte stores: 4
scalar stores: 2
cross-lane: 4
LDS reads: 1
LDS writes: 1
barriers: 1
sqrt/rsq/rcp: 4
branches: 3""")
