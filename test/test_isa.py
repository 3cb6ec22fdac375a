"""torch_flydsl.runtime.isa on hand-written gfx950 listings: loop finding, DMA placement,
wait values, branch/SALU counts and per-tile normalisation (no compile needed)."""

import pytest

from torch_flydsl.runtime import isa

MFMA = "\tv_mfma_f32_16x16x32_bf16 v[0:3], v[4:7], v[8:11], v[0:3]"
DMA = "\tbuffer_load_dwordx4 v20, s[4:7], 0 offen lds"


def listing(*lines: str) -> list[str]:
    head = ["\t.text", "\t.globl k", "k:", "\ts_load_dwordx2 s[4:5], s[0:1], 0x0", "\ts_mov_b32 s2, 0"]
    tail = ["\ts_endpgm", ".Lfunc_end0:", "\t.size k, .Lfunc_end0-k", "---", "amdhsa.kernels:", "  - .name: k"]
    return head + list(lines) + tail


INTERLEAVED = listing(
    ".LBB0_1:                                ; =>This Inner Loop Header: Depth=1",
    MFMA, DMA, MFMA, DMA, MFMA, DMA, MFMA,
    DMA,
    "\ts_waitcnt vmcnt(3) lgkmcnt(1)",
    "\ts_barrier",
    "\ts_add_i32 s2, s2, 1",
    "\ts_cmp_lt_i32 s2, s3",
    "\ts_cbranch_scc1 .LBB0_1",
)

BURST = listing(
    ".LBB0_1:",
    "\ts_waitcnt vmcnt(0)",
    "\ts_barrier",
    DMA, DMA, DMA, DMA,
    "\ts_waitcnt lgkmcnt(0)",
    MFMA, MFMA, MFMA, MFMA,
    "\ts_add_i32 s2, s2, 1",
    "\ts_cmp_lt_i32 s2, s3",
    "\ts_cbranch_scc1 .LBB0_1",
)


def test_interleaved_dmas_sit_between_mfmas_except_the_one_after_the_last():
    m = isa.loop_metrics(INTERLEAVED)
    assert (m.header, m.mfma, m.dma, m.dma_between) == (".LBB0_1", 4, 4, 3)
    assert m.vmcnt == (3,) and m.lgkmcnt == (1,) and m.waits == ("vmcnt(3) lgkmcnt(1)",)
    assert not m.drains_vmcnt
    assert (m.barriers, m.branches, m.extra_branches, m.salu) == (1, 1, 0, 2)
    # after the last MFMA: dma, waitcnt, barrier, add, cmp, branch -> wraps to the first MFMA
    assert m.longest_mfma_free == 6
    assert m.instructions == 13


def test_a_dma_burst_before_the_mfmas_counts_none_between_and_vmcnt0_is_flagged():
    m = isa.loop_metrics(BURST)
    assert (m.mfma, m.dma, m.dma_between) == (4, 4, 0)
    assert m.vmcnt == (0,) and m.drains_vmcnt
    assert m.lgkmcnt == (0,)
    assert m.longest_mfma_free == 3 + 7  # add, cmp, branch | waitcnt, barrier, 4 dma, waitcnt
    assert "vmcnt [0]" in m.summary() and "(0 between mfma)" in m.summary()


