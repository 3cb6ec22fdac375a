"""The MX scaled GEMM's ping-pong pipeline (configs with ``pingpong=1``, key suffix ``_pp``): a
big tile whose two LDS stages are all that fits (MXFP8 256 x 256: 64 KiB per stage), run
without the MFMA pipe waiting on LDS reads and without ``vmcnt(0)``.

Wave groups. The waves form two groups of ``waves / 2`` (group 0 the first half). Group 1
passes one barrier more before its loop, so its n-th loop barrier is group 0's (n+1)-th: the
groups run one segment apart. Each K tile is four barrier-delimited segments per wave:

* ``Ra``: LDS reads of half 0 of the wave's A blocks (tile rows ``[0, BM/2)``), all its B
  blocks and their scale words, into registers;
* ``Ma``: the scaled MFMAs of half 0;
* ``Rb``: the reads of A half 1 (rows ``[BM/2, BM)``) and its scale words;
* ``Mb``: the MFMAs of half 1.

While one group reads, the other multiplies, so each SIMD (one wave of each group) runs MFMAs
while the other wave's LDS reads are served. A wave holds its B blocks and one half of its A
blocks (with 128 fp32 accumulators per lane, MXFP8 256 x 256 with 8 waves fits 256 VGPRs; the
whole A set would not).

Fetching. Tile ``kt`` lives in stage ``kt % 2`` (data and scales: ``chunk == 1``, slot = stage),
A as two halves (``A0``, ``A1``), each with its own scale slot part. Group 0 fetches A, group 1
B, each with half the threads. With ``H(n)`` the n-th barrier release (group 0's segment
``4kt + {0,1,2,3}`` = Ra/Ma/Rb/Mb of tile kt starts at ``H(4kt + ...)``, group 1's one later)::

    group 0, tile kt (stage s = kt % 2)         group 1, tile kt
    barrier H(4kt)                              barrier H(4kt+1)
      A1 DMAs of tile kt+1 -> stage 1-s           Ra: reads
      Ra: reads; lgkmcnt(0)                       lgkmcnt(0)
    barrier H(4kt+1)                            barrier H(4kt+2)
      Ma: MFMAs; vmcnt(2a)  A1 of tile kt         B DMAs of tile kt+2 -> stage s, between
    barrier H(4kt+2)                              Ma: MFMAs
      A0 DMAs of tile kt+2 -> stage s           barrier H(4kt+3)
      Rb: reads; lgkmcnt(0)                       Rb: reads; lgkmcnt(0)
    barrier H(4kt+3)                              vmcnt(b)  B of tile kt+1
      Mb: MFMAs; vmcnt(2a)  A0 of tile kt+1     barrier H(4kt+4)
                                                  Mb: MFMAs

(``a``: DMAs per thread of one A half with its scales; ``b``: of one B tile.)

Why each step is enough:

- WAR: B and A0 of tile kt are last read in group 1's Ra(kt), ending at H(4kt+2); A1 in its
  Rb(kt), ending at H(4kt+4); every read segment ends with ``lgkmcnt(0)``. A0 and B of tile kt+2
  are fetched at H(4kt+2) (group 0's Rb(kt), group 1's Ma(kt)), A1 of tile kt+1 at H(4kt) into
  stage 1-s, whose A1 (tile kt-1) was last read before H(4kt).
- RAW: A0 and B of tile kt+1 are first read at H(4kt+4), A1 at H(4kt+6). Group 0 waits for its
  A0 of tile kt+1 at the end of Mb(kt) (before H(4kt+4)): issued at H(4kt-2), followed by A1 of
  tile kt+1 and A0 of tile kt+2, hence ``vmcnt(2a)``; for A1 of tile kt at the end of Ma(kt)
  (before H(4kt+2)), followed by A0 of tile kt+1 and A1 of tile kt+1: ``vmcnt(2a)``. Group 1
  waits for its B of tile kt+1 (issued at H(4kt-2)) at the end of Rb(kt) (before H(4kt+4)),
  followed by B of tile kt+2: ``vmcnt(b)``. So every fetch has six segments, one and a half K
  tiles of MFMAs, to land, and no wait is ``vmcnt(0)``.
- The prologue fetches A0, A1 of tile 0 and A0 of tile 1 (group 0) and B of tiles 0 and 1
  (group 1), and waits for tile 0's A0 / B. DMAs past the last tile point past the operands'
  num_records (zeros into stage parts nobody reads again). Group 0 passes one barrier after its
  loop, so both groups meet at the epilogue's first barrier with every DMA retired.
"""

