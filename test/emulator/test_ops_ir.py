"""Op-level semantics, on hand-written IR at the stage the emulator executes.

Each test states one hardware rule (CDNA3/CDNA4 ISA, wave64) and checks the emulator obeys it.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from irkit import TR16_ROUNDTRIP, kinds, run

from torch_flydsl.emulator import EmulatorError, UnsupportedOp
from torch_flydsl.emulator.checker import (
    ASYNC_READ_BEFORE_WAIT,
    GLOBAL_OOB,
    LDS_OOB,
    LDS_UNINIT,
    RACE,
)

STORE_I32 = """
      %po = llvm.getelementptr %out[%tid] : (!llvm.ptr<1>, i32) -> !llvm.ptr<1>, i32
      llvm.store {v}, %po : i32, !llvm.ptr<1>
"""


def load_i32(dst, src="%in"):
    return f"""
      %p_{dst} = llvm.getelementptr {src}[%tid] : (!llvm.ptr<1>, i32) -> !llvm.ptr<1>, i32
      %{dst} = llvm.load %p_{dst} : !llvm.ptr<1> -> i32
"""


# ---- integer and float arithmetic ---------------------------------------------------------------


@pytest.mark.parametrize(
    "op, fn",
    [
        ("arith.divsi", lambda a, b: np.trunc(a / b)),
        ("arith.remsi", lambda a, b: np.fmod(a, b)),
        ("arith.floordivsi", lambda a, b: np.floor(a / b)),
        ("arith.ceildivsi", lambda a, b: np.ceil(a / b)),
    ],
)
def test_signed_division_rounding(op, fn):
    a = torch.randint(-1000, 1000, (64,), dtype=torch.int32)
    b = torch.randint(1, 17, (64,), dtype=torch.int32) * torch.where(torch.rand(64) < 0.5, -1, 1).int()
    out = torch.zeros(64, dtype=torch.int32)
    body = load_i32("a", "%A") + load_i32("b", "%B") + f"      %r = {op} %a, %b : i32\n" + STORE_I32.format(v="%r")
    run("%A: !llvm.ptr<1>, %B: !llvm.ptr<1>, %out: !llvm.ptr<1>", body, [a, b, out])
    assert out.tolist() == fn(a.double().numpy(), b.double().numpy()).astype(np.int64).tolist()


def test_i32_arithmetic_wraps_and_shrui_is_logical():
    a = torch.tensor([2**31 - 1, -8, -1, 5] * 16, dtype=torch.int32)
    out = torch.zeros(64, dtype=torch.int32)
    out2 = torch.zeros(64, dtype=torch.int32)
    body = (
        load_i32("a", "%A")
        + "      %c1 = arith.constant 1 : i32\n      %r = arith.addi %a, %c1 : i32\n"
        + STORE_I32.format(v="%r")
        + "      %s = arith.shrui %a, %c1 : i32\n"
        + "      %po2 = llvm.getelementptr %out2[%tid] : (!llvm.ptr<1>, i32) -> !llvm.ptr<1>, i32\n"
        + "      llvm.store %s, %po2 : i32, !llvm.ptr<1>\n"
    )
    run("%A: !llvm.ptr<1>, %out: !llvm.ptr<1>, %out2: !llvm.ptr<1>", body, [a, out, out2])
    assert out[:4].tolist() == [-(2**31), -7, 0, 6]
    assert out2[:4].tolist() == [(2**31 - 1) >> 1, (2**32 - 8) >> 1, (2**32 - 1) >> 1, 2]


def test_truncf_to_bf16_rounds_to_nearest_even():
    x = torch.randn(64) * 10
    x[0], x[1] = 1.0 + 2.0**-8, 1.0 + 3 * 2.0**-8  # exact ties: round to even
    out = torch.zeros(64, dtype=torch.bfloat16)
    body = """
      %pi = llvm.getelementptr %in[%tid] : (!llvm.ptr<1>, i32) -> !llvm.ptr<1>, f32
      %v = llvm.load %pi : !llvm.ptr<1> -> f32
      %b = arith.truncf %v : f32 to bf16
      %po = llvm.getelementptr %out[%tid] : (!llvm.ptr<1>, i32) -> !llvm.ptr<1>, bf16
      llvm.store %b, %po : bf16, !llvm.ptr<1>
"""
    run("%in: !llvm.ptr<1>, %out: !llvm.ptr<1>", body, [x, out])
    assert torch.equal(out, x.bfloat16())
    assert out[0].item() == 1.0 and out[1].item() == 1.015625


# ---- control flow under lane masks ------------------------------------------------------------


def test_divergent_if_merges_per_lane():
    out = torch.zeros(64, dtype=torch.int32)
    body = """
      %c32 = arith.constant 32 : i32
      %c7 = arith.constant 7 : i32
      %lt = arith.cmpi slt, %tid, %c32 : i32
      %r = scf.if %lt -> (i32) {
        %x = arith.muli %tid, %c7 : i32
        scf.yield %x : i32
      } else {
        %y = arith.subi %tid, %c32 : i32
        scf.yield %y : i32
      }
