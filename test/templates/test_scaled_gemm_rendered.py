"""The rendered gfx950 MX scaled GEMM kernel, summarized and checked with expecttest: a change
to the kernel (or to how FlyDSL lowers it) shows up as a diff of resources and instruction mix.

The goldens were recorded with flydsl 0.5.0 (what CI installs); other releases lower
differently, so the test is skipped there. Re-record with EXPECTTEST_ACCEPT=1.
"""

import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import torch
from expecttest import assert_expected_inline

from torch_flydsl.runtime.probe import flydsl_info
from torch_flydsl.templates.scaled_gemm import ScaledGemmConfig

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
    os.environ["FLYDSL_DUMP_IR"] = "1"
    os.environ["FLYDSL_DUMP_DIR"] = dump_dir
    ck = compile_one(ScaledGemmConfig.from_key(key), formats, torch.bfloat16, bias=True)
    (isa_file,) = Path(dump_dir).glob("*/*final_isa.s")
    code = [ln.strip() for ln in isa_file.read_text().splitlines() if ln.startswith("\t") and not ln.strip().startswith(".")]
    counts = Counter(name for ln in code for name, pat in FAMILIES.items() if re.match(pat, ln))
    mfma = Counter(re.sub(r"v\[?[\d:]+\]?", "v", ln) for ln in code if ln.startswith("v_mfma"))
    (k,) = ck.kernels
    return "\n".join([
        f"{k.name}: vgpr={k.vgpr} agpr={k.agpr} sgpr={k.sgpr} lds={k.lds_bytes} spills={k.spills} scratch={k.scratch_bytes}",
        *(f"{n} x {form}" for form, n in sorted(mfma.items())),
        *(f"{name}: {counts[name]}" for name in FAMILIES),
    ])


MARK = "=== rendered kernel summary ==="


def summary(key, formats, tmp_path):
    # A fresh process: FlyDSL dumps the ISA only when it lowers, and a kernel another test
    # compiled in this process would come from its in-memory cache.
    code = (f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); "
            f"from test_scaled_gemm_rendered import render, MARK; s = render({key!r}, {formats!r}, {str(tmp_path)!r}); "
            "print(MARK); print(s)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    return r.stdout.split(MARK, 1)[1].strip()  # FlyDSL prints its dump paths before it


def test_baseline_mxfp8(tmp_path):
    assert_expected_inline(summary("mx_m128n128k128_w2x2_s2_g0", ("e4m3", "e4m3"), tmp_path), """\
flydsl_scaled_gemm_e4m3xe4m3_bf16_mx_m128n128k128_w2x2_s2_g0_b1: vgpr=160 agpr=0 sgpr=37 lds=69632 spills=0 scratch=0
16 x v_mfma_scale_f32_16x16x128_f8f6f4 v, v, v, v, v, v op_sel_hi:[0,0,0]
scaled mfma: 16
16-byte DMA to LDS: 16
4-byte DMA to LDS (scales): 4
LDS operand reads: 24
LDS scale reads: 8
LDS writes: 64
global stores: 72
barriers: 3
vmcnt waits: 6""")


def test_decode_w4a8(tmp_path):
    assert_expected_inline(summary("mx_m32n16k512_w2x1_s3_g0", ("e4m3", "e2m1"), tmp_path), """\
flydsl_scaled_gemm_e4m3xe2m1_bf16_mx_m32n16k512_w2x1_s3_g0_b1: vgpr=58 agpr=0 sgpr=37 lds=64512 spills=0 scratch=0
1 x v_mfma_scale_f32_16x16x128_f8f6f4 v, v, v, v, v, v op_sel:[1,1,0] op_sel_hi:[0,0,0] blgp:4
1 x v_mfma_scale_f32_16x16x128_f8f6f4 v, v, v, v, v, v op_sel:[1,1,0] op_sel_hi:[1,1,0] blgp:4
1 x v_mfma_scale_f32_16x16x128_f8f6f4 v, v, v, v, v, v op_sel_hi:[0,0,0] blgp:4
1 x v_mfma_scale_f32_16x16x128_f8f6f4 v, v, v, v, v, v op_sel_hi:[1,1,0] blgp:4
scaled mfma: 4
16-byte DMA to LDS: 30
4-byte DMA to LDS (scales): 6
LDS operand reads: 13
LDS scale reads: 2
LDS writes: 4
global stores: 9
barriers: 3
vmcnt waits: 4""")
