"""The dense GEMM kernel's main K loop, per curated config, from its gfx950 ISA (bf16, NT):
recorded with expecttest so that a schedule change shows up in review as a diff of per-tile
MFMAs, DMAs (and how many sit between MFMAs), waits, barriers, branches, SALU and resources;
and issue 9's done-when criteria checked for every config that runs a steady state.

Every curated config is compiled once per session, in one fresh process (FlyDSL writes the ISA
only when it lowers a kernel), by ``benchmarks/isa_report.py``; counts are defined in
``torch_flydsl/runtime/isa.py``. Recorded with flydsl 0.5.0 (other releases lower differently:
skipped there). Re-record with EXPECTTEST_ACCEPT=1.
"""

import json
import sys
from pathlib import Path

import pytest
from expecttest import assert_expected_inline

from torch_flydsl.runtime.probe import flydsl_info

from rendered_kit import summary_in_subprocess

pytestmark = [
    pytest.mark.compile,
    pytest.mark.skipif(flydsl_info().version != "0.5.0", reason="goldens recorded with flydsl 0.5.0"),
]

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def render(dump_dir: str) -> str:
    """Run in the fresh process: every curated config's loop line, checks and steady-state flag."""
    import torch

    sys.path.insert(0, str(BENCHMARKS))
    import isa_report

    from torch_flydsl.templates.dense_gemm.config import one_wave_per_simd_reason, search_space

    reports = isa_report.collect(search_space("curated"), ("nt",), torch.bfloat16, Path(dump_dir))
    return json.dumps(with_barrier_guards([{"config": r.key, "line": isa_report.golden_line(r),
                                            "problems": isa_report.done_when_problems(r),
                                            "waves_per_simd": r.waves_per_simd,
                                            "one_wave_reason": one_wave_per_simd_reason(r.cfg),
                                            "steady": isa_report.runs_steady_state(r.cfg)} for r in reports],
                                          dump_dir))


def barrier_guards(isa_lines: list) -> list:
    """Per ``s_barrier`` of the main loop: the ``lgkmcnt`` this wave last waited for since its
    last LDS read (None: no wait). The prefetch loop's barriers free the LDS buffer a wave has
    just read into registers, so each must follow ``lgkmcnt(0)``: the emulator completes LDS
    reads at once (its README) and cannot check this; the ISA can."""
    from torch_flydsl.runtime import isa

    loop = isa.main_loop(isa_lines)
    guards: list = []
    last = None
    for n, ins in enumerate(loop.instructions * 2):  # twice: a barrier's wait may precede the header
        if ins.op.startswith(("ds_read", "ds_load")):
            last = None
        elif ins.op == "s_waitcnt" and "lgkmcnt" in isa.wait_fields(ins):
            last = isa.wait_fields(ins)["lgkmcnt"]
        elif ins.op == "s_barrier" and n >= len(loop.instructions):
            guards.append(last)
    return guards


def with_barrier_guards(entries: list, dump_dir) -> list:
    """``entries`` (one per config) with ``barrier_guards`` for the prefetch (``_rp``) configs,
    read from the ISA that ``isa_report.collect`` left under ``dump_dir``."""
    for e in entries:
        if e["config"].endswith("_rp"):
            (isa_file,) = Path(dump_dir).glob(f"nt_{e['config']}/**/*final_isa.s")
            e["barrier_guards"] = barrier_guards(isa_file.read_text().splitlines())
    return entries


@pytest.fixture(scope="module")
def curated(tmp_path_factory):
    return json.loads(summary_in_subprocess(__file__, "render", (), tmp_path_factory.mktemp("isa")))


def test_every_curated_config_is_reported_and_has_a_main_loop(curated):
    from torch_flydsl.templates.dense_gemm.config import search_space

    assert [c["config"] for c in curated] == [cfg.key() for cfg in search_space("curated")]
    assert all("no main loop" not in c["line"] for c in curated)
    assert any(c["steady"] for c in curated)