""" + STORE_I32.format(v="%r")
    run("%out: !llvm.ptr<1>", body, [out])
    assert out.tolist() == [7 * i for i in range(32)] + list(range(32))


def test_loop_with_lane_varying_trip_count():
    out = torch.zeros(64, dtype=torch.int32)
    body = """
      %c0 = arith.constant 0 : i32
      %c1 = arith.constant 1 : i32
      %s = scf.for %i = %c0 to %tid step %c1 iter_args(%acc = %c0) -> (i32) : i32 {
        %n = arith.addi %acc, %i : i32
        scf.yield %n : i32
      }
""" + STORE_I32.format(v="%s")
    run("%out: !llvm.ptr<1>", body, [out])
    assert out.tolist() == [t * (t - 1) // 2 for t in range(64)]


def test_partial_wave_lanes_beyond_block_do_not_store():
    out = torch.full((64,), -1, dtype=torch.int32)
    run("%out: !llvm.ptr<1>", STORE_I32.format(v="%tid"), [out], block=40)
    assert out.tolist() == list(range(40)) + [-1] * 24


def test_divergent_if_around_a_barrier_merges_per_lane_and_still_synchronizes():
    # Wave 0 takes the then-branch, wave 1 the else-branch; each writes LDS, waits at the
    # barrier inside its branch and reads the other wave's value (the generator path of scf.if).
    out = torch.zeros(128, dtype=torch.int32)
    body = LDS_STORE_TID + """
      %c64i = arith.constant 64 : i32
      %w0 = arith.cmpi slt, %tid, %c64i : i32
      %r = scf.if %w0 -> (i32) {
        gpu.barrier
        %a = arith.addi %tid, %c64i : i32
        scf.yield %a : i32
      } else {
        gpu.barrier
        %b = arith.subi %tid, %c64i : i32
        scf.yield %b : i32
      }
      %pr = llvm.getelementptr %lds[%r] : (!llvm.ptr<3>, i32) -> !llvm.ptr<3>, i32
      %v = llvm.load %pr : !llvm.ptr<3> -> i32
""" + STORE_I32.format(v="%v")
    rep = run("%out: !llvm.ptr<1>", body, [out], block=128, lds_bytes=512)
    assert rep.findings == []
    assert out.tolist() == [(t + 64) % 128 for t in range(128)]


def test_uniform_loop_around_a_barrier_carries_values():
    out = torch.zeros(128, dtype=torch.int32)
    body = """
      %c0 = arith.constant 0 : i32
      %c1 = arith.constant 1 : i32
      %c4 = arith.constant 4 : i32
      %s = scf.for %i = %c0 to %c4 step %c1 iter_args(%acc = %tid) -> (i32) : i32 {
        gpu.barrier
        %n = arith.addi %acc, %i : i32
        scf.yield %n : i32
      }
""" + STORE_I32.format(v="%s")
    rep = run("%out: !llvm.ptr<1>", body, [out], block=128)
    assert rep.findings == [] and out.tolist() == [t + 6 for t in range(128)]


def test_lane_varying_loop_around_a_barrier_is_refused():
    body = """
      %c0 = arith.constant 0 : i32
      %c1 = arith.constant 1 : i32
      scf.for %i = %c0 to %tid step %c1 : i32 {
        gpu.barrier
      }
"""
    with pytest.raises(EmulatorError, match="lane-varying bounds around a barrier"):
        run("", body, [])


def test_execute_region_returns_its_values():
    out = torch.zeros(64, dtype=torch.int32)
    body = """
      %r = scf.execute_region -> i32 {
        %c3 = arith.constant 3 : i32
        %x = arith.muli %tid, %c3 : i32
        scf.yield %x : i32
      }
""" + STORE_I32.format(v="%r")
    run("%out: !llvm.ptr<1>", body, [out])
    assert out.tolist() == [3 * t for t in range(64)]


# ---- global memory and buffer resources -------------------------------------------------------


def test_global_load_outside_every_tensor_is_reported_and_reads_zero():
    a = torch.arange(32, dtype=torch.int32) + 1
    out = torch.zeros(64, dtype=torch.int32)
    body = load_i32("v", "%A") + STORE_I32.format(v="%v")
    rep = run("%A: !llvm.ptr<1>, %out: !llvm.ptr<1>", body, [a, out])
    assert GLOBAL_OOB in kinds(rep)
    assert out[:32].tolist() == list(range(1, 33))
    assert any("global read" in f.message for f in rep.findings)


BUFFER = """
      %c0i16 = arith.constant 0 : i16
      %nrec = arith.constant {nrec} : i64
      %flags = arith.constant 159744 : i32
      %rs = rocdl.make.buffer.rsrc %A, %c0i16, %nrec, %flags : <1> to <8>
      %c0 = arith.constant 0 : i32
      %c4 = arith.constant {stride} : i32
      %voff = arith.muli %tid, %c4 : i32