def test_a_loop_entered_in_the_middle_with_side_blocks_like_todays_kernel():
    """The layout FlyDSL 0.5.0 gives the dense kernel: the preheader jumps to the header
    (.LBB0_5), the MFMA block sits above it and falls into it, the waits sit on conditional
    side blocks, and the DMA block branches back up."""
    lines = listing(
        "\ts_cbranch_scc1 .LBB0_11",
        "\ts_branch .LBB0_5",
        ".LBB0_4:",
        "\tds_read_b128 v[20:23], v1",
        "\ts_waitcnt lgkmcnt(0)",
        MFMA, MFMA,
        "\ts_cbranch_scc0 .LBB0_11",
        ".LBB0_5:",
        "\ts_add_i32 s8, s7, 1",
        "\ts_cmp_ge_i32 s8, s6",
        "\ts_cbranch_scc0 .LBB0_7",
        "\ts_waitcnt vmcnt(0)",
        ".LBB0_7:",
        "\ts_cmp_lg_u32 s2, 1",
        "\ts_cbranch_scc1 .LBB0_9",
        "\ts_waitcnt vmcnt(8)",
        ".LBB0_9:",
        "\ts_barrier",
        "\ts_cbranch_scc1 .LBB0_4",
        "\ts_mov_b32 m0, s3",
        DMA,
        "\ts_add_i32 m0, s3, 0x1000",
        DMA,
        "\ts_branch .LBB0_4",
        ".LBB0_11:",
        "\tbuffer_store_dwordx4 v[0:3], v2, s[8:11], 0 offen",
    )
    loop = isa.main_loop(lines)
    assert loop.header_label == ".LBB0_5"  # the header dominates the loop; .LBB0_4 does not
    assert loop.instructions[0].text == "s_add_i32 s8, s7, 1"  # loop order starts at the header
    m = isa.metrics_of(loop)
    assert (m.mfma, m.dma, m.dma_between) == (2, 2, 0)  # DMAs issued in a burst before the MFMAs
    assert m.vmcnt == (0, 8) and m.drains_vmcnt  # the vmcnt(0) is on a side path: still in the loop
    assert (m.branches, m.extra_branches) == (5, 4)
    assert m.salu == 5  # add, cmp, cmp, mov m0, add m0: not the waits, barrier or branches
    assert m.barriers == 1
    assert "buffer_store" not in " ".join(i.text for i in loop.instructions)


def test_unrolled_loop_is_normalised_per_k_tile():
    lines = listing(".LBB0_1:", MFMA, DMA, MFMA, DMA, MFMA, DMA, MFMA, DMA,
                    "\ts_waitcnt vmcnt(2)", "\ts_barrier", "\ts_waitcnt vmcnt(2)", "\ts_barrier",
                    "\ts_cbranch_scc1 .LBB0_1")
    per_tile = isa.mfma_per_k_tile(32, 32, 64, waves=4)  # 2x2x2 MFMAs over 4 waves
    assert per_tile == 2
    m = isa.loop_metrics(lines, mfma_per_tile=per_tile)
    assert m.tiles == 2
    assert (m.per_tile(m.mfma), m.per_tile(m.dma), m.per_tile(m.dma_between), m.per_tile(m.barriers)) == (2, 2, 1.5, 1)
    assert m.summary().startswith("2 tile(s)/iter; per tile mfma 2, dma 2 (1.5 between mfma), vmcnt [2,2]")


def test_the_main_loop_is_the_innermost_mfma_loop_not_an_outer_persistent_loop():
    lines = listing(
        ".LBB0_1:",  # outer: one output tile per trip
        "\ts_mov_b32 s9, 0",
        ".LBB0_2:",  # inner: the K loop
        MFMA, DMA, MFMA,
        "\ts_cbranch_scc1 .LBB0_2",
        MFMA,  # a peeled last tile: outside the inner loop
        "\tbuffer_store_dwordx4 v[0:3], v2, s[8:11], 0 offen",
        "\ts_cbranch_scc1 .LBB0_1",
    )
    assert [lp.header_label for lp in isa.loops(lines)] == [".LBB0_1", ".LBB0_2"]
    m = isa.loop_metrics(lines)
    assert (m.header, m.mfma, m.dma, m.dma_between, m.branches) == (".LBB0_2", 2, 1, 1, 1)


def test_no_loop_or_no_mfma_loop_gives_none():
    assert isa.loop_metrics(listing(MFMA, MFMA)) is None
    assert isa.loop_metrics(listing(".LBB0_1:", DMA, "\ts_cbranch_scc1 .LBB0_1", MFMA)) is None


