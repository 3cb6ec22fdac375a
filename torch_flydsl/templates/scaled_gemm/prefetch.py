"""The MX scaled GEMM's register-prefetch pipeline (configs with ``prefetch=1``, key suffix
``_rp``): the big-tile schedule, where no scaled MFMA waits behind a barrier for LDS reads.

``pipeline.mx_main_loop`` reads a K tile (data and scale words) from LDS right after the barrier
that makes it visible and then multiplies it, so every barrier is followed by a wait on LDS
reads while the MFMA pipe idles. Here each lane's operands and scale words live in two register
sets (``PrefetchScaledMma``): the iteration that multiplies tile ``kt`` (already in set
``kt % 2``) first issues the LDS reads of tile ``kt + 1`` into the other set, so its MFMAs
start right after the barrier and the reads run under them. The dense family's
``gemm.prefetch_loop`` does the same for bf16/fp16; this one adds the scale chunks.

Per iteration ``kt`` (S = ``stages`` data buffers, tile ``j`` in buffer ``j % S``; C = ``chunk``
K tiles per scale chunk, chunk ``c`` in slot ``c % 2``)::

    s_waitcnt vmcnt(w[kt % C])   this thread's DMAs of tile kt+1 and of its scale chunk have landed
    s_waitcnt lgkmcnt(0)         this wave's reads of tile kt (issued an iteration ago) are done
    s_barrier                    everyone's tile kt+1 is visible; nobody reads buffer kt % S, nor
                                 (when kt ends chunk c = kt // C) slot c % 2
    LDS reads of tile kt+1       -> register set (kt+1) % 2, one after each of the first MFMAs
    DMAs of tile kt+S            -> buffer kt % S                 spread between the MFMAs
    (kt % C == C-1) chunk c+2    -> slot c % 2                    (before the data when C < S-1:
                                                                  the one read sooner goes first)
    MFMAs of tile kt             <- register set kt % 2

Why each step is enough:

- RAW (DMA -> read): each thread waits for its own DMAs of tile kt+1 and of chunk
  ``(kt+1) // C``; every thread issues the same DMAs at every code position, so the barrier then
  publishes everyone's. The waits are exact counts: ``PrefetchSchedule`` replays the issue order
  on the host (vector memory loads retire in order) and keeps, per position ``kt % C``, the
  fewest DMAs issued after the youngest one that position needs.
- WAR (read -> next DMA): buffer ``kt % S`` held tile kt, which every wave read in iteration
  kt-1 and waited for (``lgkmcnt(0)``) before this barrier; the slot of chunk c held tiles
  ``cC .. cC+C-1``, the last of which (kt) was read in iteration kt-1. So S buffers keep S-1
  data tiles in flight across the wait (never ``vmcnt(0)`` when S >= 3), and a chunk is
  refilled C tiles before its first tile is read.
- Registers: the reads of tile kt+1 write the other set, so the MFMAs of tile kt depend on
  nothing issued after the barrier. The loop is unrolled by ``lcm(2, C)`` tiles, so the set and
  the position in the chunk are static; ``k_tiles`` need not be a multiple of it (the last
  ``k_tiles mod lcm(2, C)`` tiles run unrolled after the loop, each behind a runtime test).
- Constant waits: past the last tile the DMAs fetch tile ``k_tiles - 1`` again and past the last
  chunk chunk ``n_chunks - 1`` again (in range, landed like any other, never multiplied), and
  the last iteration reads a landed buffer it never uses. Every iteration therefore issues the
  same DMAs and the waits depend only on ``kt % C``: no drain, no branch in the steady loop.
  The cost: S extra data tile fetches and one or two extra chunk fetches per output tile (L2
  hits).

The prologue fetches chunk 0, tile 0, chunk 1 and tiles 1..S-1, then reads tile 0; the loop
returns with every DMA and LDS read retired (the epilogue's C tile aliases the buffers).
"""

from dataclasses import dataclass
from functools import cached_property

import flydsl.expr as fx
from flydsl.expr import const_expr, gpu, range_constexpr, rocdl

from ..dsl import dsl_control_flow
from ..gemm.limits import MAX_VMCNT
from ..gemm.prefetch_loop import interleave_reads_and_dmas
from .config import SCALE_SLOTS
from .pipeline import IssuePattern

# Replayed tiles per schedule: past the prologue's warm-up every position repeats its wait.
_REPLAY_TILES = 64


