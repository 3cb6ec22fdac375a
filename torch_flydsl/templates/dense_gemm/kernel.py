"""The dense GEMM kernel for gfx950: ``out = alpha * (A @ B) + beta * bias[n]``.

One kernel is built per ``KernelSpec`` (tile config, dtype, operand majors, bias on/off, K tail
on/off); it serves every M, N, K, leading stride and storage offset. With ``split_k > 1`` the
K tiles of each output tile are shared out over that many workgroups, in one launch: each
writes its fp32 partial tile to a workspace and counts itself in the output tile's counter
(``arrive``: agent-scope release/acquire); the workgroup that counts last sums the partials in
split order 0, 1, ... (``reduced_tile``: deterministic whatever the arrival order), runs the
epilogue and resets the counter, so workspace and counters are reusable without a host sync.

Structure of one workgroup (``m_waves x n_waves`` wave64 waves, one ``block_m x block_n``
output tile), assembled from the GEMM toolkit (``templates/gemm``, where each piece says how
it works):

* Block order (``gemm.block_order``): ``block_idx.x`` is mapped to (pid_m, pid_n), row-major
  over N, or XCD runs and group-M when ``group_m > 0``.
* Global -> LDS (``gemm.tile_loads.TileLoads``, pipelined by ``gemm.main_loop``): gfx950's
  async buffer->LDS DMA, 16 bytes per lane per instruction, into ``stages`` XOR-swizzled LDS
  buffers per operand (``gemm.lds``), ``stages - 1`` K tiles in flight ahead of compute; the
  MMA issues the next tile's DMAs between its MFMAs. One barrier per K tile. With
  ``cfg.prefetch`` the big-tile schedule instead (``gemm.prefetch_loop``): tile kt+1's LDS
  reads go out into a second register fragment set before tile kt's MFMAs.
* LDS -> registers and MFMA (``gemm.mma.Mma``): ``ds_read_b128`` for K-contiguous operands,
  ``ds_read_b64_tr_b16`` for M/N-contiguous ones; ``v_mfma_f32_16x16x32_{bf16,f16}``, fp32
  accumulators.
* Epilogue (``gemm.epilogue``): ``alpha * acc + beta * bias[col]`` rounded once to the input
  dtype, staged through LDS, masked 16-byte row stores; nothing outside ``out[:M, :N]`` is
  ever written. Split-K writes fp32 partial tiles first (``store_partial_tile``); the last
  arriver's epilogue reads their sum instead of its own accumulators.

Tails: rows of A beyond M and columns of B beyond N are never fetched from outside the
operand: the row/column index of each DMA vector is clamped to 0 when out of range. The
values loaded there only feed accumulator rows/columns that are masked at the store. A
vector that starts in range but runs past M (column-major A) or N (row-major B) reads the
operand's padding between columns (rows), which again only feeds masked outputs, or, in the
operand's last column (row), runs past its last element: each buffer descriptor's
num_records is the operand's exact byte span, and the buffer unit range-checks a 16-byte
access per dword, returning zeros for the dwords past num_records without fetching them.
That is exact only when the span is a whole number of dwords; the eligibility gate declines
an M/N-contiguous operand whose span is not (odd M or N in 2-byte elements). K tails (the
``k_tail`` variant): each DMA whose K index is at or past K points past the operand's span
instead (``Operand.k_bound``), so it reads zeros; a K-contiguous operand needs K % 8 == 0 so
that its 16-byte vectors never straddle K (the gate).
"""

# No `from __future__ import annotations`: FlyDSL reads the kernel annotations as objects.
#
# ``build`` traces the pieces through this module's names (``block_order``, ``Mma``, ...): a
# test may plant a changed piece here and build afresh.
from dataclasses import dataclass

import flydsl.compiler as flyc
import flydsl.expr as fx
import torch
from flydsl.expr import const_expr, gpu, range_constexpr
from flydsl.expr.enum import AtomicOrdering
from flydsl.expr.llvm import atomic_add, generic_store, memory_fence

from ...runtime.recipe import kernel_builder
from ..dsl import dsl_control_flow
from ..gemm.block_order import block_order
from ..gemm.buffers import buffer_of
from ..gemm.epilogue import stage_c_tile, store_c_tile
from ..gemm.lds import lds_layout, shared_tiles
from ..gemm.main_loop import main_loop
from ..gemm.mma import Mma
from ..gemm.prefetch_loop import pipelined_mma
from ..gemm.tile_loads import Operand
from ..gemm.tile_spec import TileSpec
from .config import SPLIT_K_COUNTERS, DenseGemmConfig


@dataclass(frozen=True)
class KernelSpec(TileSpec):
    """Everything that selects one compiled kernel (a ``DenseGemmConfig`` as ``cfg``); the other
    properties are derived from it."""

    cfg: DenseGemmConfig  # the pieces read it as a ``TileConfig``; the kernel also reads key, split_k, group_m

    @property
    def name(self) -> str:
        d = {torch.bfloat16: "bf16", torch.float16: "fp16"}[self.dtype]
        tail = "_kt" if self.k_tail else ""
        return f"flydsl_dense_gemm_{d}_{self.layout}_{self.cfg.key()}_b{int(self.has_bias)}{tail}"


