"""The rendered gfx950 MX scaled GEMM kernel, summarized and checked with expecttest: a change
to the kernel (or to how FlyDSL lowers it) shows up as a diff of resources and instruction mix.

The goldens were recorded with flydsl 0.5.0 (what CI installs); other releases lower
differently, so the test is skipped there. Re-record with EXPECTTEST_ACCEPT=1.
"""

import re
from collections import Counter

import pytest
import torch
from expecttest import assert_expected_inline

from torch_flydsl.runtime.probe import flydsl_info
from torch_flydsl.templates.scaled_gemm import ScaledGemmConfig

from rendered_kit import dump_isa_to, family_counts, isa_code, resources, summary_in_subprocess
from test_scaled_gemm_compile import compile_one  # same directory: pytest puts it on sys.path

pytestmark = [
    pytest.mark.compile,
    pytest.mark.skipif(flydsl_info().version != "0.5.0", reason="goldens recorded with flydsl 0.5.0"),
]

FAMILIES = {
    "scaled mfma": r"v_mfma_scale_\w+",
    "16-byte DMA to LDS": r"buffer_load_dwordx4 .*\blds\b",
    "4-byte DMA to LDS (scales)": r"buffer_load_dword .*\blds\b",
    "LDS operand reads": r"ds_read_b128\b",
    "LDS scale reads": r"ds_read_(i8|u8|u16|i16|b32)\b",
    "LDS writes": r"ds_write\w*",
    "global stores": r"buffer_store\w*",
    "barriers": r"s_barrier\b",
    "vmcnt waits": r"s_waitcnt\s+vmcnt",
}


def render(key: str, formats: tuple, dump_dir: str) -> str:
    dump_isa_to(dump_dir)
    ck = compile_one(ScaledGemmConfig.from_key(key), formats, torch.bfloat16, bias=True)
    code = isa_code(dump_dir)
    mfma = Counter(re.sub(r"v\[?[\d:]+\]?", "v", ln) for ln in code if ln.startswith("v_mfma"))
    (k,) = ck.kernels
    return "\n".join([
        resources(k),
        *(f"{n} x {form}" for form, n in sorted(mfma.items())),
        *family_counts(code, FAMILIES),
    ])


def summary(key, formats, tmp_path):
    return summary_in_subprocess(__file__, "render", (key, formats), tmp_path)


def test_baseline_mxfp8(tmp_path):
    assert_expected_inline(summary("mx_m128n128k128_w2x2_s3_g0_c2", ("e4m3", "e4m3"), tmp_path), """\
flydsl_scaled_gemm_e4m3xe4m3_bf16_mx_m128n128k128_w2x2_s3_g0_c2_b1: vgpr=180 agpr=0 sgpr=48 lds=102400 spills=0 scratch=0
64 x v_mfma_scale_f32_16x16x128_f8f6f4 v, v, v, v, v, v op_sel_hi:[0,0,0]
scaled mfma: 64
16-byte DMA to LDS: 32
4-byte DMA to LDS (scales): 4
LDS operand reads: 72
LDS scale reads: 32
LDS writes: 64
global stores: 72
barriers: 6
vmcnt waits: 9""")


def test_decode_w4a8(tmp_path):
    assert_expected_inline(summary("mx_m32n16k512_w2x1_s3_g0_c2", ("e4m3", "e2m1"), tmp_path), """\
flydsl_scaled_gemm_e4m3xe2m1_bf16_mx_m32n16k512_w2x1_s3_g0_c2_b1: vgpr=134 agpr=0 sgpr=66 lds=64512 spills=0 scratch=0
4 x v_mfma_scale_f32_16x16x128_f8f6f4 v, v, v, v, v, v op_sel:[1,1,0] op_sel_hi:[0,0,0] blgp:4
4 x v_mfma_scale_f32_16x16x128_f8f6f4 v, v, v, v, v, v op_sel:[1,1,0] op_sel_hi:[1,1,0] blgp:4
4 x v_mfma_scale_f32_16x16x128_f8f6f4 v, v, v, v, v, v op_sel_hi:[0,0,0] blgp:4
4 x v_mfma_scale_f32_16x16x128_f8f6f4 v, v, v, v, v, v op_sel_hi:[1,1,0] blgp:4
scaled mfma: 16
16-byte DMA to LDS: 40
4-byte DMA to LDS (scales): 6
LDS operand reads: 49
LDS scale reads: 8
LDS writes: 4
global stores: 9
barriers: 6
vmcnt waits: 6""")