"""


def test_buffer_load_past_num_records_returns_zero_without_a_finding():
    a = torch.arange(64, dtype=torch.int32) + 100
    out = torch.zeros(64, dtype=torch.int32)
    body = BUFFER.format(nrec=40, stride=4) + "      %v = rocdl.raw.ptr.buffer.load %rs, %voff, %c0, 0 : i32\n" + STORE_I32.format(v="%v")
    rep = run("%A: !llvm.ptr<1>, %out: !llvm.ptr<1>", body, [a, out])
    assert out.tolist() == list(range(100, 110)) + [0] * 54
    assert rep.findings == []


def test_buffer_load_range_check_is_per_dword():
    a = torch.arange(64 * 4, dtype=torch.int32)
    out = torch.zeros(64, 4, dtype=torch.int32)
    # 16-byte loads, num_records = 24 bytes: lane 0 gets dwords 0..3? no - 24 bytes cover 6 dwords
    body = BUFFER.format(nrec=24, stride=16) + """
      %v = rocdl.raw.ptr.buffer.load %rs, %voff, %c0, 0 : vector<4xi32>
      %po = llvm.getelementptr %out[%tid] : (!llvm.ptr<1>, i32) -> !llvm.ptr<1>, vector<4xi32>
      llvm.store %v, %po : vector<4xi32>, !llvm.ptr<1>
"""
    run("%A: !llvm.ptr<1>, %out: !llvm.ptr<1>", body, [a, out])
    assert out[0].tolist() == [0, 1, 2, 3]
    assert out[1].tolist() == [4, 5, 0, 0]  # dwords 4,5 in range, 6,7 out of range
    assert out[2:].abs().sum() == 0


@pytest.mark.parametrize("nrec", [24, 22])
def test_buffer_load_does_not_touch_the_dwords_it_range_checks_out(nrec):
    # A 24-byte tensor (a slice of a larger allocation, so the bytes after it exist but belong
    # to no kernel tensor). Lane 1's 16-byte load covers bytes 16..31: dwords 4, 5 are in range,
    # 6, 7 are not, and the hardware never fetches them, so nothing is out of bounds. With
    # num_records = 22 dword 5 straddles the bound and reads zero too (per-dword check).
    storage = torch.arange(64, dtype=torch.int32)
    a = storage[:6]
    out = torch.zeros(64, 4, dtype=torch.int32)
    body = BUFFER.format(nrec=nrec, stride=16) + """
      %v = rocdl.raw.ptr.buffer.load %rs, %voff, %c0, 0 : vector<4xi32>
      %po = llvm.getelementptr %out[%tid] : (!llvm.ptr<1>, i32) -> !llvm.ptr<1>, vector<4xi32>
      llvm.store %v, %po : vector<4xi32>, !llvm.ptr<1>
"""
    rep = run("%A: !llvm.ptr<1>, %out: !llvm.ptr<1>", body, [a, out])
    assert rep.findings == []
    assert out[0].tolist() == [0, 1, 2, 3]
    assert out[1].tolist() == ([4, 5, 0, 0] if nrec == 24 else [4, 0, 0, 0])
    assert out[2:].abs().sum() == 0


def test_buffer_dma_to_lds_does_not_touch_the_dwords_it_range_checks_out():
    storage = torch.arange(64 * 4, dtype=torch.int32)
    a = storage[:6]  # 24 bytes: lane 1's 16-byte DMA has two dwords in range
    out = torch.zeros(64, dtype=torch.int32)
    body = ASYNC.replace("4294967295", "24").format(wait="rocdl.s.waitcnt 3952")
    rep = run("%A: !llvm.ptr<1>, %out: !llvm.ptr<1>", body, [a, out], lds_bytes=1024)
    assert rep.findings == []
    assert out.tolist()[:3] == [0, 4, 0]  # lane t reads the LDS dword 4t (dword t*4 of A, or 0)


def test_buffer_store_past_num_records_is_dropped():
    a = torch.zeros(64, dtype=torch.int32)
    body = BUFFER.format(nrec=32, stride=4) + "      rocdl.raw.ptr.buffer.store %tid, %rs, %voff, %c0, 0 : i32\n"
    rep = run("%A: !llvm.ptr<1>", body, [a])
    assert a.tolist() == list(range(8)) + [0] * 56
    assert rep.findings == []


def test_buffer_access_in_range_but_outside_tensors_is_reported():
    a = torch.zeros(16, dtype=torch.int32)
    body = BUFFER.format(nrec=4294967295, stride=4) + "      rocdl.raw.ptr.buffer.store %tid, %rs, %voff, %c0, 0 : i32\n"
    rep = run("%A: !llvm.ptr<1>", body, [a])
    assert GLOBAL_OOB in kinds(rep)
    assert a.tolist() == list(range(16))


def test_buffer_atomic_fadd_accumulates_all_lanes():
    a = torch.zeros(4, dtype=torch.float32)
    body = BUFFER.format(nrec=16, stride=0) + """
      %one = arith.constant 1.5 : f32
      %c3 = arith.constant 3 : i32
      %c4b = arith.constant 4 : i32
      %slot = arith.andi %tid, %c3 : i32
      %vo = arith.muli %slot, %c4b : i32
      rocdl.raw.ptr.buffer.atomic.fadd %one, %rs, %vo, %c0, 0 : f32
