"""The rendered gfx950 grouped GEMM kernel, summarized and checked with expecttest: a change to
the kernel (or to how FlyDSL lowers it) shows as a diff of resources and instruction mix.

Goldens recorded with flydsl 0.5.0 (what CI installs); skipped on other releases. Re-record with
EXPECTTEST_ACCEPT=1.
"""

import pytest
from expecttest import assert_expected_inline

from torch_flydsl.runtime.probe import flydsl_info
from torch_flydsl.templates.grouped_gemm import GroupedGemmConfig

from rendered_kit import dump_isa_to, family_counts, isa_code, resources, summary_in_subprocess
from test_grouped_gemm_compile import compile_one  # same directory: pytest puts it on sys.path

pytestmark = [
    pytest.mark.compile,
    pytest.mark.skipif(flydsl_info().version != "0.5.0", reason="goldens recorded with flydsl 0.5.0"),
]

FAMILIES = {
    "mfma": r"v_mfma_\w+",
    "16-byte DMA to LDS": r"buffer_load_dwordx4 .*\blds\b",
    "offset loads": r"(buffer_load_dword|s_buffer_load_dword|s_load_dword)\b(?!.*\blds\b)",
    "LDS reads": r"ds_read\w*",
    "LDS writes": r"ds_write\w*",
    "global stores": r"buffer_store\w*",
    "barriers": r"s_barrier\b",
    "vmcnt waits": r"s_waitcnt\s+vmcnt",
    "branches": r"s_cbranch\w*",
}


def render(key: str, b_major: str, dump_dir: str) -> str:
    dump_isa_to(dump_dir)
    ck = compile_one(GroupedGemmConfig.from_key(key), b_major)
    (k,) = ck.kernels
    return "\n".join([resources(k), *family_counts(isa_code(dump_dir), FAMILIES)])


def summary(key, b_major, tmp_path):
    return summary_in_subprocess(__file__, "render", (key, b_major), tmp_path)


def test_moe_decode_tile_column_major_experts(tmp_path):
    assert_expected_inline(summary("grp_m32n128k64_w1x4_s3_g0", "col", tmp_path), """\
flydsl_grouped_gemm_ragged_bf16_nt_grp_m32n128k64_w1x4_s3_g0: vgpr=80 agpr=0 sgpr=73 lds=61440 spills=0 scratch=0
mfma: 40
16-byte DMA to LDS: 25
offset loads: 7
LDS reads: 42
LDS writes: 16
global stores: 18
barriers: 8
vmcnt waits: 8
branches: 34""")