# ---- split-K ------------------------------------------------------------------------------------


def split_k_range(spec: KernelSpec, pid, tiles, k_tiles):
    """(output tile id, first K tile, K tile count) of workgroup ``pid`` under split-K: split
    ``s = pid // tiles`` takes K tiles ``[s * per, min((s + 1) * per, k_tiles))`` with ``per =
    ceil(k_tiles / split_k)`` (the config gate keeps every split non-empty)."""
    splits = spec.cfg.split_k
    split = pid // tiles
    per = (k_tiles + (splits - 1)) // splits
    kt0 = split * per
    rest = k_tiles - kt0
    count = (rest < per).select(rest, per)
    return pid % tiles, split, kt0, count


@dsl_control_flow
def store_partial_tile(spec: KernelSpec, mma: Mma, ws_buf, split, m0, n0, m, n):
    """Split-K: this workgroup's fp32 partial tile into the workspace's partials ``[split_k, M,
    N]`` (row-major after the counters, rows ``>= M`` and columns ``>= N`` skipped)."""
    rows = mma.thr_mma.partition_C(mma.c_rows)
    cols = mma.thr_mma.partition_C(mma.c_cols)
    ws_iter = fx.get_iter(ws_buf)
    plane = split * m
    acc = mma.acc
    for i in range_constexpr(fx.size(acc.shape).unpack()):
        g_row = m0 + fx.get_scalar(rows[i])
        g_col = n0 + fx.get_scalar(cols[i])
        if g_row < m and g_col < n:
            fx.ptr_store(acc[i], ws_iter + (SPLIT_K_COUNTERS + (plane + g_row) * n + g_col))


@dsl_control_flow
def arrive(spec: KernelSpec, ws, tile, tid, flag, elem):
    """Split-K's handoff: after this workgroup's partial tile is stored, count it in the output
    tile's counter; True in every thread of the workgroup that counted last (it alone reduces
    the tile), which also resets the counter to 0 for the next launch.

    Ordering (LLVM's memory model, AMDGPU scopes; what gfx950 runs in brackets): every wave
    releases its own partial stores at agent scope [``buffer_wbl2 sc1``, ``s_waitcnt
    vmcnt(0)``: written back past this XCD's L2 and complete] and the workgroup barrier orders
    them before thread 0's ``atomicrmw add`` (agent, acq_rel) [the same release, ``global_atomic_add
    ... sc0`` returning the old count, ``s_waitcnt vmcnt(0)``, ``buffer_inv sc1``]. The acquire
    half orders the last arriver's reads after every other workgroup's release (their RMWs
    form one release sequence on the counter). The result reaches the other waves through
    LDS (``flag``: an element of the C tile, which the epilogue overwrites only after its own
    barrier), and those waves acquire at agent scope themselves before they read the partials
    (``reduced_tile``).
    """
    memory_fence(syncscope="agent", ordering=AtomicOrdering.Release)
    gpu.barrier()
    if tid == 0:
        counter = fx.recast_iter(fx.Int32, fx.get_iter(ws)) + tile
        old = atomic_add(counter, fx.Int32(1), syncscope="agent", ordering=AtomicOrdering.AcqRel)
        fx.ptr_store(old.to(fx.Float32).to(elem), flag)
        if old == spec.cfg.split_k - 1:
            # Every split has counted: nobody touches the counter again in this launch.
            generic_store(counter, fx.Int32(0), memory_order=AtomicOrdering.Monotonic, syncscope="agent")
    gpu.barrier()
    return fx.ptr_load(flag).to(fx.Float32) == float(spec.cfg.split_k - 1)


def reduced_tile(spec: KernelSpec, ws_buf, ws_elems, m0, n0, m, n):
    """The last arriver's accumulator values: element (row, col) of the tile is ``sum_s ws[s,
    row, col]``, the splits added in order 0, 1, ... (the same fp32 sum whichever workgroup
    arrives last). Elements outside ``[M, N]`` read past the workspace's num_records: zeros,
    never fetched (they are masked at the store). Called after the wave's agent acquire."""
    plane = m * n

    def acc_at(i, r, c):
        g_row = m0 + r
        g_col = n0 + c
        inside = (g_row < m) & (g_col < n)
        off = SPLIT_K_COUNTERS + g_row * n + g_col
        total = ws_buf[inside.select(off, ws_elems)]
        for sp in range_constexpr(1, spec.cfg.split_k):
            total = total + ws_buf[inside.select(off + sp * plane, ws_elems)]
        return total

    return acc_at


# ---- the kernel ---------------------------------------------------------------------------------