"""
    run("%A: !llvm.ptr<1>", body, [a])
    assert a.tolist() == [24.0] * 4


# ---- LDS: addressing, races, async loads ----------------------------------------------------------

LDS_STORE_TID = """
      %lds = llvm.mlir.addressof @lds : !llvm.ptr<3>
      %pw = llvm.getelementptr %lds[%tid] : (!llvm.ptr<3>, i32) -> !llvm.ptr<3>, i32
      llvm.store %tid, %pw : i32, !llvm.ptr<3>
"""
LDS_READ_NEIGHBOUR_WAVE = """
      %c64 = arith.constant 64 : i32
      %c127 = arith.constant 127 : i32
      %o = arith.addi %tid, %c64 : i32
      %j = arith.andi %o, %c127 : i32
      %pr = llvm.getelementptr %lds[%j] : (!llvm.ptr<3>, i32) -> !llvm.ptr<3>, i32
      %v = llvm.load %pr : !llvm.ptr<3> -> i32
"""


def test_lds_exchange_between_waves_with_barrier_is_clean():
    out = torch.zeros(128, dtype=torch.int32)
    body = LDS_STORE_TID + "      gpu.barrier\n" + LDS_READ_NEIGHBOUR_WAVE + STORE_I32.format(v="%v")
    rep = run("%out: !llvm.ptr<1>", body, [out], block=128, lds_bytes=512)
    assert rep.findings == []
    assert out.tolist() == [(t + 64) % 128 for t in range(128)]


def test_missing_barrier_is_reported_as_an_lds_race():
    out = torch.zeros(128, dtype=torch.int32)
    body = LDS_STORE_TID + LDS_READ_NEIGHBOUR_WAVE + STORE_I32.format(v="%v")
    rep = run("%out: !llvm.ptr<1>", body, [out], block=128, lds_bytes=512)
    races = [f for f in rep.findings if f.kind == RACE]
    assert races, rep
    assert "test_ops_ir" not in races[0].location  # hand-written IR has no source file
    # wave 0 ran to completion before wave 1 wrote: it read never-written bytes too
    assert LDS_UNINIT in kinds(rep)


def test_rocdl_s_barrier_also_separates_phases():
    out = torch.zeros(128, dtype=torch.int32)
    body = LDS_STORE_TID + "      rocdl.s.barrier\n" + LDS_READ_NEIGHBOUR_WAVE + STORE_I32.format(v="%v")
    rep = run("%out: !llvm.ptr<1>", body, [out], block=128, lds_bytes=512)
    assert rep.findings == []


def test_lds_access_past_allocation_is_reported():
    body = """
      %lds = llvm.mlir.addressof @lds : !llvm.ptr<3>
      %pw = llvm.getelementptr %lds[%tid] : (!llvm.ptr<3>, i32) -> !llvm.ptr<3>, i32
      llvm.store %tid, %pw : i32, !llvm.ptr<3>
"""
    rep = run("", body, [], lds_bytes=128)
    assert LDS_OOB in kinds(rep)


ASYNC = """
      %c0i16 = arith.constant 0 : i16
      %nrec = arith.constant 4294967295 : i64
      %flags = arith.constant 159744 : i32
      %rs = rocdl.make.buffer.rsrc %A, %c0i16, %nrec, %flags : <1> to <8>
      %c0 = arith.constant 0 : i32
      %c16 = arith.constant 16 : i32
      %voff = arith.muli %tid, %c16 : i32
      %lds = llvm.mlir.addressof @lds : !llvm.ptr<3>
      rocdl.raw.ptr.buffer.load.async.lds %rs, %lds, %c16, %voff, %c0, %c0, 0
      {wait}
      %c4 = arith.constant 4 : i32
      %e = arith.muli %tid, %c4 : i32
      %pr = llvm.getelementptr %lds[%e] : (!llvm.ptr<3>, i32) -> !llvm.ptr<3>, i32
      %v = llvm.load %pr : !llvm.ptr<3> -> i32
