"""LDS -> registers and the MFMA: the tiling of the workgroup's output tile over its waves.

FlyDSL tiled copies matched to the MFMA operand layouts read the A/B tiles from LDS
(``ds_read_b128`` for K-contiguous tiles, gfx950's transposing ``ds_read_b64_tr_b16`` for
M/N-contiguous ones; see ``lds``) into ``v_mfma_f32_16x16x32_{bf16,f16}``, with fp32
accumulators. ``Mma.compute_stage`` issues the next tile's DMAs between its MFMAs
(``interleave_dmas``).
"""

import flydsl.expr as fx
from flydsl.expr import range_constexpr, rocdl

from .geometry import MMA_K, MMA_M, MMA_N
from .tile_loads import Operand
from .tile_spec import TileSpec

# LLVM AMDGPU sched_group_barrier instruction classes (IntrinsicsAMDGPU.td).
SCHED_MFMA = 0x008
SCHED_VMEM = 0x010
SCHED_DS_READ = 0x100


class Mma:
    """The MFMA tiling of the workgroup's output tile, its LDS -> register copies and the fp32
    accumulator fragment (zeroed)."""

    def __init__(self, spec: TileSpec, tid, elem, a: Operand, b: Operand, out_buf):
        cfg = spec.cfg
        BM, BN = cfg.block_m, cfg.block_n
        self.spec, self.a, self.b = spec, a, b
        mma_atom = fx.make_mma_atom(rocdl.MFMA(MMA_M, MMA_N, MMA_K, elem))
        self.tiled_mma = fx.make_tiled_mma(
            mma_atom, fx.make_layout((cfg.m_waves, cfg.n_waves, 1), (cfg.n_waves, 1, 0))
        )
        self.thr_mma = self.tiled_mma.thr_slice(tid)
        read_k = fx.make_copy_atom(fx.UniversalCopy128b(), elem)
        read_tr = fx.make_copy_atom(rocdl.cdna4.LDSReadTrans16_64b(), elem)
        self.a_read = read_k if a.k_contig else read_tr
        self.b_read = read_k if b.k_contig else read_tr
        self.thr_copy_a = fx.make_tiled_copy_A(self.a_read, self.tiled_mma).get_slice(tid)
        self.thr_copy_b = fx.make_tiled_copy_B(self.b_read, self.tiled_mma).get_slice(tid)

        self.frag_a = self.thr_mma.make_fragment_A(fx.make_view(a.smem, a.layout))
        self.frag_b = self.thr_mma.make_fragment_B(fx.make_view(b.smem, b.layout))
        self.frag_a_dst = self.thr_copy_a.retile(self.frag_a)
        self.frag_b_dst = self.thr_copy_b.retile(self.frag_b)
        # Row and column of every accumulator element, for the epilogue.
        self.c_rows = fx.make_view(0, fx.make_layout((BM, BN), (1, 0)))
        self.c_cols = fx.make_view(0, fx.make_layout((BM, BN), (0, 1)))
        # make_fragment_C only reads the shape of its argument; any (BM, BN) memref will do.
        self.acc = self.thr_mma.make_fragment_C(
            fx.make_view(fx.get_iter(out_buf), fx.make_layout((BM, BN), (1, BM)))
        )
        self.acc.fill(0.0)

    def compute_stage(self, stage, issue=None):
        """acc += the A/B tiles in LDS stage ``stage``; ``issue()`` (the next tile's DMAs, or
        None) goes after the LDS reads, so that its DMAs can sit between the MFMAs."""
        cfg = self.spec.cfg
        BM, BN, BK = cfg.block_m, cfg.block_n, cfg.block_k
        s_a = self.thr_copy_a.partition_S(fx.make_view(self.a.smem + stage * (BM * BK), self.a.layout))
        s_b = self.thr_copy_b.partition_S(fx.make_view(self.b.smem + stage * (BN * BK), self.b.layout))
        for kk in range_constexpr(BK // MMA_K):
            fx.copy(self.a_read, s_a[None, None, kk], self.frag_a_dst[None, None, kk])
            fx.copy(self.b_read, s_b[None, None, kk], self.frag_b_dst[None, None, kk])
        if issue is not None:
            issue()
        for kk in range_constexpr(BK // MMA_K):
            fx.gemm(self.tiled_mma, self.acc, self.frag_a[None, None, kk], self.frag_b[None, None, kk],
                    self.acc)
        if issue is not None:
            interleave_dmas(self.spec.loads_per_tile, self.spec.mfma_per_tile)


def interleave_dmas(dmas: int, mfmas: int):
    """Scheduling groups for the basic block just emitted: the LDS reads first, then its
    ``dmas`` global->LDS DMAs spread evenly between its ``mfmas`` MFMAs (LLVM's
    ``sched_group_barrier``; a hint, not a semantic barrier). Without it LLVM issues the DMAs in
    one burst ahead of the MFMAs, where their issue cycles and address arithmetic are not
    hidden behind matrix work."""
    rocdl.sched_group_barrier(SCHED_DS_READ, 256, 0)
    spread_dmas(dmas, mfmas)


def spread_dmas(dmas: int, mfmas: int):
    """Scheduling groups: ``dmas`` DMAs spread evenly between ``mfmas`` MFMAs. With fewer DMAs
    than MFMAs: a run of ``mfmas // (dmas + 1)`` MFMAs before each DMA, the rest of the MFMAs
    after the last. With at least as many DMAs as MFMAs (narrow tiles: a one-wave 16x16 tile
    loads two DMAs per MFMA), the gaps between MFMAs take several DMAs each, the earlier gaps
    one more, so that every DMA sits between two MFMAs."""
    if dmas >= mfmas >= 2:
        gaps = mfmas - 1
        per_gap = [dmas // gaps + (1 if g < dmas % gaps else 0) for g in range(gaps)]
        for g in range_constexpr(gaps):
            rocdl.sched_group_barrier(SCHED_MFMA, 1, 0)
            rocdl.sched_group_barrier(SCHED_VMEM, per_gap[g], 0)
        rocdl.sched_group_barrier(SCHED_MFMA, 1, 0)
        return
    per = max(1, mfmas // (dmas + 1))
    left = mfmas
    for _ in range_constexpr(dmas):
        take = min(per, left)
        if take:
            rocdl.sched_group_barrier(SCHED_MFMA, take, 0)
            left -= take
        rocdl.sched_group_barrier(SCHED_VMEM, 1, 0)
    if left:
        rocdl.sched_group_barrier(SCHED_MFMA, left, 0)