from dataclasses import replace

import flydsl.expr as fx
from flydsl.expr import gpu, range_constexpr, rocdl

from ..dsl import dsl_control_flow
from ..gemm.geometry import UNIT_BYTES
from ..gemm.limits import DMA_BYTES
from .config import WAVE_SIZE
from .pipeline import between_mfmas

STAGES = 2


def _segment_barrier():
    """``s_barrier`` that nothing is scheduled across (``sched_barrier(0)`` on both sides): LLVM
    would otherwise move MFMAs, which touch no memory, over it and out of their segment."""
    rocdl.sched_barrier(0)
    gpu.barrier()
    rocdl.sched_barrier(0)


class HalfTileMma:
    """The ping-pong loop's LDS reads and MFMAs on a ``ScaledMma`` (whose accumulators the
    epilogue reads): ``read(stage, h)`` returns this lane's registers for A half ``h`` (with
    the B blocks when ``h == 0``); ``multiply(h, regs, b_regs)`` accumulates half ``h`` (its
    ``regs`` from ``read(stage, h)``, ``b_regs`` the B part that ``read(stage, 0)`` returned)."""

    def __init__(self, mma, sa_halves, sb):
        self.mma, self.cfg, self.spec = mma, mma.spec.cfg, mma.spec
        self.sa_halves, self.sb = sa_halves, sb
        self.half_blocks = mma.rep_m // 2

    def read(self, stage, h: int):
        m, cfg, spec = self.mma, self.cfg, self.spec
        a_stage, b_stage, a_rows, b_rows = m.tile_views(stage)
        half_rows = cfg.block_m // 2
        blocks = range(h * self.half_blocks, (h + 1) * self.half_blocks)
        # Scale words: A half h's slot part starts at its first row (delta counted from it).
        sa = [m._read_scales(self.sa_halves[h], stage, (a_rows[i][0], a_rows[i][1] - h * half_rows), 0)
              for i in blocks]
        av = [[m._read_operand(a_stage, m.a.layout, a_rows[i], spec.a_fmt, kk) for i in blocks]
              for kk in range(cfg.steps)]
        if h:
            return sa, av, None
        sb = [m._read_scales(self.sb, stage, r, 0) for r in b_rows]
        bv = [[m._read_operand(b_stage, m.b.layout, r, spec.b_fmt, kk) for r in b_rows] for kk in range(cfg.steps)]
        return sa, av, (sb, bv)

    def multiply(self, h: int, a_regs, b_regs):
        sa, av, _ = a_regs
        sb, bv = b_regs
        for kk in range_constexpr(self.cfg.steps):
            for j in range_constexpr(self.mma.rep_n):
                for i in range_constexpr(self.half_blocks):
                    self.mma.accumulate(h * self.half_blocks + i, j, kk, av[kk][i], bv[kk][j], sa[i], sb[j])

    @property
    def mfma_per_half(self) -> int:
        return self.half_blocks * self.mma.rep_n * self.cfg.steps


