"""Global -> LDS: the async DMAs of one K tile of A and B into an LDS stage.

gfx950's async buffer->LDS DMA moves 16 bytes per lane per instruction. A DMA writes lane
``l`` of a wave to ``lds_base + 16*l``, so LDS positions are fixed by the thread id; each lane
therefore *fetches* the global vector that belongs at its LDS position (the XOR swizzle of the
LDS layout is an involution, so this is the same swizzle function). Rows past ``row_bound``
are clamped to row 0 (they only feed outputs the epilogue masks); ``main_loop`` pipelines the
tiles.
"""

from dataclasses import dataclass
from typing import Any

import flydsl.expr as fx
from flydsl.expr import const_expr, range_constexpr, rocdl

from .geometry import VEC
from .limits import WAVE_SIZE
from .tile_spec import TileSpec


@dataclass(frozen=True)
class Operand:
    """One input as its DMA sees it, in the (rows, K) view: rows ``row0 ..`` of ``rows``
    (``row_bound`` = M or N), leading stride ``ld``, staged into ``smem`` with ``layout``."""

    buf: Any
    smem: Any
    layout: Any
    rows: int
    k_contig: bool
    iters: int  # DMA instructions per thread per tile
    row0: Any
    row_bound: Any
    ld: Any
    base: Any = None  # element offset of this operand's matrix in ``buf`` (a grouped GEMM's group)
    # K masking: K indices at or past ``k_bound`` read zeros, by pointing their DMA at element
    # ``k_oob``, past the buffer's num_records (range-checked). A K-contiguous operand's 8-element
    # vectors lie wholly below or at/after ``k_bound`` only when it is a multiple of 8 (the gate).
    k_bound: Any = None
    k_oob: Any = None


class TileLoads:
    """Issues the async DMAs of one K tile of A and B into an LDS stage."""

    def __init__(self, spec: TileSpec, tid, a: Operand, b: Operand):
        self.spec, self.tid, self.a, self.b = spec, tid, a, b
        self.dma = fx.make_copy_atom(rocdl.cdna4.BufferLoadAsyncLDS128b(), 128)
        # LDS byte offset of this wave's first lane; DMA destinations must be wave-uniform.
        self.wave_elems = rocdl.readfirstlane(
            fx.Int32.ir_type, fx.Int32(tid // WAVE_SIZE * WAVE_SIZE * VEC)
        )
        self.unit = fx.make_layout(1, 1)

    def load_tile(self, op: Operand, lds_stage, kt):
        """DMA one (rows x BK) tile starting at (row0, kt*BK) into an LDS stage buffer."""
        BK, THREADS, tid, rows = self.spec.cfg.block_k, self.spec.cfg.threads, self.tid, op.rows
        lds_ptr = lds_stage + fx.Int32(self.wave_elems)
        k0 = kt * BK
        for i in range_constexpr(op.iters):
            vid = i * THREADS + tid
            if op.k_contig:
                # Unswizzled coordinate of this lane's LDS slot, then the swizzled offset =
                # the logical element that lives at that slot.
                slot_r = vid // (BK // VEC)
                slot_c = vid % (BK // VEC) * VEC
                logical = fx.get_scalar(fx.crd2idx((slot_r, slot_c), op.layout))
                r = logical // BK
                c = logical % BK
                g_row = op.row0 + r
                g_row = (g_row < op.row_bound).select(g_row, 0)
                offset = g_row * op.ld + (k0 + c)
            else:
                slot_r = vid % (rows // VEC) * VEC
                slot_c = vid // (rows // VEC)
                logical = fx.get_scalar(fx.crd2idx((slot_r, slot_c), op.layout))
                r = logical % rows
                c = logical // rows
                g_row = op.row0 + r
                g_row = (g_row < op.row_bound).select(g_row, 0)
                offset = (k0 + c) * op.ld + g_row
            if const_expr(op.base is not None):
                offset = offset + op.base
            if const_expr(op.k_bound is not None):
                offset = (k0 + c < op.k_bound).select(offset, op.k_oob)
            src = fx.make_view(fx.get_iter(op.buf) + offset, self.unit)
            dst = fx.make_view(lds_ptr + i * THREADS * VEC, self.unit)
            fx.copy_atom_call(self.dma, src, dst)

    def load_stage(self, kt, stage):
        """K tile ``kt`` of A and B into LDS stage ``stage``."""
        cfg = self.spec.cfg
        self.load_tile(self.a, self.a.smem + stage * (cfg.block_m * cfg.block_k), kt)
        self.load_tile(self.b, self.b.smem + stage * (cfg.block_n * cfg.block_k), kt)
