"""The register-prefetch pipeline (``prefetch_main_loop``): the big-tile schedule, where no MFMA
waits behind a barrier for LDS reads.

``main_loop`` reads a K tile from LDS right after the barrier that makes it visible and then
multiplies it, so every barrier is followed by a wait on LDS reads (``lgkmcnt``) while the MFMA
pipe idles. Here the fragments are double-buffered in registers (``PrefetchMma``: two A/B
fragment sets): the iteration that multiplies tile ``kt`` (already in registers, slot
``kt % 2``) first issues the LDS reads of tile ``kt + 1`` into the other slot, so its MFMAs
start right after the barrier and the reads run under them.

Per iteration ``kt`` (S = ``stages`` LDS buffers, tile ``j`` lives in buffer ``j % S``)::

    s_waitcnt vmcnt((S-2) * dmas)   this thread's DMAs of tile kt+1 have landed
    s_waitcnt lgkmcnt(0)            this wave's reads of tile kt (issued an iteration ago) are done
    s_barrier                       everyone's tile kt+1 is visible; nobody reads buffer kt % S
    LDS reads of tile kt+1          -> fragment slot (kt+1) % 2
    DMAs of tile kt+S               -> buffer kt % S, spread between the MFMAs
    MFMAs of tile kt                <- fragment slot kt % 2

A buffer is refilled as soon as its tile is in registers (one iteration earlier than in
``main_loop``), so S buffers keep S-1 tiles in flight across the wait: never ``vmcnt(0)`` when
S >= 3. The loop is unrolled by two (the slots alternate statically); an odd tile count runs
one more iteration after it. Every iteration issues the same DMAs, so the waits are the same
constant everywhere: past the last tile the DMAs re-fetch tile ``k_tiles - 1`` (in range,
never read) and the last iteration reads a landed buffer it never uses. That costs S extra
tile fetches per output tile (L2 hits) and no branch in the steady loop. The prologue fetches
tiles 0..S-1 and reads tile 0; the loop returns with every DMA and LDS read retired.
"""

import flydsl.expr as fx
from flydsl.expr import const_expr, gpu, range_constexpr, rocdl

from ..dsl import dsl_control_flow
from .geometry import MMA_K, MMA_N
from .main_loop import PipelineSpec, main_loop
from .mma import SCHED_DS_READ, SCHED_MFMA, Mma, spread_dmas
from .tile_loads import Operand, TileLoads
from .tile_spec import TileSpec


