"""The rendered gfx950 kernel, summarized and checked with expecttest: a change to the kernel
(or to how FlyDSL lowers it) shows up as a diff of resources and instruction mix.

The goldens were recorded with flydsl 0.5.0 (what CI installs); other releases lower
differently, so the test is skipped there. Re-record with EXPECTTEST_ACCEPT=1.
"""

import re

import pytest
import torch
from expecttest import assert_expected_inline

from torch_flydsl.runtime.probe import flydsl_info
from torch_flydsl.templates.dense_gemm import BASELINE

from rendered_kit import dump_isa_to, family_counts, isa_code, resources, summary_in_subprocess
from test_dense_gemm_compile import compile_one  # same directory: pytest puts it on sys.path

pytestmark = [
    pytest.mark.compile,
    pytest.mark.skipif(flydsl_info().version != "0.5.0", reason="goldens recorded with flydsl 0.5.0"),
]

FAMILIES = {
    "mfma": r"v_mfma_\w+",
    "dma to LDS": r"buffer_load_dword\w* .*\blds\b",
    "LDS reads": r"ds_read\w*",
    "LDS writes": r"ds_write\w*",
    "global stores": r"buffer_store\w*",
    "barriers": r"s_barrier\b",
    "vmcnt waits": r"s_waitcnt\s+vmcnt",
}


def render(layout: str, dump_dir: str) -> str:
    dump_isa_to(dump_dir)
    ck = compile_one(BASELINE, layout, torch.bfloat16, bias=True)
    code = isa_code(dump_dir)
    mfma_kinds = sorted({m for ln in code for m in re.findall(r"v_mfma_\w+", ln)})
    lds_reads = sorted({m for ln in code for m in re.findall(r"ds_read\w*", ln)})
    (k,) = ck.kernels
    return "\n".join([
        resources(k),
        f"mfma kinds: {', '.join(mfma_kinds)}; LDS read kinds: {', '.join(lds_reads)}",
        *family_counts(code, FAMILIES),
    ])


def summary(layout, tmp_path):
    return summary_in_subprocess(__file__, "render", (layout,), tmp_path)


def test_baseline_nt(tmp_path):
    assert_expected_inline(summary("nt", tmp_path), """\
flydsl_dense_gemm_bf16_nt_m128n128k32_w2x2_s4_g0_b1: vgpr=118 agpr=0 sgpr=35 lds=65536 spills=0 scratch=0
mfma kinds: v_mfma_f32_16x16x32_bf16; LDS read kinds: ds_read_b128
mfma: 96
dma to LDS: 24
LDS reads: 56
LDS writes: 64
global stores: 72
barriers: 8
vmcnt waits: 11""")


def test_baseline_tn(tmp_path):
    assert_expected_inline(summary("tn", tmp_path), """\
flydsl_dense_gemm_bf16_tn_m128n128k32_w2x2_s4_g0_b1: vgpr=120 agpr=0 sgpr=36 lds=65536 spills=0 scratch=0
mfma kinds: v_mfma_f32_16x16x32_bf16; LDS read kinds: ds_read_b128, ds_read_b64_tr_b16
mfma: 64
dma to LDS: 16
LDS reads: 72
LDS writes: 64
global stores: 72
barriers: 6
vmcnt waits: 9""")