@dataclass(frozen=True)
class PrefetchSchedule(IssuePattern):
    """The prefetch loop's issue pattern and its waits."""

    @property
    def scales_first(self) -> bool:
        """Whether a tile's scale chunk DMAs go before its data DMAs: the chunk is first read C
        tiles later, the data S-1 tiles later; the one needed sooner goes first."""
        return self.chunk < self.stages - 1

    @property
    def unroll(self) -> int:
        """Tiles per loop iteration: the register set (2) and the chunk position (C) both static."""
        return self.chunk if self.chunk % 2 == 0 else 2 * self.chunk

    def _events(self):
        """The prologue's DMAs in issue order, then per tile kt the wait point and its DMAs."""
        S, C = self.stages, self.chunk
        events = [("s", 0), ("d", 0), ("s", 1)] + [("d", t) for t in range(1, S)]
        count = {"s": self.scales, "d": self.data}

        def allowed(need) -> int:
            last = max(i for i, e in enumerate(events) if e in need)
            return sum(count[e[0]] for e in events[last + 1:])

        first = allowed({("d", 0), ("s", 0)})
        points = []
        for kt in range(_REPLAY_TILES):
            points.append((kt % C, allowed({("d", kt + 1), ("s", (kt + 1) // C)})))
            issued = [("d", kt + S)]
            if kt % C == C - 1:
                issued.append(("s", kt // C + 2))
            events += issued[::-1] if self.scales_first else issued
        return first, points

    @cached_property
    def first_wait(self) -> int:
        """``vmcnt`` before the prologue's read of tile 0."""
        return min(self._events()[0], MAX_VMCNT)

    @cached_property
    def waits(self) -> tuple[int, ...]:
        """``vmcnt`` at each chunk position of the loop (the same for every chunk)."""
        _, points = self._events()
        return tuple(min(min(a for q, a in points if q == p), MAX_VMCNT) for p in range(self.chunk))


class PrefetchScaledMma:
    """A ``ScaledMma`` with two register sets: ``read(stage, slot, p, reg)`` issues the LDS
    reads of the tile in data buffer ``stage`` (tile ``p`` of the chunk in scale ``slot``) into
    set ``reg``; ``multiply(reg, dmas)`` accumulates set ``reg``, the reads issued just before
    one per MFMA and the ``dmas`` DMAs between the MFMAs after them. The accumulators stay the
    wrapped ``ScaledMma``'s (the epilogue reads them there)."""

    def __init__(self, mma):
        self.mma, self.spec, self.cfg = mma, mma.spec, mma.spec.cfg
        spec = self.spec
        self.a_words = 8 if spec.a_fmt.bits == 8 else 4
        self.b_words = 8 if spec.b_fmt.bits == 8 else 4
        steps, rm, rn = self.cfg.steps, mma.rep_m, mma.rep_n
        self.a_base = 0
        self.b_base = steps * rm * self.a_words
        self.sa_base = self.b_base + steps * rn * self.b_words
        self.sb_base = self.sa_base + rm
        words = self.sb_base + rn
        self.regs = [fx.make_rmem_tensor(words, fx.Int32) for _ in range(2)]

    @property
    def reads_per_tile(self) -> int:
        """LDS reads per lane and tile: one per 16-byte operand run (two per FP8 operand, one per
        FP4) and one scale word per MFMA row/column block."""
        m = self.mma
        runs = (m.rep_m * (self.a_words // 4) + m.rep_n * (self.b_words // 4)) * self.cfg.steps
        return runs + m.rep_m + m.rep_n

    @property
    def mfma_per_tile(self) -> int:
        return self.mma.rep_m * self.mma.rep_n * self.cfg.steps

    def _store(self, reg, base: int, value, width: int):
        for e in range_constexpr(width):
            reg[base + e] = value[e]

    def read(self, stage, slot, p: int, reg: int):
        m, cfg, spec = self.mma, self.cfg, self.spec
        r = self.regs[reg]
        a_stage, b_stage, a_rows, b_rows = m.tile_views(stage)
        for i in range_constexpr(m.rep_m):
            r[self.sa_base + i] = m._read_scales(m.sa, slot, a_rows[i], p)
        for j in range_constexpr(m.rep_n):
            r[self.sb_base + j] = m._read_scales(m.sb, slot, b_rows[j], p)
        for kk in range_constexpr(cfg.steps):
            for i in range_constexpr(m.rep_m):
                v = fx.Vector(m._read_operand(a_stage, m.a.layout, a_rows[i], spec.a_fmt, kk))
                self._store(r, self.a_base + (kk * m.rep_m + i) * self.a_words, v, self.a_words)
            for j in range_constexpr(m.rep_n):
                v = fx.Vector(m._read_operand(b_stage, m.b.layout, b_rows[j], spec.b_fmt, kk))
                self._store(r, self.b_base + (kk * m.rep_n + j) * self.b_words, v, self.b_words)

    def multiply(self, reg: int, dmas: int):
        self.accumulate_set(reg)
        interleave_reads_and_dmas(self.reads_per_tile, dmas, self.mfma_per_tile)

    def accumulate_set(self, reg: int):
        """acc += the tile in register set ``reg`` (its scaled MFMAs, no scheduling hint)."""
        m, cfg = self.mma, self.cfg
        r = self.regs[reg]

        def vec(base: int, width: int):
            return fx.Vector.from_elements([r[base + e] for e in range(width)], fx.Int32)

        for kk in range_constexpr(cfg.steps):
            for j in range_constexpr(m.rep_n):
                bv = vec(self.b_base + (kk * m.rep_n + j) * self.b_words, self.b_words)
                for i in range_constexpr(m.rep_m):
                    av = vec(self.a_base + (kk * m.rep_m + i) * self.a_words, self.a_words)
                    m.accumulate(i, j, kk, av, bv, r[self.sa_base + i], r[self.sb_base + j])


def mx_prefetch_loop(sched: PrefetchSchedule, loads, mma: PrefetchScaledMma, k_tiles):
    """All ``k_tiles`` (>= 1) K tiles of one output tile (the module docstring gives the
    schedule); returns with every DMA and LDS read retired."""
    n_chunks = (k_tiles + sched.chunk - 1) // sched.chunk
    _loop(sched.stages, sched.chunk, sched.unroll, sched.data, sched.scales, sched.waits, sched.first_wait,
          sched.scales_first, loads.load_data, loads.load_chunk, mma.read, mma.multiply, k_tiles, n_chunks)


@dsl_control_flow
def _loop(S, C, U, data, scales, waits, first_wait, scales_first, load_data, load_chunk, read, multiply, k_tiles,
          n_chunks):
    # Plain functions, as in pipeline._loop: the rewriter would carry a called object as loop state.
    last = k_tiles - 1
    last_chunk = n_chunks - 1

    def fetch_data(j):
        """Tile j's DMAs (past the last tile: the last one again) into buffer j % S."""
        load_data((j < last).select(j, last), j % S)

    def fetch_chunk(c):
        """Chunk c's DMAs (past the last chunk: the last one again) into slot c % 2."""
        load_chunk((c < last_chunk).select(c, last_chunk), c % SCALE_SLOTS)

    def step(kt, p: int):
        """Multiply tile kt (position p of the unrolled loop), reading tile kt+1, fetching tile
        kt+S and, where tile kt ends its chunk, chunk kt // C + 2."""
        rocdl.s_waitcnt(vmcnt=waits[p % C])
        rocdl.s_waitcnt(lgkmcnt=0)
        gpu.barrier()
        nxt = kt + 1
        read(nxt % S, (nxt // C) % SCALE_SLOTS, (p + 1) % C, (p + 1) % 2)
        if const_expr(p % C == C - 1):
            if const_expr(scales_first):
                fetch_chunk(kt // C + 2)
                fetch_data(kt + S)
            else:
                fetch_data(kt + S)
                fetch_chunk(kt // C + 2)
            multiply(p % 2, data + scales)
        else:
            fetch_data(kt + S)
            multiply(p % 2, data)

    fetch_chunk(fx.Int32(0))
    fetch_data(fx.Int32(0))
    fetch_chunk(fx.Int32(1))
    for s in range_constexpr(1, S):
        fetch_data(fx.Int32(s))
    rocdl.s_waitcnt(vmcnt=first_wait)
    gpu.barrier()
    read(0, 0, 0, 0)
    for q in range(k_tiles // U):
        for p in range_constexpr(U):
            step(q * U + p, p)
    base = (k_tiles // U) * U
    rem = k_tiles - base
    for r in range_constexpr(U - 1):
        if rem > r:
            step(base + r, r)
    rocdl.s_waitcnt(vmcnt=0)
    rocdl.s_waitcnt(lgkmcnt=0)