class PrefetchMma(Mma):
    """``Mma`` with a second A/B register fragment set: ``read(stage, slot)`` issues the LDS
    reads of a stage into fragment slot 0 or 1, ``multiply(slot, dmas)`` accumulates that
    slot's fragments: the next tile's LDS reads, issued just before, go one per MFMA and its
    ``dmas`` DMAs between the MFMAs after them (``interleave_reads_and_dmas``)."""

    def __init__(self, spec, tid, elem, a, b, out_buf):
        super().__init__(spec, tid, elem, a, b, out_buf)
        self.frags = [(self.frag_a, self.frag_b, self.frag_a_dst, self.frag_b_dst)]
        frag_a = self.thr_mma.make_fragment_A(fx.make_view(a.smem, a.layout))
        frag_b = self.thr_mma.make_fragment_B(fx.make_view(b.smem, b.layout))
        self.frags.append((frag_a, frag_b, self.thr_copy_a.retile(frag_a), self.thr_copy_b.retile(frag_b)))

    def read(self, stage, slot: int):
        cfg = self.spec.cfg
        BM, BN, BK = cfg.block_m, cfg.block_n, cfg.block_k
        _, _, dst_a, dst_b = self.frags[slot]
        s_a = self.thr_copy_a.partition_S(fx.make_view(self.a.smem + stage * (BM * BK), self.a.layout))
        s_b = self.thr_copy_b.partition_S(fx.make_view(self.b.smem + stage * (BN * BK), self.b.layout))
        for kk in range_constexpr(BK // MMA_K):
            fx.copy(self.a_read, s_a[None, None, kk], dst_a[None, None, kk])
            fx.copy(self.b_read, s_b[None, None, kk], dst_b[None, None, kk])

    def multiply(self, slot: int, dmas: int):
        frag_a, frag_b, _, _ = self.frags[slot]
        for kk in range_constexpr(self.spec.cfg.block_k // MMA_K):
            fx.gemm(self.tiled_mma, self.acc, frag_a[None, None, kk], frag_b[None, None, kk], self.acc)
        interleave_reads_and_dmas(self.reads_per_tile, dmas, self.spec.mfma_per_tile)

    @property
    def reads_per_tile(self) -> int:
        """LDS read instructions per wave per K tile: one ``ds_read_b128`` per 16 x 32 operand
        block of a K-contiguous operand, two ``ds_read_b64_tr_b16`` of an M/N-contiguous one."""
        spec = self.spec
        rep_n = spec.cfg.block_n // (spec.cfg.n_waves * MMA_N)
        per_k = spec.rep_m * (1 if spec.a_k_contig else 2) + rep_n * (1 if spec.b_k_contig else 2)
        return per_k * (spec.cfg.block_k // MMA_K)


def interleave_reads_and_dmas(reads: int, dmas: int, mfmas: int):
    """Scheduling groups for the prefetch loop's tile: one MFMA first (the pipe restarts right
    after the barrier), then the next tile's ``reads`` LDS reads one per MFMA (spread over the
    LDS port instead of a burst of every wave at once), then the ``dmas`` DMAs spread between
    the remaining MFMAs (LLVM's ``sched_group_barrier``: a hint)."""
    left = mfmas
    rocdl.sched_group_barrier(SCHED_MFMA, 1, 0)
    left -= 1
    for _ in range_constexpr(reads):
        rocdl.sched_group_barrier(SCHED_DS_READ, 1, 0)
        if left:
            rocdl.sched_group_barrier(SCHED_MFMA, 1, 0)
            left -= 1
    spread_dmas(dmas, left)


def prefetch_main_loop(spec: PipelineSpec, loads, mma: PrefetchMma, k_tiles, kt0=None):
    """All ``k_tiles`` K tiles (from tile ``kt0``; None: 0) through ``stages`` LDS buffers and
    two register fragment slots (the module docstring gives the schedule). ``k_tiles`` may be
    0 (a grouped GEMM's empty K group: the DMAs read tile 0, nothing is multiplied)."""
    _prefetch_loop(spec, loads.load_stage, mma.read, mma.multiply, k_tiles, kt0)


@dsl_control_flow
def _prefetch_loop(spec: PipelineSpec, load_stage, read, multiply, k_tiles, kt0):
    # Plain functions, as in main_loop: the rewriter would carry a called object as loop state.
    S = spec.cfg.stages
    per_tile = spec.loads_per_tile
    last = k_tiles - 1
    last = (last > 0).select(last, 0)

    def fetch(j):
        """The DMAs of tile j (past the last tile: the last one again) into buffer j % S."""
        t = (j < last).select(j, last)
        load_stage(t if const_expr(kt0 is None) else kt0 + t, j % S)

    def step(kt, slot: int):
        """Multiply tile kt (fragment slot ``slot``), reading tile kt+1 and fetching tile kt+S."""
        rocdl.s_waitcnt(vmcnt=(S - 2) * per_tile)
        rocdl.s_waitcnt(lgkmcnt=0)
        gpu.barrier()
        read((kt + 1) % S, 1 - slot)
        fetch(kt + S)
        multiply(slot, per_tile)

    for s in range_constexpr(S):
        fetch(fx.Int32(s))
    rocdl.s_waitcnt(vmcnt=(S - 1) * per_tile)
    gpu.barrier()
    read(0, 0)
    for p in range(k_tiles // 2):
        step(2 * p, 0)
        step(2 * p + 1, 1)
    if k_tiles % 2 == 1:
        step(last, 0)
    rocdl.s_waitcnt(vmcnt=0)
    rocdl.s_waitcnt(lgkmcnt=0)


def pipelined_mma(spec: TileSpec, tid, elem, a: Operand, b: Operand, out_buf, k_tiles, kt0=None, plain_mma=Mma,
                  plain_loop=main_loop) -> Mma:
    """The tile's MMA after all its K tiles: through ``prefetch_main_loop`` when the config says
    ``prefetch`` (the dense and grouped configs' field), else ``plain_mma`` through
    ``plain_loop`` (a kernel passes its own module's names, which a test may plant)."""
    loads = TileLoads(spec, tid, a, b)
    if getattr(spec.cfg, "prefetch", 0):
        pmma = PrefetchMma(spec, tid, elem, a, b, out_buf)
        prefetch_main_loop(spec, loads, pmma, k_tiles, kt0)
        return pmma
    mma = plain_mma(spec, tid, elem, a, b, out_buf)
    plain_loop(spec, loads, mma, k_tiles, kt0)
    return mma