def test_main_loop_schedule_of_every_curated_config(curated):
    assert_expected_inline("\n".join(c["line"] for c in curated), """\
m128n128k32_w2x2_s4_g0 nt: 2 tile(s)/iter; per tile mfma 16, dma 4 (4 between mfma), vmcnt [8,8], lgkmcnt x9, barrier 1, branches 0+1, salu 10; mfma-free run 24, loop 104 instrs; vgpr 118 agpr 0 sgpr 34 lds 65536 spills 0 scratch 0; 2 wg/CU, 2 waves/SIMD
m16n64k128_w1x4_s3_g0 nt: 2 tile(s)/iter; per tile mfma 4, dma 5 (5 between mfma), vmcnt [5,5], lgkmcnt x8, barrier 1, branches 0+1, salu 20.5; mfma-free run 35, loop 117 instrs; vgpr 84 agpr 0 sgpr 36 lds 61440 spills 0 scratch 0; 2 wg/CU, 2 waves/SIMD
m16n64k128_w1x4_s3_g0_sk4 nt: 2 tile(s)/iter; per tile mfma 4, dma 5 (5 between mfma), vmcnt [5,5], lgkmcnt x8, barrier 1, branches 0+1, salu 22.5; mfma-free run 44, loop 121 instrs; vgpr 84 agpr 0 sgpr 41 lds 61440 spills 0 scratch 0; 2 wg/CU, 2 waves/SIMD
m16n64k128_w1x4_s3_g0_sk8 nt: 2 tile(s)/iter; per tile mfma 4, dma 5 (5 between mfma), vmcnt [5,5], lgkmcnt x8, barrier 1, branches 0+1, salu 22.5; mfma-free run 44, loop 121 instrs; vgpr 84 agpr 0 sgpr 41 lds 61440 spills 0 scratch 0; 2 wg/CU, 2 waves/SIMD
m32n64k128_w2x2_s3_g0 nt: 1 tile(s)/iter; per tile mfma 8, dma 6 (6 between mfma), vmcnt [6], lgkmcnt x8, barrier 1, branches 0+1, salu 23; mfma-free run 40, loop 76 instrs; vgpr 88 agpr 0 sgpr 32 lds 73728 spills 0 scratch 0; 2 wg/CU, 2 waves/SIMD
m32n64k128_w2x2_s3_g0_sk4 nt: 1 tile(s)/iter; per tile mfma 8, dma 6 (6 between mfma), vmcnt [6], lgkmcnt x8, barrier 1, branches 0+1, salu 25; mfma-free run 42, loop 78 instrs; vgpr 88 agpr 0 sgpr 50 lds 73728 spills 0 scratch 0; 2 wg/CU, 2 waves/SIMD
m32n128k64_w1x4_s3_g0 nt: 2 tile(s)/iter; per tile mfma 8, dma 5 (5 between mfma), vmcnt [5,5], lgkmcnt x8, barrier 1, branches 0+1, salu 20.5; mfma-free run 39, loop 117 instrs; vgpr 80 agpr 0 sgpr 36 lds 61440 spills 0 scratch 0; 2 wg/CU, 2 waves/SIMD
m64n64k64_w2x2_s4_g0 nt: 2 tile(s)/iter; per tile mfma 8, dma 4 (4 between mfma), vmcnt [8,8], lgkmcnt x7, barrier 1, branches 0+1, salu 9.5; mfma-free run 26, loop 85 instrs; vgpr 76 agpr 0 sgpr 38 lds 65536 spills 0 scratch 0; 2 wg/CU, 2 waves/SIMD
m64n128k64_w2x2_s3_g0 nt: 1 tile(s)/iter; per tile mfma 16, dma 6 (6 between mfma), vmcnt [6], lgkmcnt x8, barrier 1, branches 0+1, salu 23; mfma-free run 38, loop 80 instrs; vgpr 108 agpr 0 sgpr 32 lds 73728 spills 0 scratch 0; 2 wg/CU, 2 waves/SIMD
m128n64k64_w2x2_s3_g0 nt: 1 tile(s)/iter; per tile mfma 16, dma 6 (6 between mfma), vmcnt [6], lgkmcnt x2, barrier 1, branches 0+1, salu 23; mfma-free run 38, loop 75 instrs; vgpr 110 agpr 0 sgpr 36 lds 73728 spills 0 scratch 0; 2 wg/CU, 2 waves/SIMD
m128n128k32_w2x2_s4_g8 nt: 2 tile(s)/iter; per tile mfma 16, dma 4 (4 between mfma), vmcnt [8,8], lgkmcnt x9, barrier 1, branches 0+1, salu 10; mfma-free run 24, loop 104 instrs; vgpr 118 agpr 0 sgpr 34 lds 65536 spills 0 scratch 0; 2 wg/CU, 2 waves/SIMD
m128n256k64_w2x4_s3_g8 nt: 1 tile(s)/iter; per tile mfma 32, dma 6 (6 between mfma), vmcnt [6], lgkmcnt x6, barrier 1, branches 0+1, salu 23; mfma-free run 44, loop 100 instrs; vgpr 154 agpr 0 sgpr 31 lds 147456 spills 0 scratch 0; 1 wg/CU, 2 waves/SIMD
m256n128k64_w4x2_s3_g8 nt: 1 tile(s)/iter; per tile mfma 32, dma 6 (6 between mfma), vmcnt [6], lgkmcnt x8, barrier 1, branches 0+1, salu 24; mfma-free run 43, loop 102 instrs; vgpr 154 agpr 0 sgpr 31 lds 147456 spills 0 scratch 0; 1 wg/CU, 2 waves/SIMD
m256n256k32_w2x4_s4_g8 nt: 1 tile(s)/iter; per tile mfma 32, dma 4 (4 between mfma), vmcnt [8], lgkmcnt x5, barrier 1, branches 0+1, salu 12; mfma-free run 24, loop 74 instrs; vgpr 190 agpr 0 sgpr 32 lds 135168 spills 0 scratch 0; 1 wg/CU, 2 waves/SIMD
m256n256k32_w2x4_s4_g8_rp nt: 2 tile(s)/iter; per tile mfma 32, dma 4 (4 between mfma), vmcnt [8,8], lgkmcnt x2, barrier 1, branches 0+1, salu 13; mfma-free run 6, loop 152 instrs; vgpr 238 agpr 0 sgpr 36 lds 135168 spills 0 scratch 0; 1 wg/CU, 2 waves/SIMD
m16n16k128_w1x1_s8_g0 nt: 2 tile(s)/iter; per tile mfma 4, dma 8 (8 between mfma), vmcnt [48,48], lgkmcnt x8, barrier 0, branches 0+1, salu 13.5; mfma-free run 27, loop 105 instrs; vgpr 78 agpr 0 sgpr 43 lds 65536 spills 0 scratch 0; 2 wg/CU, 0 waves/SIMD
m32n32k128_w2x1_s8_g0 nt: 1 tile(s)/iter; per tile mfma 8, dma 8 (8 between mfma), vmcnt [48], lgkmcnt x8, barrier 1, branches 0+1, salu 17; mfma-free run 34, loop 75 instrs; vgpr 92 agpr 0 sgpr 42 lds 131072 spills 0 scratch 0; 1 wg/CU, 0 waves/SIMD
m32n64k128_w2x2_s6_g0 nt: 1 tile(s)/iter; per tile mfma 8, dma 6 (6 between mfma), vmcnt [24], lgkmcnt x8, barrier 1, branches 0+1, salu 23; mfma-free run 40, loop 76 instrs; vgpr 88 agpr 0 sgpr 38 lds 147456 spills 0 scratch 0; 1 wg/CU, 1 waves/SIMD
m64n64k64_w2x2_s8_g0 nt: 2 tile(s)/iter; per tile mfma 8, dma 4 (4 between mfma), vmcnt [24,24], lgkmcnt x7, barrier 1, branches 0+1, salu 9.5; mfma-free run 33, loop 93 instrs; vgpr 82 agpr 0 sgpr 47 lds 131072 spills 0 scratch 0; 1 wg/CU, 1 waves/SIMD
m64n128k64_w2x2_s6_g0 nt: 1 tile(s)/iter; per tile mfma 16, dma 6 (6 between mfma), vmcnt [24], lgkmcnt x8, barrier 1, branches 0+1, salu 23; mfma-free run 38, loop 80 instrs; vgpr 108 agpr 0 sgpr 38 lds 147456 spills 0 scratch 0; 1 wg/CU, 1 waves/SIMD""")


