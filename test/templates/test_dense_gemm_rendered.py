"""The rendered gfx950 kernel, summarized and checked with expecttest: a change to the kernel
(or to how FlyDSL lowers it) shows up as a diff of resources and instruction mix.

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
from torch_flydsl.templates.dense_gemm import BASELINE

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
    os.environ["FLYDSL_DUMP_IR"] = "1"
    os.environ["FLYDSL_DUMP_DIR"] = dump_dir
    ck = compile_one(BASELINE, layout, torch.bfloat16, bias=True)
    (isa_file,) = Path(dump_dir).glob("*/*final_isa.s")
    code = [ln.strip() for ln in isa_file.read_text().splitlines() if ln.startswith("\t") and not ln.strip().startswith(".")]
    mnemonics = Counter()
    for ln in code:
        for name, pat in FAMILIES.items():
            if re.match(pat, ln):
                mnemonics[name] += 1
    mfma_kinds = sorted({m for ln in code for m in re.findall(r"v_mfma_\w+", ln)})
    lds_reads = sorted({m for ln in code for m in re.findall(r"ds_read\w*", ln)})
    (k,) = ck.kernels
    lines = [
        f"{k.name}: vgpr={k.vgpr} agpr={k.agpr} sgpr={k.sgpr} lds={k.lds_bytes} spills={k.spills} scratch={k.scratch_bytes}",
        f"mfma kinds: {', '.join(mfma_kinds)}; LDS read kinds: {', '.join(lds_reads)}",
        *(f"{name}: {mnemonics[name]}" for name in FAMILIES),
    ]
    return "\n".join(lines)


MARK = "=== rendered kernel summary ==="


def summary(layout, tmp_path):
    # A fresh process: FlyDSL dumps the ISA only when it lowers, and a kernel another test
    # compiled in this process would come from its in-memory cache.
    code = f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); " \
           f"from test_dense_gemm_rendered import render, MARK; s = render({layout!r}, {str(tmp_path)!r}); print(MARK); print(s)"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    return r.stdout.split(MARK, 1)[1].strip()  # FlyDSL prints its dump paths before it


def test_baseline_nt(tmp_path):
    assert_expected_inline(summary("nt", tmp_path), """\
flydsl_dense_gemm_bf16_nt_m128n128k64_w2x2_s2_g0_b1: vgpr=112 agpr=0 sgpr=31 lds=65536 spills=0 scratch=0
mfma kinds: v_mfma_f32_16x16x32_bf16; LDS read kinds: ds_read_b128
mfma: 32
dma to LDS: 16
LDS reads: 24
LDS writes: 64
global stores: 72
barriers: 3
vmcnt waits: 6""")


def test_baseline_tn(tmp_path):
    assert_expected_inline(summary("tn", tmp_path), """\
flydsl_dense_gemm_bf16_tn_m128n128k64_w2x2_s2_g0_b1: vgpr=124 agpr=0 sgpr=31 lds=65536 spills=0 scratch=0
mfma kinds: v_mfma_f32_16x16x32_bf16; LDS read kinds: ds_read_b128, ds_read_b64_tr_b16
mfma: 32
dma to LDS: 16
LDS reads: 40
LDS writes: 64
global stores: 72
barriers: 3
vmcnt waits: 6""")