def test_a_forward_branch_to_a_later_label_is_no_loop_and_unreachable_code_is_ignored():
    lines = listing(
        "\ts_branch .LBB0_3",
        ".LBB0_2:",  # unreachable block that branches "back" to itself
        MFMA,
        "\ts_branch .LBB0_2",
        ".LBB0_3:",
        MFMA,
        "\ts_cbranch_scc1 .LBB0_4",
        ".LBB0_4:",
        MFMA,
    )
    assert isa.loops(lines) == []


@pytest.mark.parametrize("text, salu", [
    ("s_add_i32 s2, s2, 1", True), ("s_mov_b32 m0, s3", True), ("s_cselect_b32 s2, 1, 0", True),
    ("s_and_b64 s[2:3], s[2:3], exec", True), ("s_load_dwordx2 s[4:5], s[0:1], 0x0", False),
    ("s_buffer_load_dword s4, s[0:3], 0x0", False), ("s_waitcnt vmcnt(0)", False), ("s_barrier", False),
    ("s_cbranch_scc1 .LBB0_1", False), ("s_nop 4", False), ("s_setprio 1", False), ("v_add_u32 v1, v2, v3", False),
])
def test_salu_classification(text, salu):
    assert isa.is_salu(isa.Instruction(1, text)) is salu


def test_dma_classification_needs_the_lds_modifier():
    assert isa.is_dma(isa.Instruction(1, "buffer_load_dwordx4 v20, s[4:7], 0 offen lds"))
    assert isa.is_dma(isa.Instruction(1, "global_load_lds_dwordx4 v[2:3], off"))
    assert not isa.is_dma(isa.Instruction(1, "buffer_load_dwordx4 v[20:23], v1, s[4:7], 0 offen"))
    assert not isa.is_dma(isa.Instruction(1, "ds_read_b128 v[20:23], v1"))


def test_comments_directives_and_the_metadata_after_the_function_are_skipped():
    lines = listing(".LBB0_1:", "\t; a comment line", "\t.p2align 6", MFMA + " ; trailing comment",
                    "\ts_waitcnt vmcnt(0) expcnt(0) lgkmcnt(0)", "\ts_cbranch_scc1 .LBB0_1")
    instrs, labels = isa.parse(lines)
    assert [i.op for i in instrs][-4:] == ["v_mfma_f32_16x16x32_bf16", "s_waitcnt", "s_cbranch_scc1", "s_endpgm"]
    assert instrs[-2].text == "s_cbranch_scc1 .LBB0_1" and set(labels) == {"k", ".LBB0_1"}
    assert isa.wait_fields(instrs[-3]) == {"vmcnt": 0, "expcnt": 0, "lgkmcnt": 0}
    m = isa.loop_metrics(lines)
    assert m.waits == ("vmcnt(0) expcnt(0) lgkmcnt(0)",) and m.instructions == 3


def test_every_function_of_a_listing_is_searched_and_metadata_is_not_code():
    """A split-K module: the reduction kernel comes first and loops without MFMAs; the GEMM's
    K loop is in the second function."""
    lines = [
        "\t.text", "\t.globl reduce", "\t.type reduce,@function", "reduce:",
        "\ts_mov_b32 s2, 0",
        ".LBB0_1:", "\tglobal_load_dwordx4 v[0:3], v1, s[4:5]", "\ts_waitcnt vmcnt(0)",
        "\tv_add_f32_e32 v4, v0, v4", "\ts_cbranch_scc1 .LBB0_1",
        "\ts_endpgm", ".Lfunc_end0:",
        "\t.globl gemm", "\t.type gemm,@function", "gemm:",
        ".LBB1_1:", MFMA, DMA, MFMA, "\ts_waitcnt vmcnt(1)", "\ts_cbranch_scc1 .LBB1_1",
        "\ts_endpgm", ".Lfunc_end1:",
        "\t.amdgpu_metadata", "---", "amdhsa.kernels:", "  - .name: gemm", "...",
    ]
    assert [name for name, _ in isa.functions(lines)] == ["reduce", "gemm"]
    assert [(lp.function, lp.header_label) for lp in isa.loops(lines)] == [("reduce", ".LBB0_1"), ("gemm", ".LBB1_1")]
    m = isa.loop_metrics(lines)
    assert (m.header, m.mfma, m.dma, m.dma_between, m.vmcnt) == (".LBB1_1", 2, 1, 1, (1,))


