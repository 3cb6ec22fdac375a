"""The grouped GEMM kernel for gfx950: ``out[offs[g-1]:offs[g]] = A[offs[g-1]:offs[g]] @ B[g]``.

One kernel per ``KernelSpec`` (tile config, dtype, B's per-group major, form) serves every T,
N, K, group count, group sizes and strides. Forms: groups split A's rows by ``offs`` (the MoE
forward; K a multiple of block_k), stacked batches (``batched``: group ends are ``(g+1) * M``,
no offsets read) and groups split K by ``offs`` (``along_k``, the weight gradient; every
group's K tail is masked).

Schedule: persistent over (group, tile) pairs, from the GEMM toolkit: the launch depends only
on shapes, never on the offsets (``gemm.persistent``: the tile bound and the grid), and each
workgroup walks the offsets forward once as it takes its tiles (``gemm.group_walk``).

Per tile, the toolkit's pieces, as in the dense kernel: async buffer->LDS DMA into ``stages``
LDS buffers, MFMA ``16x16x32``, the padded-LDS epilogue; ``main_loop`` or, with
``cfg.prefetch``, the big-tile register-prefetch pipeline (``gemm.prefetch_loop``). A group's rows are the tile's row
range: A rows at or past the group's end are clamped (to row 0, as dense clamps
rows past M; they only feed masked outputs), and the store writes only rows below the group's
end, so a tile never reads into a neighbour's output or writes one. B's DMA offsets carry the
group's base ``g * ldbg``. A barrier separates one tile's epilogue (which reads the C tile
aliasing the A/B stages) from the next tile's first DMAs.
"""

# No `from __future__ import annotations`: FlyDSL reads the kernel annotations as objects.
from dataclasses import dataclass

import flydsl.compiler as flyc
import flydsl.expr as fx
import torch
from flydsl.expr import const_expr, gpu

from ...runtime.recipe import kernel_builder
from ..gemm.buffers import buffer_of
from ..gemm.epilogue import stage_c_tile, store_c_tile
from ..gemm.group_walk import OFFS_BYTES, advance, advance_k, group_end, group_tiles
from ..gemm.lds import lds_layout, shared_tiles
from ..gemm.main_loop import main_loop
from ..gemm.mma import Mma
from ..gemm.persistent import tile_upper_bound
from ..gemm.prefetch_loop import pipelined_mma
from ..gemm.tile_loads import Operand
from ..gemm.tile_spec import TileSpec
from .config import GroupedGemmConfig


@dataclass(frozen=True)
class KernelSpec:
    cfg: GroupedGemmConfig
    dtype: torch.dtype
    b_major: str  # each group's [K, N]: "row" (N contiguous) or "col" (K contiguous)
    batched: bool = False  # 3-D A: group g is rows [g * group_rows, (g + 1) * group_rows) (no offs)
    along_k: bool = False  # 2-D x 2-D: groups split K by offs; A M-contiguous, B N-contiguous

    @property
    def tile(self) -> TileSpec:
        """One tile as the toolkit's pieces read it: row-major A (M-contiguous along K groups),
        this B, no bias."""
        return TileSpec(self.cfg, self.dtype, "col" if self.along_k else "row", self.b_major, False)

    @property
    def name(self) -> str:
        d = {torch.bfloat16: "bf16", torch.float16: "fp16"}[self.dtype]
        form = "batched" if self.batched else ("ksplit" if self.along_k else "ragged")
        return f"flydsl_grouped_gemm_{form}_{d}_n{'t' if self.b_major == 'col' else 'n'}_{self.cfg.key()}"


