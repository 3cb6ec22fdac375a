"""The MXFP8 grouped GEMM kernel for gfx950: the grouped family's persistent schedule with the
scaled family's tile.

``out[rows of g] = (A[rows of g] * 2^sa[rows of g]) @ (B[g] * 2^sb[g])`` with A ``[T, K]``
row-major, B ``[G, K, N]`` column-major per group (stored ``[G, N, K]``), E8M0 scales ``sa``
``[>= T, K/32]`` and ``sb`` ``[G, N, K/32]`` row-major (unswizzled: ROCm's ``NO_SWIZZLE``), int32
``offs`` read on the device.

* Schedule: the grouped kernel's, from the GEMM toolkit (persistent workgroups over (group,
  tile) pairs, ``gemm.persistent``; the offsets walked forward once per workgroup,
  ``gemm.group_walk``; a barrier between tiles).
* Tile: ``scaled_gemm.kernel``'s (data and scale DMAs into LDS stages, the scaled MFMA with the
  hardware's K order and opsel-selected E8M0 bytes, the toolkit's epilogue; see there). A's and
  its scales' rows are the group's rows (clamped past the group's end; masked at the store),
  B's data and scales carry the group's base offsets.
"""

# No `from __future__ import annotations`: FlyDSL reads the kernel annotations as objects.
from dataclasses import dataclass

import flydsl.compiler as flyc
import flydsl.expr as fx
import torch
from flydsl.expr import gpu

from ...runtime.recipe import kernel_builder
from ..gemm.buffers import buffer_of
from ..gemm.epilogue import stage_c_tile, store_c_tile
from ..gemm.geometry import UNIT_BYTES
from ..gemm.group_walk import OFFS_BYTES, advance, group_end, group_tiles
from ..gemm.lds import lds_layout
from ..gemm.persistent import tile_upper_bound
from ..scaled_gemm import kernel as scaled
from ..scaled_gemm.config import SCALE_DMA_BYTES, ScaledGemmConfig
from ..scaled_gemm.pipeline import mx_main_loop
from ..scaled_gemm.problem import MxFormat


@dataclass(frozen=True)
class KernelSpec:
    cfg: ScaledGemmConfig
    a_fmt: MxFormat
    b_fmt: MxFormat
    out_dtype: torch.dtype

    @property
    def scaled(self) -> scaled.KernelSpec:
        """The scaled kernel's spec for one tile (no bias)."""
        return scaled.KernelSpec(self.cfg, self.a_fmt, self.b_fmt, self.out_dtype, False)

    @property
    def name(self) -> str:
        out = "fp16" if self.out_dtype == torch.float16 else "bf16"
        return f"flydsl_scaled_grouped_gemm_{self.a_fmt.name}x{self.b_fmt.name}_{out}_{self.cfg.key()}"