""" + STORE_I32.format(v="%v")


def test_async_lds_load_lands_at_m0_plus_lane_times_size():
    a = torch.arange(64 * 4, dtype=torch.int32)
    out = torch.zeros(64, dtype=torch.int32)
    rep = run("%A: !llvm.ptr<1>, %out: !llvm.ptr<1>", ASYNC.format(wait="rocdl.s.waitcnt 3952"), [a, out], lds_bytes=1024)
    assert rep.findings == []
    assert out.tolist() == list(range(0, 256, 4))


def test_reading_async_lds_destination_before_waitcnt_is_reported():
    a = torch.arange(64 * 4, dtype=torch.int32)
    out = torch.zeros(64, dtype=torch.int32)
    rep = run("%A: !llvm.ptr<1>, %out: !llvm.ptr<1>", ASYNC.format(wait=""), [a, out], lds_bytes=1024)
    assert kinds(rep) == [ASYNC_READ_BEFORE_WAIT]


def test_waitcnt_that_leaves_the_load_outstanding_does_not_complete_it():
    a = torch.arange(64 * 4, dtype=torch.int32)
    out = torch.zeros(64, dtype=torch.int32)
    # vmcnt(1): the single outstanding DMA may still be in flight
    rep = run("%A: !llvm.ptr<1>, %out: !llvm.ptr<1>", ASYNC.format(wait="rocdl.s.waitcnt 3953"), [a, out], lds_bytes=1024)
    assert kinds(rep) == [ASYNC_READ_BEFORE_WAIT]


def test_barrier_alone_does_not_complete_an_async_load():
    a = torch.arange(64 * 4, dtype=torch.int32)
    out = torch.zeros(64, dtype=torch.int32)
    rep = run("%A: !llvm.ptr<1>, %out: !llvm.ptr<1>", ASYNC.format(wait="gpu.barrier"), [a, out], lds_bytes=1024)
    assert kinds(rep) == [ASYNC_READ_BEFORE_WAIT]


# ---- cross-lane ------------------------------------------------------------------------------------


def _crosslane(expr, block=64):
    out = torch.zeros(64, dtype=torch.int32)
    body = "      %c4 = arith.constant 4 : i32\n      %c63 = arith.constant 63 : i32\n" + expr + STORE_I32.format(v="%r")
    run("%out: !llvm.ptr<1>", body, [out], block=block)
    return out.tolist()


def test_ds_bpermute_reads_lane_addr_div_4():
    rev = "      %src = arith.subi %c63, %tid : i32\n      %addr = arith.muli %src, %c4 : i32\n"
    assert _crosslane(rev + "      %r = rocdl.ds_bpermute %addr, %tid : (i32, i32) -> i32\n") == list(range(63, -1, -1))


def test_mbcnt_lo_hi_gives_the_lane_id():
    expr = """
      %m1 = arith.constant -1 : i32
      %z = arith.constant 0 : i32
      %lo = rocdl.mbcnt.lo %m1, %z : (i32, i32) -> i32
      %r = rocdl.mbcnt.hi %m1, %lo : (i32, i32) -> i32
"""
    assert _crosslane(expr) == list(range(64))


def test_dpp_row_shr_1_with_bound_ctrl_zero_fills_row_start():
    # dpp_ctrl 0x111 = row_shr:1
    got = _crosslane("      %r = rocdl.update.dpp %tid, %tid with 273, 15, 15, true : i32\n")
    assert got == [0 if t % 16 == 0 else t - 1 for t in range(64)]


def test_dpp_without_bound_ctrl_keeps_old_value():
    got = _crosslane("      %r = rocdl.update.dpp %tid, %tid with 273, 15, 15, false : i32\n")
    assert got == [t if t % 16 == 0 else t - 1 for t in range(64)]


def test_dpp_quad_perm_broadcast_lane0_of_each_quad():
    got = _crosslane("      %r = rocdl.update.dpp %tid, %tid with 0, 15, 15, false : i32\n")
    assert got == [t & ~3 for t in range(64)]


def test_ds_swizzle_bitmode_xor():
    # and_mask=0x1f, or=0, xor=1 -> swap neighbours within 32-lane halves
    pat = 0x1F | (1 << 10)
    got = _crosslane(f"      %p = arith.constant {pat} : i32\n      %r = rocdl.ds_swizzle %tid, %p : (i32, i32) -> i32\n")
    assert got == [t ^ 1 for t in range(64)]


def test_readfirstlane_takes_the_first_active_lane():
    expr = """
      %c10 = arith.constant 10 : i32
      %ge = arith.cmpi sge, %tid, %c10 : i32
      %r = scf.if %ge -> (i32) {
        %f = rocdl.readfirstlane %tid : i32
        scf.yield %f : i32
      } else {
        scf.yield %c63 : i32
      }
