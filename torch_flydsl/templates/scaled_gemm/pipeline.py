"""The MX scaled GEMM's software pipeline: data tiles through ``stages`` LDS buffers and E8M0
scales through two chunk slots of ``chunk`` K tiles each, with no ``vmcnt(0)`` in the steady
loop once ``stages >= 3``.

Schedule (``S`` = stages, ``C`` = chunk, ``j`` = chunk index, tile ``kt = j*C + p``):

* prologue: scale chunk 0 into slot 0, data tiles ``0 .. S-2`` into stages ``0 .. S-2``;
* steady loop, one iteration per chunk ``j = 0 .. n_chunks-2``, its ``C`` tiles unrolled: wait,
  barrier, then (only at ``p == 0``) the whole of scale chunk ``j+1`` into slot ``(j+1) % 2``
  (it held chunk ``j-1``, whose last tile every wave finished before this barrier), the data
  of tile ``kt + S - 1`` into stage ``(kt + S - 1) % S``, and the MFMAs of tile ``kt``, with
  this tile's DMAs spread between them (``interleave``);
* drain: the last chunk's ``C`` positions unrolled, data issued only where the steady pattern
  still issues it inside the chunk, the MFMAs only for the ``r = k_tiles - (n_chunks-1)*C``
  tiles that exist (runtime: K need not be a multiple of ``C`` tiles).

A DMA of a tile past the last one (the steady loop's last chunk when ``r < S - 1``) or of scale
dwords past K points past its buffer's num_records: the buffer unit fetches nothing and writes
zeros into a stage or slot part that no MFMA reads. So every wave issues the same DMAs at every
code position, and the ``s_waitcnt vmcnt`` of each position (``Schedule.steady_waits``,
``drain_waits``) is the exact count of DMAs issued after the youngest one that position needs
(vector memory loads retire in order), found by replaying the issue order on the host.
"""

from dataclasses import dataclass
from functools import cached_property

from flydsl.expr import const_expr, gpu, range_constexpr, rocdl

from ..dsl import dsl_control_flow
from ..gemm.limits import MAX_VMCNT
from .config import SCALE_SLOTS

# LLVM AMDGPU sched_group_barrier instruction classes (IntrinsicsAMDGPU.td).
GROUP_MFMA = 0x008
GROUP_VMEM = 0x010
GROUP_DS_READ = 0x100


@dataclass(frozen=True)
class IssuePattern:
    """What a pipeline's waits are computed from: ``stages``, ``chunk``, and per thread ``data``
    DMAs per K tile and ``scales`` DMAs per chunk."""

    stages: int
    chunk: int
    data: int
    scales: int