@kernel_builder
def build(spec: KernelSpec):
    """The ``@flyc.jit`` launcher for ``spec``.

    Signature: ``launch(out, a, b, bias, ws, m, n, k, lda, ldb, ldc, alpha, beta, stream)`` with
    ``out``/``a``/``b``/``bias`` 1-D unit-stride views starting at each operand's first
    element (see ``operands.flat_operand``), ``ws`` the split-K workspace (read only when
    ``cfg.split_k > 1``: ``SPLIT_K_COUNTERS`` int32 counters, zero between launches, then
    ``split_k * M * N`` fp32 partials), ints for sizes/strides (elements) and floats for
    alpha/beta. One launch: grid ``(ceil(M/block_m) * ceil(N/block_n) * split_k, 1, 1)``,
    block ``(threads, 1, 1)``.
    """
    cfg = spec.cfg
    BM, BN, BK = cfg.block_m, cfg.block_n, cfg.block_k
    THREADS = cfg.threads
    SPLIT = cfg.split_k

    @flyc.kernel(name=spec.name, known_block_size=[THREADS, 1, 1])
    def dense_gemm_kernel(
        out: fx.Tensor,
        a: fx.Tensor,
        b: fx.Tensor,
        bias: fx.Tensor,
        ws: fx.Tensor,
        m: fx.Int32,
        n: fx.Int32,
        k: fx.Int32,
        lda: fx.Int32,
        ldb: fx.Int32,
        ldc: fx.Int32,
        alpha: fx.Float32,
        beta: fx.Float32,
    ):
        elem = spec.elem_type()
        tid = fx.thread_idx.x
        k_tiles = (k + (BK - 1)) // BK if const_expr(spec.k_tail) else k // BK
        pid = fx.block_idx.x
        kt0 = None
        split = None
        if const_expr(SPLIT > 1):
            tiles = ((m + (BM - 1)) // BM) * ((n + (BN - 1)) // BN)
            pid, split, kt0, k_tiles = split_k_range(spec, pid, tiles, k_tiles)
        pid_m, pid_n = block_order(pid, m, n, BM, BN, cfg.group_m)
        m0 = pid_m * BM
        n0 = pid_n * BN

        smem_a, smem_b, smem_c = shared_tiles(spec, elem)
        a_layout = lds_layout(BM, BK, spec.a_k_contig)
        b_layout = lds_layout(BN, BK, spec.b_k_contig)
        a_buf = buffer_of(a)
        b_buf = buffer_of(b)
        out_buf = buffer_of(out)
        bias_buf = None
        if const_expr(spec.has_bias):
            bias_buf = buffer_of(bias)
        a_mask = b_mask = (None, None)
        if const_expr(spec.k_tail):
            # Past K, point the DMA one element past each operand's span (num_records).
            a_mask = (k, fx.get_scalar(fx.size(fx.get_layout(a))))
            b_mask = (k, fx.get_scalar(fx.size(fx.get_layout(b))))

        op_a = Operand(a_buf, smem_a, a_layout, BM, spec.a_k_contig, spec.a_iters, m0, m, lda, None, *a_mask)
        op_b = Operand(b_buf, smem_b, b_layout, BN, spec.b_k_contig, spec.b_iters, n0, n, ldb, None, *b_mask)
        mma = pipelined_mma(spec, tid, elem, op_a, op_b, out_buf, k_tiles, kt0, Mma, main_loop)
        if const_expr(SPLIT > 1):
            ws_buf = buffer_of(ws, 4)
            store_partial_tile(spec, mma, ws_buf, split, m0, n0, m, n)
            if arrive(spec, ws, pid, tid, smem_c, elem):
                memory_fence(syncscope="agent", ordering=AtomicOrdering.Acquire)
                ws_elems = fx.get_scalar(fx.size(fx.get_layout(ws)))
                acc_at = reduced_tile(spec, ws_buf, ws_elems, m0, n0, m, n)
                stage_c_tile(spec, mma, smem_c, elem, n0, n, alpha, beta, bias_buf, acc_at)
                store_c_tile(spec, smem_c, elem, out_buf, tid, m0, n0, m, n, ldc)
        else:
            stage_c_tile(spec, mma, smem_c, elem, n0, n, alpha, beta, bias_buf)
            store_c_tile(spec, smem_c, elem, out_buf, tid, m0, n0, m, n, ldc)

    @flyc.jit
    def launch(
        out: fx.Tensor,
        a: fx.Tensor,
        b: fx.Tensor,
        bias: fx.Tensor,
        ws: fx.Tensor,
        m: fx.Int32,
        n: fx.Int32,
        k: fx.Int32,
        lda: fx.Int32,
        ldb: fx.Int32,
        ldc: fx.Int32,
        alpha: fx.Float32,
        beta: fx.Float32,
        stream: fx.Stream = fx.Stream(None),
    ):
        grid_x = ((m + BM - 1) // BM) * ((n + BN - 1) // BN) * SPLIT
        dense_gemm_kernel(out, a, b, bias, ws, m, n, k, lda, ldb, ldc, alpha, beta).launch(
            grid=(grid_x, 1, 1), block=(THREADS, 1, 1), stream=stream
        )

    return launch