"""
    assert _crosslane(expr) == [63] * 10 + [10] * 54


def test_ballot_collects_active_predicates():
    out = torch.zeros(64, dtype=torch.int64)
    body = """
      %c2 = arith.constant 2 : i32
      %c0 = arith.constant 0 : i32
      %m = arith.remsi %tid, %c2 : i32
      %odd = arith.cmpi ne, %m, %c0 : i32
      %b = rocdl.ballot %odd : i64
      %po = llvm.getelementptr %out[%tid] : (!llvm.ptr<1>, i32) -> !llvm.ptr<1>, i64
      llvm.store %b, %po : i64, !llvm.ptr<1>
"""
    run("%out: !llvm.ptr<1>", body, [out])
    assert out[0].item() == int("AA" * 8, 16) - (1 << 64)


# ---- transposing LDS read (gfx950) ----------------------------------------------------------------


def test_ds_read_b64_tr_b16_transposes_within_16_lane_groups():
    # LDS holds a 4 x 16 row-major matrix of i16 per 16-lane group; lane 4j+s reads the 4
    # elements of row j starting at column 4s; lane t must get column t of the 4 rows.
    data = torch.arange(64 * 4, dtype=torch.int16)
    out = torch.zeros(64, 4, dtype=torch.int16)
    body = TR16_ROUNDTRIP
    rep = run("%in: !llvm.ptr<1>, %out: !llvm.ptr<1>", body, [data, out], lds_bytes=512)
    assert rep.findings == []
    blocks = data.view(4, 4, 16)  # group, row j, column
    expect = blocks.transpose(1, 2).reshape(64, 4)  # lane t of a group: column t, rows 0..3
    assert torch.equal(out, expect)


# ---- MFMA -----------------------------------------------------------------------------------------


def _mfma_reference(m, k, a_lanes, b_lanes, c_lanes):
    """Textbook CDNA3/4 layout, written independently of the emulator's tables."""
    groups = 64 // m
    v = k // groups
    A = np.zeros((m, k))
    B = np.zeros((k, m))
    C = np.zeros((m, m))
    for lane in range(64):
        for j in range(v):
            A[lane % m, (lane // m) * v + j] = a_lanes[lane, j]
            B[(lane // m) * v + j, lane % m] = b_lanes[lane, j]
        for j in range(m * m // 64):
            C[(j // 4) * 4 * groups + (lane // m) * 4 + j % 4, lane % m] = c_lanes[lane, j]
    D = A @ B + C
    out = np.zeros_like(c_lanes)
    for lane in range(64):
        for j in range(m * m // 64):
            out[lane, j] = D[(j // 4) * 4 * groups + (lane // m) * 4 + j % 4, lane % m]
    return out


@pytest.mark.parametrize("shape, dt", [((16, 32), "bf16"), ((32, 16), "bf16"), ((16, 32), "f16"), ((32, 16), "f16")])
def test_mfma_matches_the_isa_layout(shape, dt):
    m, k = shape
    nacc = m * m // 64
    tdt = torch.bfloat16 if dt == "bf16" else torch.float16
    a = torch.randn(64, 8).to(tdt)
    b = torch.randn(64, 8).to(tdt)
    c = torch.randn(64, nacc)
    out = torch.zeros(64, nacc)
    body = f"""
      %pa = llvm.getelementptr %A[%tid] : (!llvm.ptr<1>, i32) -> !llvm.ptr<1>, vector<8x{dt}>
      %va = llvm.load %pa : !llvm.ptr<1> -> vector<8x{dt}>
      %pb = llvm.getelementptr %B[%tid] : (!llvm.ptr<1>, i32) -> !llvm.ptr<1>, vector<8x{dt}>
      %vb = llvm.load %pb : !llvm.ptr<1> -> vector<8x{dt}>
      %pc = llvm.getelementptr %C[%tid] : (!llvm.ptr<1>, i32) -> !llvm.ptr<1>, vector<{nacc}xf32>
      %vc = llvm.load %pc : !llvm.ptr<1> -> vector<{nacc}xf32>
      %d = rocdl.mfma.f32.{m}x{m}x{k}.{dt} %va, %vb, %vc, 0, 0, none : (vector<8x{dt}>, vector<8x{dt}>, vector<{nacc}xf32>) -> vector<{nacc}xf32>
      %po = llvm.getelementptr %out[%tid] : (!llvm.ptr<1>, i32) -> !llvm.ptr<1>, vector<{nacc}xf32>
      llvm.store %d, %po : vector<{nacc}xf32>, !llvm.ptr<1>
"""
    run("%A: !llvm.ptr<1>, %B: !llvm.ptr<1>, %C: !llvm.ptr<1>, %out: !llvm.ptr<1>", body, [a, b, c, out])
    ref = _mfma_reference(m, k, a.double().numpy(), b.double().numpy(), c.double().numpy())
    np.testing.assert_allclose(out.numpy(), ref, rtol=1e-6, atol=1e-5)


# ---- unsupported -------------------------------------------------------------------------------------


def test_unsupported_op_raises_naming_the_op_before_running():
    out = torch.zeros(64, dtype=torch.int32)
    body = "      %r = rocdl.permlanex16 %tid, %tid, %tid, %tid, false, false : i32, i32\n" + STORE_I32.format(v="%r")
    with pytest.raises(UnsupportedOp, match="rocdl.permlanex16"):
        run("%out: !llvm.ptr<1>", body, [out])
    assert out.abs().sum() == 0


# ---- scaled MFMA (MX formats) ------------------------------------------------------------------------

FP4_VALUES = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]


def _decode_fp4(codes):
    v = np.array([FP4_VALUES[c & 7] for c in codes.ravel()]).reshape(codes.shape)
    return np.where(codes & 8, -v, v)


@pytest.mark.parametrize("opsel_b", [0, 2])
def test_scaled_mfma_fp8_times_fp4_with_e8m0_block_scales(opsel_b):
    g = torch.Generator().manual_seed(1)
    a_codes = torch.randint(0, 256, (64, 32), generator=g, dtype=torch.uint8)
    a_codes[(a_codes & 0x7F) == 0x7F] = 0x38  # avoid NaN codes
    b_codes = torch.randint(0, 16, (64, 32), generator=g, dtype=torch.uint8)
    b_packed = (b_codes[:, 0::2] | (b_codes[:, 1::2] << 4)).contiguous()  # two fp4 per byte, low nibble first
    sa = torch.randint(120, 134, (64,), generator=g, dtype=torch.int32)
    sb_bytes = torch.randint(120, 134, (64,), generator=g, dtype=torch.int32)
    sb = sb_bytes << (8 * opsel_b)
    c = torch.randn(64, 4, generator=g)
    out = torch.zeros(64, 4)
    body = f"""
      %pa = llvm.getelementptr %A[%tid] : (!llvm.ptr<1>, i32) -> !llvm.ptr<1>, vector<8xi32>
      %va = llvm.load %pa : !llvm.ptr<1> -> vector<8xi32>
      %pb = llvm.getelementptr %B[%tid] : (!llvm.ptr<1>, i32) -> !llvm.ptr<1>, vector<4xi32>
      %vb = llvm.load %pb : !llvm.ptr<1> -> vector<4xi32>
      %pc = llvm.getelementptr %C[%tid] : (!llvm.ptr<1>, i32) -> !llvm.ptr<1>, vector<4xf32>
      %vc = llvm.load %pc : !llvm.ptr<1> -> vector<4xf32>
      %psa = llvm.getelementptr %SA[%tid] : (!llvm.ptr<1>, i32) -> !llvm.ptr<1>, i32
      %sa = llvm.load %psa : !llvm.ptr<1> -> i32
      %psb = llvm.getelementptr %SB[%tid] : (!llvm.ptr<1>, i32) -> !llvm.ptr<1>, i32
      %sb = llvm.load %psb : !llvm.ptr<1> -> i32
      %d = rocdl.mfma.scale.f32.16x16x128.f8f6f4 %va, %vb, %vc, fp8_e4m3, fp4_e2m1, 0, %sa, {opsel_b}, %sb : (vector<8xi32>, vector<4xi32>, vector<4xf32>, i32, i32) -> vector<4xf32>
      %po = llvm.getelementptr %out[%tid] : (!llvm.ptr<1>, i32) -> !llvm.ptr<1>, vector<4xf32>
      llvm.store %d, %po : vector<4xf32>, !llvm.ptr<1>
"""
    run("%A: !llvm.ptr<1>, %B: !llvm.ptr<1>, %C: !llvm.ptr<1>, %SA: !llvm.ptr<1>, %SB: !llvm.ptr<1>, %out: !llvm.ptr<1>",
        body, [a_codes, b_packed, c, sa, sb, out])
    # Independent reference (AMD's description, see test_scaled_mfma_hw_semantics.py for sources):
    # lane l holds row/column l%16; FP8 value j is k = 64*(j//16) + 16*(l//16) + j%16 (two runs
    # of 16), FP4 value j is k = 32*(l//16) + j; the scale of row/column i, K block b is in lane
    # 16*b + i (byte opsel), whatever lane holds the data.
    a_vals = a_codes.view(torch.float8_e4m3fn).double().numpy()
    b_vals = _decode_fp4(b_codes.numpy())
    A = np.zeros((16, 128))
    B = np.zeros((128, 16))
    for lane in range(64):
        for j in range(32):
            A[lane % 16, 64 * (j // 16) + 16 * (lane // 16) + j % 16] = a_vals[lane, j]
            B[32 * (lane // 16) + j, lane % 16] = b_vals[lane, j]
    sa_of = np.exp2(sa.numpy() - 127.0)  # lane 16*b + i -> row i, block b
    sb_of = np.exp2(sb_bytes.numpy() - 127.0)
    for k in range(128):
        A[:, k] *= sa_of[16 * (k // 32) + np.arange(16)]
        B[k, :] *= sb_of[16 * (k // 32) + np.arange(16)]
    D = A @ B
    expect = np.array([[D[4 * (l // 16) + j, l % 16] + c[l, j].item() for j in range(4)] for l in range(64)])
    np.testing.assert_allclose(out.numpy(), expect, rtol=1e-5, atol=1e-4)


def test_permlane32_swap_exchanges_upper_half_of_old_with_lower_half_of_src():
    out0 = torch.zeros(64, dtype=torch.int32)
    out1 = torch.zeros(64, dtype=torch.int32)
    body = """
      %c100 = arith.constant 100 : i32
      %s = arith.addi %tid, %c100 : i32
      %st = rocdl.permlane32.swap %tid, %s, false, false : (i32, i32) -> !llvm.struct<(i32, i32)>
      %r0 = llvm.extractvalue %st[0] : !llvm.struct<(i32, i32)>
      %r1 = llvm.extractvalue %st[1] : !llvm.struct<(i32, i32)>
      %po0 = llvm.getelementptr %o0[%tid] : (!llvm.ptr<1>, i32) -> !llvm.ptr<1>, i32
      llvm.store %r0, %po0 : i32, !llvm.ptr<1>
      %po1 = llvm.getelementptr %o1[%tid] : (!llvm.ptr<1>, i32) -> !llvm.ptr<1>, i32
      llvm.store %r1, %po1 : i32, !llvm.ptr<1>
"""
    run("%o0: !llvm.ptr<1>, %o1: !llvm.ptr<1>", body, [out0, out1])
    assert out0.tolist() == list(range(32)) + [100 + t for t in range(32)]
    assert out1.tolist() == list(range(32, 64)) + [100 + t for t in range(32, 64)]


def test_dynamic_shared_memory_follows_static_lds():
    from torch_flydsl.emulator.api import run_kernel_ir

    asm = """
module attributes {gpu.container_module} {
  gpu.module @kernels {
    llvm.mlir.global external @stat() {addr_space = 3 : i32, alignment = 16 : i64, dso_local} : !llvm.array<100 x i8>
    llvm.mlir.global external @dyn() {addr_space = 3 : i32, alignment = 16 : i64, dso_local} : !llvm.array<0 x i8>
    gpu.func @k(%out: !llvm.ptr<1>) kernel {
      %tid_idx = gpu.thread_id x
      %tid = arith.index_cast %tid_idx : index to i32
      %d = llvm.mlir.addressof @dyn : !llvm.ptr<3>
      %p = llvm.getelementptr %d[%tid] : (!llvm.ptr<3>, i32) -> !llvm.ptr<3>, i32
      llvm.store %tid, %p : i32, !llvm.ptr<3>
      %v = llvm.load %p : !llvm.ptr<3> -> i32
      %po = llvm.getelementptr %out[%tid] : (!llvm.ptr<1>, i32) -> !llvm.ptr<1>, i32
      llvm.store %v, %po : i32, !llvm.ptr<1>
      gpu.return
    }
  }
}
"""
    out = torch.zeros(64, dtype=torch.int32)
    rep = run_kernel_ir(asm, "k", [out], dynamic_smem=256)
    assert rep.findings == [] and out.tolist() == list(range(64))
    assert rep.launches[0].lds_bytes == 112 + 256  # static 100 bytes, dynamic part 16-aligned
    rep = run_kernel_ir(asm, "k", [out], dynamic_smem=128)  # too small: stores run past the end
    assert LDS_OOB in kinds(rep)


def test_only_selected_workgroups_run():
    from torch_flydsl.emulator.api import run_kernel_ir
    from irkit import module

    out = torch.zeros(4 * 64, dtype=torch.int32)
    body = """
      %bid_idx = gpu.block_id x
      %bid = arith.index_cast %bid_idx : index to i32
      %c64 = arith.constant 64 : i32
      %base = arith.muli %bid, %c64 : i32
      %i = arith.addi %base, %tid : i32
      %c1 = arith.constant 1 : i32
      %v = arith.addi %bid, %c1 : i32
      %po = llvm.getelementptr %out[%i] : (!llvm.ptr<1>, i32) -> !llvm.ptr<1>, i32
      llvm.store %v, %po : i32, !llvm.ptr<1>
"""
    rep = run_kernel_ir(module("%out: !llvm.ptr<1>", body), "k", [out], grid=(4, 1, 1), workgroups=[(2, 0, 0)])
    assert rep.launches[0].workgroups_run == 1
    assert out.view(4, 64)[:, 0].tolist() == [0, 0, 3, 0]
