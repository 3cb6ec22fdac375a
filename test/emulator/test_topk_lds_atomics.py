"""LDS atomics (``llvm.atomicrmw`` on address space 3) as the TopK histogram uses them: one
instruction whose lanes hit the same addresses returns, per lane, the value its RMW read when
the lanes apply in lane order (the emulator's stated atomic order), and leaves each address
with all lanes' updates. The emulator applies a wave's lanes in one LDS read and one write;
this pins the results to the lane-by-lane definition."""

import flydsl.compiler as flyc
import flydsl.expr as fx
import pytest
import torch
from flydsl.expr import gpu
from flydsl.expr.llvm import atomic_add, atomic_max

from torch_flydsl.emulator import emulate

pytestmark = pytest.mark.emulator

THREADS, SLOTS = 128, 3


@fx.struct
class _Shared:
    c: fx.Array[fx.Int32, 2 * 4, 16]
    m: fx.Array[fx.Int32, 2 * 4, 16]


@flyc.kernel
def _atomics_kernel(Old: fx.Tensor, OldMax: fx.Tensor, Final: fx.Tensor, distinct: fx.Int32):
    tid = fx.thread_idx.x
    wave = tid // 64
    lds = fx.SharedAllocator().allocate(_Shared).peek()
    if tid < 8:
        lds.c[tid] = fx.Int32(100)
        lds.m[tid] = fx.Int32(-1)
    gpu.barrier()
    # each wave its own 4 counters (no cross-wave sharing: that would be a race finding)
    slot = (distinct != 0).select(tid % 4, tid % SLOTS)
    if (distinct == 0) | (tid % 64 < 4):
        Old[tid] = atomic_add(lds.c.ptr + (wave * 4 + slot), tid)
        OldMax[tid] = atomic_max(lds.m.ptr + (wave * 4 + slot), (tid * 37) % 64)
    gpu.barrier()
    if tid < 8:
        Final[tid] = lds.c[tid]
        Final[8 + tid] = lds.m[tid]


@flyc.jit
def atomics(Old: fx.Tensor, OldMax: fx.Tensor, Final: fx.Tensor, distinct: fx.Int32, stream: fx.Stream = fx.Stream(None)):
    _atomics_kernel(Old, OldMax, Final, distinct).launch(grid=(1, 1, 1), block=(THREADS, 1, 1), stream=stream)


def lane_by_lane(distinct):
    c, m = [100] * 8, [-1] * 8
    old, old_max = [-7] * THREADS, [-7] * THREADS
    for tid in range(THREADS):  # lanes in order, wave by wave
        if distinct and tid % 64 >= 4:
            continue
        a = tid // 64 * 4 + (tid % 4 if distinct else tid % SLOTS)
        old[tid], c[a] = c[a], c[a] + tid
        old_max[tid], m[a] = m[a], max(m[a], tid * 37 % 64)
    return old, old_max, c + m


@pytest.mark.parametrize("distinct", [0, 1])
def test_lds_atomic_add_and_max_return_lane_order_values(distinct):
    old = torch.full((THREADS,), -7, dtype=torch.int32)
    old_max = torch.full((THREADS,), -7, dtype=torch.int32)
    final = torch.zeros(16, dtype=torch.int32)
    report = emulate(atomics, (old, old_max, final, distinct))
    assert report.ok, report
    exp_old, exp_max, exp_final = lane_by_lane(distinct)
    assert old.tolist() == exp_old
    assert old_max.tolist() == exp_max
    assert final.tolist() == exp_final