@kernel_builder
def build(spec: KernelSpec):
    """The ``@flyc.jit`` launcher for ``spec``.

    Signature: ``launch(out, a, b, sa, sb, offs, tokens, n, k, groups, lda, ldb, ldbg, ldsa,
    ldsb, ldsbg, ldc, workgroups, stream)``: 1-D unit-stride views from each operand's first
    element (``a``/``b`` as int16, ``sa``/``sb`` as int32, ``offs`` int32, ``out`` in the output
    dtype); sizes in values (K logical); ``lda``/``ldb``/``ldbg`` in 2-byte units,
    ``ldsa``/``ldsb``/``ldsbg`` in dwords, ``ldc`` in elements; ``workgroups`` the persistent
    grid. Block ``(threads, 1, 1)``.
    """
    sk = spec.scaled
    cfg, tb = spec.cfg, sk.tb
    BM, BN, BK = cfg.block_m, cfg.block_n, cfg.block_k
    THREADS = cfg.threads
    UNIT = UNIT_BYTES

    def one_tile(tid, smem, bufs, spans, g, start, end, local, n_tiles, n, k, lda, ldb, ldbg, ldsa, ldsb, ldsbg, ldc):
        """Tile ``local`` of group ``g``: the scaled kernel's main loop and epilogue."""
        smem_a, smem_b, smem_sa, smem_sb, smem_c = smem
        a_buf, b_buf, sa_buf, sb_buf, out_buf = bufs
        m0 = start + local // n_tiles * BM
        n0 = local % n_tiles * BN
        a_layout = lds_layout(BM, tb.a_row // UNIT, True)
        b_layout = lds_layout(BN, tb.b_row // UNIT, True)
        a_span, b_span, sa_span, sb_span = spans
        k_tiles = k // BK
        op_a = scaled.data_operand(a_buf, smem_a, a_layout, BM, tb.a_dma, m0, end, lda, k_tiles, tb.a_row // UNIT,
                                   a_span)
        op_b = scaled.data_operand(b_buf, smem_b, b_layout, BN, tb.b_dma, n0, n, ldb, k_tiles, tb.b_row // UNIT,
                                   b_span, g * ldbg)
        sc_a = scaled.ScaleOperand(sa_buf, smem_sa, tb.scale_slots_a, tb.sa_dma, m0, end, ldsa, sa_span)
        sc_b = scaled.ScaleOperand(sb_buf, smem_sb, tb.scale_slots_b, tb.sb_dma, n0, n, ldsb, sb_span, g * ldsbg)
        loads = scaled.StageLoads(sk, tid, op_a, op_b, sc_a, sc_b, k_tiles)
        mma = scaled.ScaledMma(sk, tid, op_a, op_b, sc_a, sc_b, out_buf)
        mx_main_loop(sk.schedule, loads, mma, k_tiles)
        epilogue = sk.tile_view(tb.a_row)  # same output tile and waves
        stage_c_tile(epilogue, mma, smem_c, sk.out_elem(), n0, n, 1.0, 1.0, None)
        store_c_tile(epilogue, smem_c, sk.out_elem(), out_buf, tid, m0, n0, end, n, ldc)

    @flyc.kernel(name=spec.name, known_block_size=[THREADS, 1, 1])
    def scaled_grouped_gemm_kernel(
        out: fx.Tensor,
        a: fx.Tensor,
        b: fx.Tensor,
        sa: fx.Tensor,
        sb: fx.Tensor,
        offs: fx.Tensor,
        tokens: fx.Int32,
        n: fx.Int32,
        k: fx.Int32,
        groups: fx.Int32,
        lda: fx.Int32,
        ldb: fx.Int32,
        ldbg: fx.Int32,
        ldsa: fx.Int32,
        ldsb: fx.Int32,
        ldsbg: fx.Int32,
        ldc: fx.Int32,
        workgroups: fx.Int32,
    ):
        tid = fx.thread_idx.x
        smem = scaled.shared_tiles(sk)
        bufs = (buffer_of(a, UNIT), buffer_of(b, UNIT), buffer_of(sa, SCALE_DMA_BYTES),
                buffer_of(sb, SCALE_DMA_BYTES), buffer_of(out, spec.out_dtype.itemsize))
        spans = (scaled.span_of(a), scaled.span_of(b), scaled.span_of(sa), scaled.span_of(sb))
        offs_buf = buffer_of(offs, OFFS_BYTES)
        n_tiles = (n + BN - 1) // BN
        g = fx.Int32(0)
        seen = fx.Int32(0)
        start = fx.Int32(0)
        end = group_end(offs_buf, g, start, groups, tokens, 0)
        tiles = group_tiles(g, start, end, groups, n_tiles, BM)
        for t in range(fx.block_idx.x, tile_upper_bound(tokens, groups, n, BM, BN), workgroups):
            g, seen, start, end, tiles = advance(offs_buf, t, g, seen, start, end, tiles, groups, tokens, 0,
                                                 n_tiles, BM)
            if g < groups:
                gpu.barrier()  # the previous tile's epilogue is done with the LDS the DMAs overwrite
                one_tile(tid, smem, bufs, spans, g, start, end, t - seen, n_tiles, n, k, lda, ldb, ldbg, ldsa, ldsb,
                         ldsbg, ldc)

    @flyc.jit
    def launch(
        out: fx.Tensor,
        a: fx.Tensor,
        b: fx.Tensor,
        sa: fx.Tensor,
        sb: fx.Tensor,
        offs: fx.Tensor,
        tokens: fx.Int32,
        n: fx.Int32,
        k: fx.Int32,
        groups: fx.Int32,
        lda: fx.Int32,
        ldb: fx.Int32,
        ldbg: fx.Int32,
        ldsa: fx.Int32,
        ldsb: fx.Int32,
        ldsbg: fx.Int32,
        ldc: fx.Int32,
        workgroups: fx.Int32,
        stream: fx.Stream = fx.Stream(None),
    ):
        scaled_grouped_gemm_kernel(out, a, b, sa, sb, offs, tokens, n, k, groups, lda, ldb, ldbg, ldsa, ldsb, ldsbg,
                                   ldc, workgroups).launch(grid=(workgroups, 1, 1), block=(THREADS, 1, 1), stream=stream)

    return launch
