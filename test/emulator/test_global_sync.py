"""Global atomics, fences and barriers in the emulator: return values, and the happens-before
race checker (``emulator/hb.py``) on the handoff split-K uses (every workgroup publishes data,
then bumps a per-output counter; the workgroup that sees the count reach ``groups - 1`` reads
everyone's data).

The semantics are LLVM's memory model with AMDGPU's scopes (AMDGPUUsage, "Memory Model
GFX942", which gfx950 shares): a read of another workgroup's data is ordered only through a
release (a release atomic, or a release fence before the atomic) paired with an acquire (an
acquire atomic, or an acquire fence after it) whose scopes include both workgroups (agent or
system), and other waves' stores reach the releasing wave only through a barrier with
workgroup fences (``gpu.barrier``). Each planted variant drops one link and must be flagged.
What gfx950 code the correct links compile to is pinned in
``test/templates/test_dense_gemm_split_k_handoff.py``.
"""

import flydsl.compiler as flyc
import flydsl.expr as fx
import pytest
import torch
from flydsl.expr import gpu, rocdl
from flydsl.expr.enum import AtomicOrdering as Order
from flydsl.expr.llvm import atomic_add, memory_fence
from flydsl.expr.typing import Constexpr

from torch_flydsl.emulator import emulate

pytestmark = pytest.mark.emulator

THREADS = 256  # 4 waves
GROUPS = 5

# Variants: the correct protocols, then one planted bug each.
ACQ_REL_ATOMIC = "acq_rel atomic"  # gpu.barrier; thread 0: atomicrmw agent acq_rel
FENCES = "fences"  # gpu.barrier; thread 0: fence agent release, monotonic atomic, fence agent acquire
NO_RELEASE = "no release"  # gpu.barrier; thread 0: monotonic atomic, fence agent acquire
NO_ACQUIRE = "no acquire"  # gpu.barrier; thread 0: fence agent release, monotonic atomic
WORKGROUP_SCOPE = "workgroup scope"  # as ACQ_REL_ATOMIC with syncscope("workgroup")
RAW_BARRIER = "s_barrier without fences"  # rocdl.s_barrier; thread 0: acq_rel atomic
# thread 0 releases before the barrier, so the other waves' stores are not in its release
RELEASE_BEFORE_BARRIER = "thread 0's fence before the barrier"

VARIANTS = (ACQ_REL_ATOMIC, FENCES, NO_RELEASE, NO_ACQUIRE, WORKGROUP_SCOPE, RAW_BARRIER, RELEASE_BEFORE_BARRIER)
CORRECT = (ACQ_REL_ATOMIC, FENCES)


@flyc.kernel
def _handoff_kernel(Data: fx.Tensor, Count: fx.Tensor, Old: fx.Tensor, Total: fx.Tensor, variant: Constexpr[str]):
    tid = fx.thread_idx.x
    g = fx.block_idx.x
    Data[g * THREADS + tid] = (g * THREADS + tid).to(fx.Float32)
    if fx.const_expr(variant == RELEASE_BEFORE_BARRIER):
        if tid == 0:
            memory_fence(syncscope="agent", ordering=Order.Release)
    if fx.const_expr(variant == RAW_BARRIER):
        rocdl.s_barrier()
    else:
        gpu.barrier()
    if tid == 0:
        ctr = fx.get_iter(Count)
        if fx.const_expr(variant in (ACQ_REL_ATOMIC, RAW_BARRIER)):
            old = atomic_add(ctr, fx.Int32(1), syncscope="agent", ordering=Order.AcqRel)
        elif fx.const_expr(variant == WORKGROUP_SCOPE):
            old = atomic_add(ctr, fx.Int32(1), syncscope="workgroup", ordering=Order.AcqRel)
        elif fx.const_expr(variant == NO_ACQUIRE):
            memory_fence(syncscope="agent", ordering=Order.Release)
            old = atomic_add(ctr, fx.Int32(1), syncscope="agent", ordering=Order.Monotonic)
        else:
            if fx.const_expr(variant == FENCES):
                memory_fence(syncscope="agent", ordering=Order.Release)
            old = atomic_add(ctr, fx.Int32(1), syncscope="agent", ordering=Order.Monotonic)
            memory_fence(syncscope="agent", ordering=Order.Acquire)
        Old[g] = old
        if old == GROUPS - 1:
            total = fx.Float32(0.0)
            for i in range(GROUPS * THREADS):
                total = total + Data[i]
            Total[0] = total


@flyc.jit
def handoff(Data: fx.Tensor, Count: fx.Tensor, Old: fx.Tensor, Total: fx.Tensor, variant: Constexpr[str],
            stream: fx.Stream = fx.Stream(None)):
    _handoff_kernel(Data, Count, Old, Total, variant).launch(grid=(GROUPS, 1, 1), block=(THREADS, 1, 1),
                                                             stream=stream)


def run(variant, order=None):
    data = torch.zeros(GROUPS * THREADS)
    count = torch.zeros(1, dtype=torch.int32)
    old = torch.full((GROUPS,), -1, dtype=torch.int32)
    total = torch.zeros(1)
    workgroups = None if order is None else [(g, 0, 0) for g in order]
    rep = emulate(handoff, (data, count, old, total, variant), workgroups=workgroups)
    return rep, count, old, total


def races(rep):
    return [f for f in rep.findings if f.kind == "global_race"]


@pytest.mark.parametrize("variant", CORRECT)
def test_a_release_acquire_pair_orders_the_last_workgroups_reads(variant):
    rep, count, old, total = run(variant)
    assert rep.ok, rep
    n = GROUPS * THREADS
    assert total.item() == n * (n - 1) / 2
    assert count.item() == GROUPS
    # Workgroups run in id order here: each atomic returned the count before it.
    assert old.tolist() == list(range(GROUPS))


@pytest.mark.parametrize("variant", [v for v in VARIANTS if v not in CORRECT])
def test_a_missing_link_is_a_global_race(variant):
    rep, count, old, total = run(variant)
    found = races(rep)
    assert found, f"{variant}: no race reported\n{rep}"
    assert not rep.ok
    # The same numbers come out (the emulator's memory is sequentially consistent): only the
    # checker can tell.
    n = GROUPS * THREADS
    assert total.item() == n * (n - 1) / 2
    # The race is the last workgroup's read of data another workgroup wrote.
    assert all("global read by workgroup" in f.message for f in found), found


def test_a_permuted_workgroup_order_moves_the_reduction_and_the_atomics_return_the_arrival_count():
    order = [3, 0, 4, 1, 2]
    rep, count, old, total = run(ACQ_REL_ATOMIC, order)
    assert rep.ok, rep
    assert count.item() == GROUPS
    # old[g] is g's arrival position; the last to arrive (workgroup 2) read everything.
    assert [old[g].item() for g in order] == list(range(GROUPS))
    n = GROUPS * THREADS
    assert total.item() == n * (n - 1) / 2


def test_unsynchronized_writes_of_two_workgroups_to_one_location_race():
    # Data written twice (by the same index in every workgroup) without ordering: write-write.
    @flyc.kernel
    def _ww(Data: fx.Tensor):
        Data[fx.thread_idx.x] = fx.block_idx.x.to(fx.Float32)

    @flyc.jit
    def ww(Data: fx.Tensor, stream: fx.Stream = fx.Stream(None)):
        _ww(Data).launch(grid=(2, 1, 1), block=(64, 1, 1), stream=stream)

    rep = emulate(ww, (torch.zeros(64),))
    found = races(rep)
    assert found and "global write by workgroup 1" in found[0].message and "written by workgroup 0" in found[0].message