@dataclass(frozen=True)
class Schedule(IssuePattern):
    """The plain pipeline's issue pattern and its waits."""

    def drain_issues(self, p: int) -> bool:
        """Whether drain position ``p`` issues a data tile (the steady pattern, inside the chunk)."""
        return p + self.stages - 1 < self.chunk

    def _replay(self, n_chunks: int) -> list[tuple[str, int, int]]:
        """Every wait point ``(segment, position, allowed)`` of a ``n_chunks``-chunk run, in order."""
        S, C = self.stages, self.chunk
        events: list[tuple[str, int]] = [("s", 0)] + [("d", t) for t in range(S - 1)]
        count = {"s": self.scales, "d": self.data}
        points = []

        def allowed(kt: int) -> int:
            need = {("d", kt), ("s", kt // C)}
            last = max(i for i, e in enumerate(events) if e in need)
            return sum(count[e[0]] for e in events[last + 1:])

        for j in range(n_chunks - 1):
            for p in range(C):
                kt = j * C + p
                points.append(("steady", p, allowed(kt)))
                if p == 0:
                    events.append(("s", j + 1))
                events.append(("d", kt + S - 1))
        for p in range(C):
            kt = (n_chunks - 1) * C + p
            points.append(("drain", p, allowed(kt)))
            if self.drain_issues(p):
                events.append(("d", kt + S - 1))
        return points

    def _waits(self, segment: str) -> tuple[int, ...]:
        out = []
        for p in range(self.chunk):
            seen = [a for n in range(1, 5) for seg, q, a in self._replay(n) if seg == segment and q == p]
            out.append(min(min(seen), MAX_VMCNT) if seen else 0)
        return tuple(out)

    @cached_property
    def steady_waits(self) -> tuple[int, ...]:
        """``vmcnt`` at each position of the steady loop (the same for every chunk)."""
        return self._waits("steady")

    @cached_property
    def drain_waits(self) -> tuple[int, ...]:
        return self._waits("drain")


def interleave(dmas: int, mfmas: int):
    """Scheduling groups for the block just emitted: its LDS reads first, then its ``dmas``
    global->LDS DMAs one at a time between runs of its ``mfmas`` scaled MFMAs, the first DMA
    after the first run (LLVM's ``sched_group_barrier``, a hint: without it LLVM puts the DMAs in
    one burst ahead of the MFMAs)."""
    rocdl.sched_group_barrier(GROUP_DS_READ, 256, 0)
    between_mfmas(dmas, mfmas)


def between_mfmas(dmas: int, mfmas: int):
    """Scheduling groups: ``dmas`` DMAs one at a time between runs of ``mfmas`` scaled MFMAs,
    the first DMA after the first run (``sched_group_barrier``, a hint)."""
    runs = dmas + 1
    for i in range_constexpr(dmas):
        take = mfmas * (i + 1) // runs - mfmas * i // runs
        if take:
            rocdl.sched_group_barrier(GROUP_MFMA, take, 0)
        rocdl.sched_group_barrier(GROUP_VMEM, 1, 0)
    rest = mfmas - mfmas * dmas // runs
    if rest:
        rocdl.sched_group_barrier(GROUP_MFMA, rest, 0)


def mx_main_loop(sched: Schedule, loads, mma, k_tiles):
    """All ``k_tiles`` K tiles of one output tile (module docstring). ``loads.load_data(kt,
    stage)`` and ``loads.load_chunk(j, slot)`` issue DMAs; ``mma.compute(stage, slot, p, issue,
    dmas)`` accumulates one tile, calling ``issue()`` (``dmas`` DMAs per thread, or None) where
    its DMAs go. Returns with every DMA retired."""
    n_chunks = (k_tiles + sched.chunk - 1) // sched.chunk
    last = k_tiles - (n_chunks - 1) * sched.chunk
    _loop(sched.stages, sched.chunk, sched.data, sched.scales, sched.steady_waits, sched.drain_waits,
          loads.load_data, loads.load_chunk, mma.compute, n_chunks, last)


@dsl_control_flow
def _loop(S, C, data, scales, steady_waits, drain_waits, load_data, load_chunk, compute, n_chunks, last):
    # Plain functions: the control-flow rewriter would carry an object whose method is called
    # in a loop or branch as loop/branch state.
    load_chunk(0, 0)
    for s in range_constexpr(S - 1):
        load_data(s, s)
    for j in range(n_chunks - 1):
        for p in range_constexpr(C):
            kt = j * C + p
            nxt = kt + (S - 1)
            rocdl.s_waitcnt(vmcnt=steady_waits[p])
            # Everyone's DMAs for tile kt (and its chunk) are visible; everyone is done with tile
            # kt-1, so its stage and (at p == 0) the slot of chunk j-1 may be refilled.
            gpu.barrier()
            if const_expr(p == 0):
                compute(kt % S, j % SCALE_SLOTS, p,
                        lambda: (load_chunk(j + 1, (j + 1) % SCALE_SLOTS), load_data(nxt, nxt % S)),
                        scales + data)
            else:
                compute(kt % S, j % SCALE_SLOTS, p, lambda: load_data(nxt, nxt % S), data)
    jl = n_chunks - 1
    for p in range_constexpr(C):
        kt = jl * C + p
        rocdl.s_waitcnt(vmcnt=drain_waits[p])
        gpu.barrier()
        if const_expr(p + S - 1 < C):
            nxt = kt + (S - 1)
            load_data(nxt, nxt % S)
        if last > p:
            compute(kt % S, jl % SCALE_SLOTS, p, None, 0)
    rocdl.s_waitcnt(vmcnt=0)