def mx_pingpong(spec, tid, op_a, op_b, sc_a, sc_b, mma, k_tiles, stage_loads):
    """All ``k_tiles`` (>= 1) K tiles of one output tile into ``mma``'s accumulators (module
    docstring); the operands as the plain loop's (whole tile, all threads); ``stage_loads``: the
    kernel's ``StageLoads`` class. Returns with every DMA retired."""
    cfg, tb = spec.cfg, spec.tb
    group_waves = cfg.waves // 2
    threads = group_waves * WAVE_SIZE
    local = tid % threads
    half_rows = cfg.block_m // 2
    q = tb.chunk_dwords
    half_slot = -(-half_rows * q // threads) * threads  # dwords of one A half's scale slot part
    a_iters = half_rows * tb.a_row // DMA_BYTES // threads
    b_iters = cfg.block_n * tb.b_row // DMA_BYTES // threads
    sa_iters = half_slot // threads
    sb_iters = -(-cfg.block_n * q // threads)
    b_op = replace(op_b, iters=b_iters)
    sb = replace(sc_b, iters=sb_iters)
    a_halves, sa_halves = [], []
    for h in range(2):
        a_halves.append(replace(op_a, rows=half_rows, iters=a_iters, row0=op_a.row0 + h * half_rows,
                                smem=op_a.smem + h * half_rows * tb.a_row // UNIT_BYTES))
        sa_halves.append(replace(sc_a, iters=sa_iters, row0=sc_a.row0 + h * half_rows, smem=sc_a.smem + h * half_slot))
    loads = [stage_loads(spec, local, a_halves[h], b_op, sa_halves[h], sb, k_tiles, waves=group_waves) for h in range(2)]
    hm = HalfTileMma(mma, sa_halves, sb)
    group = rocdl.readfirstlane(fx.Int32.ir_type, fx.Int32(tid // threads))
    _loop(loads[0].load_a, loads[1].load_a, loads[0].load_b, hm.read, hm.multiply, hm.mfma_per_half,
          a_iters + sa_iters, b_iters + sb_iters, group, k_tiles)


@dsl_control_flow
def _loop(load_a0, load_a1, load_b, read, multiply, mfmas, a, b, group, k_tiles):
    # Plain functions, as in pipeline._loop.
    pairs = k_tiles // STAGES

    def a_tile(kt, s: int):
        _segment_barrier()
        load_a1(kt + 1, 1 - s)
        ra = read(s, 0)
        rocdl.s_waitcnt(lgkmcnt=0)
        _segment_barrier()
        multiply(0, ra, ra[2])
        rocdl.sched_barrier(0)  # the wait after the MFMAs, not among them
        rocdl.s_waitcnt(vmcnt=2 * a)
        _segment_barrier()
        load_a0(kt + 2, s)
        rb = read(s, 1)
        rocdl.s_waitcnt(lgkmcnt=0)
        _segment_barrier()
        multiply(1, rb, ra[2])
        rocdl.sched_barrier(0)
        rocdl.s_waitcnt(vmcnt=2 * a)

    def b_tile(kt, s: int):
        _segment_barrier()
        ra = read(s, 0)
        rocdl.s_waitcnt(lgkmcnt=0)
        _segment_barrier()
        load_b(kt + 2, s)
        multiply(0, ra, ra[2])
        between_mfmas(b, mfmas)  # the B DMAs between the MFMAs
        _segment_barrier()
        rb = read(s, 1)
        rocdl.s_waitcnt(lgkmcnt=0)
        rocdl.s_waitcnt(vmcnt=b)
        _segment_barrier()
        multiply(1, rb, ra[2])

    if group == 0:
        load_a0(fx.Int32(0), 0)
        load_a1(fx.Int32(0), 0)
        load_a0(fx.Int32(1), 1)
        rocdl.s_waitcnt(vmcnt=2 * a)
        for q in range(pairs):
            for s in range_constexpr(STAGES):
                a_tile(q * STAGES + s, s)
        if k_tiles > pairs * STAGES:
            a_tile(k_tiles - 1, 0)
        _segment_barrier()
    else:
        load_b(fx.Int32(0), 0)
        load_b(fx.Int32(1), 1)
        rocdl.s_waitcnt(vmcnt=b)
        _segment_barrier()
        for q in range(pairs):
            for s in range_constexpr(STAGES):
                b_tile(q * STAGES + s, s)
        if k_tiles > pairs * STAGES:
            b_tile(k_tiles - 1, 0)
    rocdl.s_waitcnt(vmcnt=0)