@pytest.mark.parametrize("text, kind", [
    ("v_mfma_f32_16x16x32_bf16 v[0:3], v[4:7], v[8:11], v[0:3]", "v_mfma_f32_16x16x32_bf16"),
    ("v_mfma_scale_f32_16x16x128_f8f6f4 v[0:3], v[4:11], v[12:19], v[0:3], v20, v21 op_sel_hi:[0,0,0]",
     "v_mfma_scale_f32_16x16x128_f8f6f4 fp8xfp8"),
    ("v_mfma_scale_f32_16x16x128_f8f6f4 v[0:3], v[4:7], v[12:15], v[0:3], v20, v21 op_sel_hi:[0,0,0] cbsz:4 blgp:4",
     "v_mfma_scale_f32_16x16x128_f8f6f4 fp4xfp4"),
    ("v_mfma_scale_f32_16x16x128_f8f6f4 v[0:3], v[4:11], v[12:15], v[0:3], v20, v21 blgp:4",
     "v_mfma_scale_f32_16x16x128_f8f6f4 fp8xfp4"),
])
def test_mfma_kind_names_the_scaled_formats(text, kind):
    assert isa.mfma_kind(isa.Instruction(1, text)) == kind


@pytest.mark.parametrize("text, lds, vmem", [
    ("ds_read_b128 v[20:23], v1", 16, 0), ("ds_read_b64_tr_b16 v[2:3], v1", 8, 0), ("ds_read2_b64 v[2:5], v1", 16, 0),
    ("ds_read2st64_b32 v[2:3], v1", 8, 0), ("ds_write_b16 v1, v2", 2, 0), ("ds_read_u16 v2, v1", 2, 0),
    ("buffer_load_dwordx4 v20, s[4:7], 0 offen lds", 0, 16), ("buffer_load_dword v2, s[4:7], 0 offen lds", 0, 4),
    ("global_load_lds_dwordx4 v[2:3], off", 0, 16), ("v_add_u32 v1, v2, v3", 0, 0),
])
def test_bytes_per_lane_of_lds_and_global_loads(text, lds, vmem):
    ins = isa.Instruction(1, text)
    assert (isa.lds_bytes_per_lane(ins), isa.vmem_bytes_per_lane(ins)) == (lds, vmem)


def test_a_barrier_some_waves_skip_before_the_loop_is_found():
    """The in-tree HTI kernel's prologue: ``s_cbranch_execz`` jumps over an ``s_barrier`` for the
    waves of one group; a barrier every wave passes, and one inside the loop, do not count."""
    lines = listing(
        "\ts_cbranch_execz .LBB0_2",
        "\ts_barrier",
        ".LBB0_2:",
        "\ts_barrier",
        ".LBB0_3:",
        MFMA, DMA, "\ts_barrier", MFMA,
        "\ts_cbranch_scc1 .LBB0_3",
    )
    assert isa.skippable_barriers_before_loop(lines) == 1
    assert isa.skippable_barriers_before_loop(listing("\ts_barrier", ".LBB0_3:", MFMA, "\ts_cbranch_scc1 .LBB0_3")) == 0
    assert isa.skippable_barriers_before_loop(listing(MFMA)) == 0


def test_a_barrier_of_another_loop_before_the_main_loop_is_no_wave_group_split():
    """A persistent kernel's tile search (a loop of its own) with a barrier on a side path runs
    before the K loop: every wave runs it, so it does not split the waves into groups."""
    lines = listing(
        ".LBB0_1:",  # the search loop
        "\ts_cbranch_scc1 .LBB0_2",
        "\ts_barrier",
        ".LBB0_2:",
        "\ts_cbranch_scc0 .LBB0_1",
        ".LBB0_3:",
        MFMA, DMA, MFMA,
        "\ts_cbranch_scc1 .LBB0_3",
    )
    assert isa.skippable_barriers_before_loop(lines) == 0


