"""The grouped GEMM kernel's main K loop, per curated config, from its gfx950 ISA (bf16, the MoE
forward with K-contiguous expert weights): recorded with expecttest so that a schedule change
shows up in review as a diff of per-tile MFMAs, DMAs (and how many sit between MFMAs), waits,
barriers, branches, SALU and resources; and issue 20's done-when criteria (the dense family's
issue-9 checks) checked for every config that runs a steady state on issue 20's MoE shapes.

Every curated config is compiled once per session, in one fresh process (FlyDSL writes the ISA
only when it lowers a kernel), by ``benchmarks/isa_report.py --family grouped``; counts are
defined in ``torch_flydsl/runtime/isa.py``. Recorded with flydsl 0.5.0 (other releases lower
differently: skipped there). Re-record with EXPECTTEST_ACCEPT=1.

Waves per SIMD: every config holds >= 2 (none needs a stated exception): 4-wave configs keep
LDS <= 80 KiB (two workgroups per CU; m64n64k64 three), the 8-wave ones run one workgroup per CU.
"""

import json
import sys

import pytest
from expecttest import assert_expected_inline

from rendered_kit import summary_in_subprocess
from test_dense_gemm_schedule import BENCHMARKS, pytestmark, with_barrier_guards  # noqa: F401 (the same tier and flydsl pin)


def render(dump_dir: str) -> str:
    """Run in the fresh process: every curated config's loop line, checks and steady-state flag."""
    sys.path.insert(0, str(BENCHMARKS))
    import isa_report

    return json.dumps(with_barrier_guards(json.loads(isa_report.curated_goldens(dump_dir, "grouped")), dump_dir))


@pytest.fixture(scope="module")
def curated(tmp_path_factory):
    return json.loads(summary_in_subprocess(__file__, "render", (), tmp_path_factory.mktemp("isa")))


def test_every_curated_config_is_reported_and_has_a_main_loop(curated):
    from torch_flydsl.templates.grouped_gemm.config import search_space

    assert [c["config"] for c in curated] == [cfg.key() for cfg in search_space("curated")]
    assert all("no main loop" not in c["line"] for c in curated)
    assert all(c["steady"] for c in curated)  # K=2048: every config runs >= 4 K tiles per tile


def test_main_loop_schedule_of_every_curated_config(curated):
    assert_expected_inline("\n".join(c["line"] for c in curated), """\
grp_m128n128k32_w2x2_s4_g0 nt: 2 tile(s)/iter; per tile mfma 16, dma 4 (4 between mfma), vmcnt [8,8], lgkmcnt x9, barrier 1, branches 0+1, salu 10; mfma-free run 24, loop 104 instrs; vgpr 120 agpr 0 sgpr 71 lds 65536 spills 0 scratch 0; 2 wg/CU, 2 waves/SIMD
grp_m16n64k128_w1x4_s3_g0 nt: 2 tile(s)/iter; per tile mfma 4, dma 5 (5 between mfma), vmcnt [5,5], lgkmcnt x8, barrier 1, branches 0+1, salu 20.5; mfma-free run 35, loop 117 instrs; vgpr 86 agpr 0 sgpr 75 lds 61440 spills 0 scratch 0; 2 wg/CU, 2 waves/SIMD
grp_m32n128k64_w1x4_s3_g0 nt: 2 tile(s)/iter; per tile mfma 8, dma 5 (5 between mfma), vmcnt [5,5], lgkmcnt x6, barrier 1, branches 0+1, salu 20.5; mfma-free run 39, loop 116 instrs; vgpr 80 agpr 0 sgpr 73 lds 61440 spills 0 scratch 0; 2 wg/CU, 2 waves/SIMD
grp_m64n64k64_w2x2_s3_g0 nt: 2 tile(s)/iter; per tile mfma 8, dma 4 (4 between mfma), vmcnt [4,4], lgkmcnt x6, barrier 1, branches 0+1, salu 17.5; mfma-free run 38, loop 106 instrs; vgpr 82 agpr 0 sgpr 73 lds 49152 spills 0 scratch 0; 3 wg/CU, 3 waves/SIMD
grp_m64n128k64_w2x2_s3_g0 nt: 1 tile(s)/iter; per tile mfma 16, dma 6 (6 between mfma), vmcnt [6], lgkmcnt x8, barrier 1, branches 0+1, salu 23; mfma-free run 38, loop 80 instrs; vgpr 110 agpr 0 sgpr 65 lds 73728 spills 0 scratch 0; 2 wg/CU, 2 waves/SIMD
grp_m128n64k64_w2x2_s3_g0 nt: 1 tile(s)/iter; per tile mfma 16, dma 6 (6 between mfma), vmcnt [6], lgkmcnt x2, barrier 1, branches 0+1, salu 23; mfma-free run 38, loop 75 instrs; vgpr 108 agpr 0 sgpr 70 lds 73728 spills 0 scratch 0; 2 wg/CU, 2 waves/SIMD
grp_m128n256k64_w2x4_s3_g0 nt: 1 tile(s)/iter; per tile mfma 32, dma 6 (6 between mfma), vmcnt [6], lgkmcnt x6, barrier 1, branches 0+1, salu 23; mfma-free run 44, loop 100 instrs; vgpr 156 agpr 0 sgpr 65 lds 147456 spills 0 scratch 0; 1 wg/CU, 2 waves/SIMD
grp_m256n128k64_w4x2_s3_g0 nt: 1 tile(s)/iter; per tile mfma 32, dma 6 (6 between mfma), vmcnt [6], lgkmcnt x8, barrier 1, branches 0+1, salu 24; mfma-free run 43, loop 102 instrs; vgpr 156 agpr 0 sgpr 65 lds 147456 spills 0 scratch 0; 1 wg/CU, 2 waves/SIMD
grp_m256n256k32_w2x4_s4_g0_rp nt: 2 tile(s)/iter; per tile mfma 32, dma 4 (4 between mfma), vmcnt [8,8], lgkmcnt x2, barrier 1, branches 0+1, salu 12.5; mfma-free run 6, loop 151 instrs; vgpr 238 agpr 0 sgpr 69 lds 135168 spills 0 scratch 0; 1 wg/CU, 2 waves/SIMD""")


def test_issue_20_done_when_every_steady_state_config_passes(curated):
    """For every curated config with >= 4 K tiles per output tile on issue 20's MoE shapes: no
    vmcnt(0) in the main loop, at least half its DMAs between MFMAs, no branch besides the back
    edge, and >= 2 waves per SIMD."""
    failing = {c["config"]: c["problems"] for c in curated if c["steady"] and c["problems"]}
    assert not failing, "\n".join(f"{k}: {'; '.join(v)}" for k, v in failing.items())


def test_prefetch_configs_free_an_lds_buffer_only_after_their_reads_of_it_retired(curated):
    """Every barrier of a register-prefetch loop follows this wave's ``lgkmcnt(0)`` (see
    test_dense_gemm_schedule's barrier_guards)."""
    rp = [c for c in curated if c["config"].endswith("_rp")]
    assert rp and all(c["barrier_guards"] and all(g == 0 for g in c["barrier_guards"]) for c in rp), rp
