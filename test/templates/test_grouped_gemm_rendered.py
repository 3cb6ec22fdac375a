"""The rendered gfx950 grouped GEMM kernel, summarized and checked with expecttest: a change to
the kernel (or to how FlyDSL lowers it) shows as a diff of resources and instruction mix.

Goldens recorded with flydsl 0.5.0 (what CI installs); skipped on other releases. Re-record with
EXPECTTEST_ACCEPT=1.
"""

import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from expecttest import assert_expected_inline

from torch_flydsl.runtime.probe import flydsl_info
from torch_flydsl.templates.grouped_gemm import GroupedGemmConfig

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
    os.environ["FLYDSL_DUMP_IR"] = "1"
    os.environ["FLYDSL_DUMP_DIR"] = dump_dir
    ck = compile_one(GroupedGemmConfig.from_key(key), b_major)
    (isa_file,) = Path(dump_dir).glob("*/*final_isa.s")
    code = [ln.strip() for ln in isa_file.read_text().splitlines() if ln.startswith("\t") and not ln.strip().startswith(".")]
    counts = Counter(name for ln in code for name, pat in FAMILIES.items() if re.match(pat, ln))
    (k,) = ck.kernels
    return "\n".join([
        f"{k.name}: vgpr={k.vgpr} agpr={k.agpr} sgpr={k.sgpr} lds={k.lds_bytes} spills={k.spills} scratch={k.scratch_bytes}",
        *(f"{name}: {counts[name]}" for name in FAMILIES),
    ])


MARK = "=== rendered kernel summary ==="


def summary(key, b_major, tmp_path):
    # A fresh process: FlyDSL dumps the ISA only when it lowers (not from its in-memory cache).
    code = (f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); "
            f"from test_grouped_gemm_rendered import render, MARK; s = render({key!r}, {b_major!r}, {str(tmp_path)!r}); "
            "print(MARK); print(s)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    return r.stdout.split(MARK, 1)[1].strip()


def test_moe_decode_tile_column_major_experts(tmp_path):
    assert_expected_inline(summary("grp_m32n128k64_w1x4_s3_g0", "col", tmp_path), """\
flydsl_grouped_gemm_ragged_bf16_nt_grp_m32n128k64_w1x4_s3_g0: vgpr=56 agpr=0 sgpr=58 lds=61440 spills=0 scratch=0
mfma: 8
16-byte DMA to LDS: 15
offset loads: 7
LDS reads: 10
LDS writes: 16
global stores: 18
barriers: 4
vmcnt waits: 5
branches: 33""")
