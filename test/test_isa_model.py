"""benchmarks/isa_model.py's pure functions: the sim on loops whose schedule is derived by hand in
each test, the static bound, the kernel-time arithmetic, and the direction each knob (LDS
bandwidth, memory latency, wave groups) moves the time. No compile, no torch kernels."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import isa_model as M  # noqa: E402

from torch_flydsl.runtime import isa  # noqa: E402

BF16 = ("m", "v_mfma_f32_16x16x32_bf16")
C = M.Constants()


def test_an_mfma_only_loop_runs_at_the_pipe_rate():
    """One wave: each MFMA starts when the pipe frees (16 clk apart), the wave moves on 4 clk after
    each start, the scalar op costs 1: MFMA 4 starts at 48 and frees the pipe at 64, where the next
    iteration's first MFMA starts. 64 cycles per iteration, 2 K tiles per iteration -> 32."""
    ops = [BF16] * 4 + [("s",)]
    assert M.simulate(ops, waves=1, resident=1, c=C, tiles_per_iter=2) == pytest.approx(32.0)


def test_a_dma_drained_every_iteration_exposes_its_latency():
    """DMA (1024 B: 16 clk on the 64 B/clk fill port) -> vmcnt(0) -> MFMA: each iteration waits
    16 + 1000 cycles for its DMA, then 1 for the wait and 4 for the MFMA issue before the next
    DMA goes out (the DMA's own 4 issue cycles overlap the fill): 1021 per iteration."""
    ops = [("d", 1024), ("w", 0, -1), BF16]
    assert M.simulate(ops, 1, 1, C) == pytest.approx(16 + 1000 + 1 + 4)
    assert M.simulate(ops, 1, 1, M.corner(C, 128, 1.6)) == pytest.approx(16 + 1600 + 1 + 4)
    assert M.simulate(ops, 1, 1, M.corner(C, 128, 0.6)) == pytest.approx(16 + 600 + 1 + 4)


def test_lds_bandwidth_sets_the_time_of_an_lds_bound_loop():
    """Four 1 KiB LDS reads issued 4 clk apart, lgkmcnt(0), an MFMA: at 128 B/clk the port serves
    them back to back (8 clk each: the last at 32), +64 latency, +1 wait, +4 MFMA issue = 101;
    at 256 B/clk the last is served at 16 (its issue at 12 + 4): 85."""
    ops = [("l", 1024)] * 4 + [("w", -1, 0), BF16]
    assert M.simulate(ops, 1, 1, M.corner(C, 128, 1.0)) == pytest.approx(101)
    assert M.simulate(ops, 1, 1, M.corner(C, 256, 1.0)) == pytest.approx(85)


def test_more_lds_bandwidth_and_less_latency_never_slow_a_loop_down():
    ops = [("d", 1024), ("d", 1024), ("l", 1024), ("l", 1024), ("w", 2, 0), BF16, BF16, ("b",),
           ("l", 1024), ("w", -1, 0), BF16, BF16, ("b",)]
    t = {(lds, lat): M.simulate(ops, 4, 2, M.corner(C, lds, lat), 1.0) for lds in (128, 256) for lat in (0.6, 1.6)}
    assert t[(256, 0.6)] <= t[(128, 0.6)] and t[(256, 1.6)] <= t[(128, 1.6)]
    assert t[(128, 0.6)] < t[(128, 1.6)] and t[(256, 0.6)] < t[(256, 1.6)]


def test_a_barrier_releases_every_wave_after_the_last_arrives():
    """Two waves on two SIMDs: MFMA (issue 4) then barrier (1): both arrive at 5 and are released
    16 later: 21 per iteration. Three waves on two SIMDs (waves 0 and 2 share SIMD 0): wave 2's
    MFMA starts when wave 0's frees the pipe (16) and it arrives at 21, so all are released at
    37; the next iteration repeats from there: 37 per iteration."""
    assert M.simulate([BF16, ("b",)], 2, 1, C) == pytest.approx(21)
    period = M.simulate([BF16, ("b",)], 3, 1, M.Constants(simds=2))
    assert period == pytest.approx(37)


def test_two_wave_groups_out_of_phase_overlap_lds_and_mfma_phases():
    """A loop of two barrier-separated phases, LDS reads then MFMAs, on one SIMD: in phase both
    waves read, then both compute (the MFMA pipe idles through the reads); a barrier apart, one
    wave computes while the other reads, so the period is shorter."""
    ops = [("l", 1024), ("l", 1024), ("w", -1, 0), ("b",)] + [BF16] * 8 + [("b",)]
    one = M.Constants(simds=1)
    in_phase = M.simulate(ops, 2, 1, one)
    offset = M.simulate(ops, 2, 1, one, wave_groups=True)
    assert offset < in_phase
    assert offset >= 2 * 8 * 16  # never below the MFMA pipe's own time


def test_static_period_is_the_slowest_of_mfma_lds_and_fill():
    costs = M.TileCosts(mfma_cycles=256, lds_bytes=4096, fill_bytes=2048)
    # 8 waves on 4 SIMDs: 2 x 256 = 512; LDS 8 x 4096 / 128 = 256; fill 8 x 2048 / 64 = 256
    assert M.static_period(costs, 8, 1, C) == 512
    # 2 workgroups: MFMA 1024, LDS 512, fill 512; at 32 B/clk fill: 16 x 2048 / 32 = 1024
    assert M.static_period(costs, 8, 2, C) == 1024
    assert M.static_period(M.TileCosts(256, 16384, 0), 8, 1, C) == 1024  # LDS-bound at 128 B/clk
    assert M.static_period(M.TileCosts(256, 16384, 0), 8, 1, M.corner(C, 256, 1.0)) == 512