def test_a_barrier_a_scalar_branch_skips_is_no_wave_group_split():
    """A persistent kernel: the barrier that ends each tile sits above the K loop in address
    order and the first tile's entry jumps over it with a scalar (workgroup-uniform) branch."""
    lines = listing(
        "\ts_branch .LBB0_3",
        ".LBB0_2:",
        "\ts_barrier",
        ".LBB0_3:",
        MFMA, DMA, MFMA,
        "\ts_cbranch_scc1 .LBB0_3",
        "\ts_cbranch_scc1 .LBB0_2",
    )
    assert isa.skippable_barriers_before_loop(lines) == 0
    lines_scc = listing("\ts_cbranch_scc1 .LBB0_2", "\ts_barrier", ".LBB0_2:", ".LBB0_3:", MFMA,
                        "\ts_cbranch_scc1 .LBB0_3")
    assert isa.skippable_barriers_before_loop(lines_scc) == 0


def test_a_barrier_a_vcc_branch_skips_splits_the_waves():
    lines = listing("\ts_cbranch_vccnz .LBB0_2", "\ts_barrier", ".LBB0_2:", ".LBB0_3:", MFMA,
                    "\ts_cbranch_scc1 .LBB0_3")
    assert isa.skippable_barriers_before_loop(lines) == 1


def _group_split(extra_barrier_on: str):
    """A kernel whose waves pick one of two K loops by a scalar branch (the MX ping-pong kernel);
    the loop on ``extra_barrier_on`` ("first"/"second"/"none") is entered past one more barrier."""
    first = ["\ts_barrier"] if extra_barrier_on == "first" else []
    second = ["\ts_barrier"] if extra_barrier_on == "second" else []
    return listing(
        "\ts_cmp_lg_u32 s7, 0",
        "\ts_cbranch_scc1 .LBB0_4",
        *first,
        ".LBB0_1:",  # the first loop: DMAs, then reads, then MFMAs
        "\ts_barrier", DMA, "\tds_read_b128 v[4:7], v1", "\ts_waitcnt lgkmcnt(0)", "\ts_barrier", MFMA, MFMA,
        "\ts_cbranch_scc1 .LBB0_1",
        "\ts_branch .LBB0_7",
        ".LBB0_4:",
        *second,
        ".LBB0_5:",  # the second loop: reads, then MFMAs with DMAs between
        "\ts_barrier", "\tds_read_b128 v[4:7], v1", "\ts_waitcnt vmcnt(1) lgkmcnt(0)", "\ts_barrier", MFMA, DMA, MFMA,
        "\ts_cbranch_scc1 .LBB0_5",
        ".LBB0_7:",
        "\ts_barrier",
    )


def test_two_group_loops_are_found_with_the_lagging_one_entered_past_one_more_barrier():
    for extra, lagging_has_dma_first in (("second", False), ("first", True)):
        groups = isa.wave_group_loops(_group_split(extra))
        assert groups is not None, extra
        leading, lagging = groups
        assert isa.is_dma(lagging.instructions[1]) == lagging_has_dma_first
        assert isa.is_dma(leading.instructions[1]) != lagging_has_dma_first


def test_no_group_loops_without_a_barrier_offset_or_with_one_loop():
    assert isa.wave_group_loops(_group_split("none")) is None  # the offset cannot be told
    assert isa.wave_group_loops(INTERLEAVED) is None
    nested = listing(".LBB0_1:", MFMA, ".LBB0_2:", MFMA, "\ts_cbranch_scc1 .LBB0_2", "\ts_cbranch_scc1 .LBB0_1")
    assert isa.wave_group_loops(nested) is None