def test_issue_9_done_when_every_steady_state_config_passes(curated):
    """For every curated config offered where its workgroups run >= 4 K tiles: no vmcnt(0) in the
    main loop, at least half its DMAs between MFMAs, no branch besides the back edge, and >= 2
    waves per SIMD unless the config states why not (the deep configs: the golden below)."""

    def problems(c):
        return [p for p in c["problems"] if not (c["one_wave_reason"] and p.endswith("wave(s) per SIMD"))]

    failing = {c["config"]: problems(c) for c in curated if c["steady"] and problems(c)}
    assert not failing, "\n".join(f"{k}: {'; '.join(v)}" for k, v in failing.items())


def test_configs_below_two_waves_per_simd_and_why(curated):
    assert_expected_inline("\n".join(f"{c['config']} ({c['waves_per_simd']} waves/SIMD): {c['one_wave_reason']}"
                                      for c in curated if c["waves_per_simd"] < 2), """\
m16n16k128_w1x1_s8_g0 (0 waves/SIMD): deep tile, offered only where the whole grid is resident at once (2 workgroup(s) per CU at most): 7 tiles of 8 KiB in flight per workgroup. With so few workgroups the bytes in flight per CU, not the waves, set the pace; more waves per SIMD would need workgroups the grid does not have
m32n32k128_w2x1_s8_g0 (0 waves/SIMD): deep tile, offered only where the whole grid is resident at once (1 workgroup(s) per CU at most): 7 tiles of 16 KiB in flight per workgroup. With so few workgroups the bytes in flight per CU, not the waves, set the pace; more waves per SIMD would need workgroups the grid does not have
m32n64k128_w2x2_s6_g0 (1 waves/SIMD): deep tile, offered only where the whole grid is resident at once (1 workgroup(s) per CU at most): 5 tiles of 24 KiB in flight per workgroup. With so few workgroups the bytes in flight per CU, not the waves, set the pace; more waves per SIMD would need workgroups the grid does not have
m64n64k64_w2x2_s8_g0 (1 waves/SIMD): deep tile, offered only where the whole grid is resident at once (1 workgroup(s) per CU at most): 7 tiles of 16 KiB in flight per workgroup. With so few workgroups the bytes in flight per CU, not the waves, set the pace; more waves per SIMD would need workgroups the grid does not have
m64n128k64_w2x2_s6_g0 (1 waves/SIMD): deep tile, offered only where the whole grid is resident at once (1 workgroup(s) per CU at most): 5 tiles of 24 KiB in flight per workgroup. With so few workgroups the bytes in flight per CU, not the waves, set the pace; more waves per SIMD would need workgroups the grid does not have""")


def test_prefetch_configs_wait_for_lds_reads_only_at_their_barriers(curated):
    """The register-prefetch loop (gemm.prefetch_loop): its one lgkmcnt wait per K tile is the
    one before the barrier (its own reads of the tile it multiplies next, issued a tile
    earlier); no MFMA waits for LDS reads behind the barrier, none drains vmcnt(0)."""
    import re

    lines = [c["line"] for c in curated if c["config"].endswith("_rp")]
    assert lines
    for line in lines:
        tiles = int(re.search(r"(\d+) tile\(s\)/iter", line).group(1))
        lgkm = int(re.search(r"lgkmcnt x(\d+)", line).group(1))
        barriers = float(re.search(r"barrier ([\d.]+)", line).group(1))
        vmcnt = [int(v) for v in re.search(r"vmcnt \[([\d,]+)\]", line).group(1).split(",")]
        assert lgkm == tiles * barriers and 0 not in vmcnt, line
    for c in curated:
        if c["config"].endswith("_rp"):
            assert c["barrier_guards"] and all(g == 0 for g in c["barrier_guards"]), (c["config"], c["barrier_guards"])