def test_tile_costs_count_dma_bytes_in_lds_and_fill():
    ops = [BF16, ("m", "v_mfma_scale_f32_16x16x128_f8f6f4 fp4xfp4"), ("d", 1024), ("l", 512), ("w", 0, 0)]
    tc = M.tile_costs(ops, 2.0, C)
    assert (tc.mfma_cycles, tc.lds_bytes, tc.fill_bytes) == ((16 + 16) / 2, (1024 + 512) / 2, 1024 / 2)


def test_kernel_time_rounds_tail_overhead_hbm_handoff_and_launches():
    c = M.Constants()
    w = M.Work(grid=2 * c.cus + 1, tiles=1, k_tiles=10, hbm_bytes=0)
    # r_max 2: the busiest CU holds 3 workgroups: one round of 2 (P(2)=200) and one of 1 (P(1)=100)
    t = M.kernel_time(w, 2, lambda r: 100.0 * r, c)
    assert t == pytest.approx((10 * 200 + 10 * 100) / 2400)
    assert M.kernel_time(w, 2, lambda r: 100.0 * r, c, overhead_cycles=50) == pytest.approx((2050 + 1050) / 2400)
    hbm = M.Work(1, 1, 1, hbm_bytes=8e6)  # 8 MB at 8 TB/s = 1 us, above 100 cycles
    assert M.kernel_time(hbm, 1, lambda r: 100.0, c) == pytest.approx(1.0)
    extra = M.Work(1, 1, 1, 0, launches=2, split_handoff=True)
    assert M.kernel_time(extra, 1, lambda r: 0.0, c) == pytest.approx(c.launch_gap_us + 2 * c.round_trip_us)
    assert M.kernel_time(extra, 1, lambda r: 0.0, M.corner(c, 128, 1.6)) == pytest.approx(
        c.launch_gap_us + 2 * c.round_trip_us * 1.6)


@pytest.mark.parametrize("kind, cycles", [
    ("v_mfma_f32_16x16x32_bf16", 16), ("v_mfma_f32_32x32x16_bf16", 32),
    ("v_mfma_scale_f32_16x16x128_f8f6f4 fp8xfp8", 32), ("v_mfma_scale_f32_16x16x128_f8f6f4 fp8xfp4", 32),
    ("v_mfma_scale_f32_16x16x128_f8f6f4 fp4xfp4", 16), ("v_mfma_scale_f32_32x32x64_f8f6f4 fp4xfp4", 32),
    ("v_mfma_scale_f32_16x16x128_f8f6f4 fp6xfp4", 16),
])
def test_mfma_cycles_per_kind(kind, cycles):
    assert M.mfma_cycles(kind, C) == cycles


def test_program_classifies_each_instruction():
    ins = [isa.Instruction(1, t) for t in (
        "v_mfma_f32_16x16x32_bf16 v[0:3], v[4:7], v[8:11], v[0:3]",
        "buffer_load_dwordx4 v20, s[4:7], 0 offen lds", "buffer_load_dword v2, s[4:7], 0 offen lds",
        "ds_read_b128 v[20:23], v1", "ds_read2_b64 v[20:23], v1 offset1:8", "s_waitcnt vmcnt(4) lgkmcnt(0)",
        "s_waitcnt lgkmcnt(2)", "s_barrier", "s_add_i32 s2, s2, 1", "v_add_u32 v1, v2, v3", "s_load_dword s4, s[0:1], 0x0")]
    assert M.program(ins) == [BF16, ("d", 1024), ("d", 256), ("l", 1024), ("l", 1024), ("w", 4, 0), ("w", -1, 2),
                              ("b",), ("s",), ("v",), ("k",)]


def test_constants_are_overridable_by_name_and_unknown_names_are_refused():
    c = M.Constants().with_overrides(["lds_bytes_per_clk=256", "cus=128", "mfma_scaled_fp8=16"])
    assert (c.lds_bytes_per_clk, c.cus, c.mfma_scaled_fp8) == (256.0, 128, 16.0) and isinstance(c.cus, int)
    with pytest.raises(ValueError, match="constants are"):
        M.Constants().with_overrides(["lds_bw=256"])
    assert "lds_bytes_per_clk=256" in c.describe() and "dma_latency=1000" in c.describe()


def test_geomean_ignores_missing_ratios():
    assert M.geomean([2.0, 0.5, float("nan")]) == pytest.approx(1.0)


def test_each_wave_group_runs_its_own_loop_a_barrier_apart():
    """The ping-pong kernel: the second half of the waves runs its own loop (``lagging_ops``),
    one barrier behind the first half. Given the first half's loop it is the wave-group mode;
    given a loop that drains a DMA every iteration, only that half waits (and the barriers make
    the first half wait with it): slower, by at most the drained latency per iteration."""
    ops = [("l", 1024), ("l", 1024), ("w", -1, 0), ("b",)] + [BF16] * 8 + [("b",)]
    drained = [("d", 1024), ("w", 0, -1)] + ops
    one = M.Constants(simds=1)
    offset = M.simulate(ops, 2, 1, one, wave_groups=True)
    assert M.simulate(ops, 2, 1, one, lagging_ops=ops) == pytest.approx(offset)
    slow = M.simulate(ops, 2, 1, one, lagging_ops=drained)
    assert offset < slow <= offset + one.dma_latency + 1024 / one.fill_bytes_per_clk + 2 * one.vector_issue