@kernel_builder
def build(spec: KernelSpec):
    """The ``@flyc.jit`` launcher for ``spec``.

    Signature: ``launch(out, a, b, offs, tokens, n, k, groups, group_rows, lda, ldb, ldbg, ldc,
    workgroups, stream)`` with ``out``/``a``/``b``/``offs`` 1-D unit-stride views from each
    operand's first element (``operands.flat_operand``), ints for sizes and strides
    (elements; ``ldb`` is the leading stride of one group's matrix, ``ldbg`` the stride between
    groups) and the persistent grid size ``workgroups`` (>= 1). Block ``(threads, 1, 1)``.

    * Groups split rows: ``tokens`` = T. Batched (3-D A, ``spec.batched``): A and the output are
      read as ``[G * group_rows, ...]`` (their batches stacked) and ``offs`` is not read.
    * Groups split K (``spec.along_k``, ``out[g] = A[:, K rows of g] @ B[K rows of g]``):
      ``tokens`` = M (output rows per group), ``k`` = T (all groups' K), ``lda`` = A's K stride
      (A is [M, T], M-contiguous), ``ldb`` = B's row stride (B is [T, N] row-major), ``ldc`` = the
      output's row stride ([G, M, N], groups stacked). Output tile (g, m, n) is number
      ``g * tiles_per_group + m * n_tiles + n``; each group's K loop runs ``ceil(K rows /
      block_k)`` tiles from its first K row, the tail's K rows reading zeros from both operands
      (``Operand.k_bound``). An empty group's output is zero.
    """
    cfg = spec.cfg
    d = spec.tile
    BM, BN, BK = cfg.block_m, cfg.block_n, cfg.block_k
    THREADS = cfg.threads

    def one_tile(tid, smem, op_bufs, g, m0, row_bound, out_row0, out_bound, n0, n, k_tiles, lda, ldb, b_base, ldc,
                 k_mask=None):
        """One output tile: the toolkit's main loop and epilogue. A's rows from ``m0`` (below
        ``row_bound``) go to output rows from ``out_row0`` (below ``out_bound``); ``k_mask``:
        ``(k_start, k_len, a_span, b_span)`` when groups split K."""
        smem_a, smem_b, smem_c = smem
        a_buf, b_buf, out_buf = op_bufs
        elem = d.elem_type()
        a_layout = lds_layout(BM, BK, d.a_k_contig)
        b_layout = lds_layout(BN, BK, d.b_k_contig)
        if k_mask is None:
            op_a = Operand(a_buf, smem_a, a_layout, BM, d.a_k_contig, d.a_iters, m0, row_bound, lda)
            op_b = Operand(b_buf, smem_b, b_layout, BN, d.b_k_contig, d.b_iters, n0, n, ldb, b_base)
        else:
            k_start, k_len, a_span, b_span = k_mask
            op_a = Operand(a_buf, smem_a, a_layout, BM, False, d.a_iters, m0, row_bound, lda, k_start * lda,
                                 k_len, a_span)
            op_b = Operand(b_buf, smem_b, b_layout, BN, False, d.b_iters, n0, n, ldb, k_start * ldb, k_len,
                                 b_span)
        # Along K, a group with no K row runs no tile: the prologue's DMAs read zeros only and
        # the accumulators stay zero.
        mma = pipelined_mma(d, tid, elem, op_a, op_b, out_buf, k_tiles, None, Mma, main_loop)
        stage_c_tile(d, mma, smem_c, elem, n0, n, fx.Float32(1.0), fx.Float32(0.0), None)
        store_c_tile(d, smem_c, elem, out_buf, tid, out_row0, n0, out_bound, n, ldc)

    @flyc.kernel(name=spec.name, known_block_size=[THREADS, 1, 1])
    def grouped_gemm_kernel(
        out: fx.Tensor,
        a: fx.Tensor,
        b: fx.Tensor,
        offs: fx.Tensor,
        tokens: fx.Int32,
        n: fx.Int32,
        k: fx.Int32,
        groups: fx.Int32,
        group_rows: fx.Int32,
        lda: fx.Int32,
        ldb: fx.Int32,
        ldbg: fx.Int32,
        ldc: fx.Int32,
        workgroups: fx.Int32,
    ):
        tid = fx.thread_idx.x
        smem = shared_tiles(d, d.elem_type())
        op_bufs = (buffer_of(a), buffer_of(b), buffer_of(out))
        offs_buf = None
        if const_expr(not spec.batched):
            offs_buf = buffer_of(offs, OFFS_BYTES)
        n_tiles = (n + BN - 1) // BN
        g = fx.Int32(0)
        # Each tile gets the thread id as ``tid + (t >> 31)``: t (the tile, >= 0) makes it 0, but
        # LLVM cannot tell, so it computes the tile's per-lane addresses per tile instead of
        # hoisting them out of the persistent loop, where they stayed live across every K loop
        # (42 VGPRs of grp_m256n256k32_w2x4_s4_g0 with row-major experts: 246 -> 204).
        if const_expr(spec.along_k):
            # Element offsets at each operand's span end: a DMA there is out of range, reads zeros.
            spans = (fx.get_scalar(fx.size(fx.get_layout(a))), fx.get_scalar(fx.size(fx.get_layout(b))))
            per_group = (tokens + BM - 1) // BM * n_tiles
            k_start = fx.Int32(0)
            k_end = group_end(offs_buf, g, k_start, groups, k, 0)
            for t in range(fx.block_idx.x, groups * per_group, workgroups):
                g, k_start, k_end = advance_k(offs_buf, t, g, k_start, k_end, groups, k, per_group)
                gpu.barrier()  # the previous tile's epilogue is done with the LDS the DMAs overwrite
                local = t - g * per_group
                m0 = local // n_tiles * BM
                k_len = k_end - k_start
                one_tile(tid + (t >> 31), smem, op_bufs, g, m0, tokens, g * tokens + m0, g * tokens + tokens,
                         local % n_tiles * BN, n, (k_len + BK - 1) // BK, lda, ldb, None, ldc,
                         (k_start, k_len, spans[0], spans[1]))
        else:
            seen = fx.Int32(0)
            start = fx.Int32(0)
            end = group_end(offs_buf, g, start, groups, tokens, group_rows)
            tiles = group_tiles(g, start, end, groups, n_tiles, BM)
            for t in range(fx.block_idx.x, tile_upper_bound(tokens, groups, n, BM, BN), workgroups):
                g, seen, start, end, tiles = advance(offs_buf, t, g, seen, start, end, tiles, groups, tokens,
                                                     group_rows, n_tiles, BM)
                if g < groups:
                    gpu.barrier()  # the previous tile's epilogue is done with the LDS the DMAs overwrite
                    local = t - seen
                    m0 = start + local // n_tiles * BM
                    one_tile(tid + (t >> 31), smem, op_bufs, g, m0, end, m0, end, local % n_tiles * BN, n, k // BK, lda, ldb,
                             g * ldbg, ldc)

    @flyc.jit
    def launch(
        out: fx.Tensor,
        a: fx.Tensor,
        b: fx.Tensor,
        offs: fx.Tensor,
        tokens: fx.Int32,
        n: fx.Int32,
        k: fx.Int32,
        groups: fx.Int32,
        group_rows: fx.Int32,
        lda: fx.Int32,
        ldb: fx.Int32,
        ldbg: fx.Int32,
        ldc: fx.Int32,
        workgroups: fx.Int32,
        stream: fx.Stream = fx.Stream(None),
    ):
        grouped_gemm_kernel(out, a, b, offs, tokens, n, k, groups, group_rows, lda, ldb, ldbg, ldc, workgroups).launch(
            grid=(workgroups, 1, 1), block=(THREADS, 1, 1), stream=stream
        )

    return launch
