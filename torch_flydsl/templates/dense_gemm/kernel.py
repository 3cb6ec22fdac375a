"""The dense GEMM kernel for gfx950: ``out = alpha * (A @ B) + beta * bias[n]``.

One kernel is built per ``KernelSpec`` (tile config, dtype, operand majors, bias on/off, K tail
on/off); it serves every M, N, K, leading stride and storage offset. With ``split_k > 1`` the
K tiles of each output tile are shared out over that many workgroups, which write fp32 partial
tiles to a workspace; a second kernel sums them in split order (``reduce_partials``).

Structure of one workgroup (``m_waves x n_waves`` wave64 waves, one ``block_m x block_n``
output tile):

* Block order (``block_order``): ``block_idx.x`` is mapped to (pid_m, pid_n), row-major over
  N, or, when ``group_m > 0``, first spread into one contiguous run per XCD and then grouped
  by ``group_m`` rows of tiles (L2 reuse of B). test/emulator/test_dense_gemm_block_order.py
  specifies the order and observes it in the emulator.
* Global -> LDS (``TileLoads``, pipelined by ``main_loop``): gfx950's async buffer->LDS DMA,
  16 bytes per lane per instruction. A DMA writes lane ``l`` of a wave to ``lds_base + 16*l``,
  so LDS positions are fixed by the thread id; each lane therefore *fetches* the global vector
  that belongs at its LDS position (the XOR swizzle of the LDS layout is an involution, so
  this is the same swizzle function). ``stages`` LDS buffers per operand; ``stages - 1`` K
  tiles are in flight ahead of compute, tracked with ``s_waitcnt vmcnt`` (every thread issues
  the same number of DMAs per tile, so "at most (stages-2) tiles outstanding" means "this tile
  landed"). The loop is peeled (prologue, a branch-free steady loop that never waits for
  vmcnt(0) when stages >= 3, drain) and the dense MMA issues the next tile's DMAs between its
  MFMAs (``interleave_dmas``). One barrier per K tile.
* LDS -> registers (``Mma``): FlyDSL tiled copies matched to the MFMA operand layouts. An
  operand whose K dimension is contiguous in memory (row-major A, column-major B) sits in LDS
  K-contiguous and is read with 16-byte ``ds_read_b128``; an operand contiguous along M/N sits
  in LDS M/N-contiguous and is read with gfx950's transposing ``ds_read_b64_tr_b16``.
* MFMA ``v_mfma_f32_16x16x32_{bf16,f16}``, fp32 accumulators.
* Epilogue (``stage_c_tile``, ``store_c_tile``): ``alpha * acc + beta * bias[col]`` in fp32,
  rounded once to the input dtype and staged through a padded C tile in LDS (aliasing the A/B
  stages), then written as 16-byte row vectors; rows ``>= M`` are skipped, and a vector that
  crosses N (or an output whose leading stride is not a multiple of 8 elements) is written
  element by element with ``col < N`` masks. Nothing outside ``out[:M, :N]`` is ever written.

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
# The kernel is assembled from the module-level pieces below; FlyDSL traces Python, so each is
# an ordinary function (or small class) called while the kernel is traced, taking the
# compile-time constants (``KernelSpec``) and the traced values it needs as arguments.
# FlyDSL rewrites Python ``if``/``for`` on traced values into ``scf`` ops only in a kernel's
# own source, so the pieces that branch or loop on runtime values (``main_loop``,
# ``store_c_tile``) go through the same rewriter (``_dsl_control_flow``).
from dataclasses import dataclass
from typing import Any

import flydsl.compiler as flyc
import flydsl.expr as fx
import torch
from flydsl.compiler.ast_rewriter import ASTRewriter
from flydsl.expr import const_expr, gpu, range_constexpr, rocdl

from ...runtime.recipe import kernel_builder
from .config import (
    c_lds_row_stride,
    ELEM_BYTES,
    MMA_K,
    MMA_M,
    MMA_N,
    NUM_XCDS,
    VEC,
    WAVE_SIZE,
    DenseGemmConfig,
)


@dataclass(frozen=True)
class KernelSpec:
    """Everything that selects one compiled kernel; the other properties are derived from it."""

    cfg: DenseGemmConfig
    dtype: torch.dtype
    a_major: str  # "row" (K contiguous) or "col" (M contiguous)
    b_major: str  # "row" (N contiguous) or "col" (K contiguous)
    has_bias: bool
    # K not a multiple of block_k: the last K tile's DMAs past K read zeros (``Operand.k_bound``).
    k_tail: bool = False

    @property
    def layout(self) -> str:
        f = {"row": "n", "col": "t"}
        return f[self.a_major] + f[self.b_major]

    @property
    def name(self) -> str:
        d = {torch.bfloat16: "bf16", torch.float16: "fp16"}[self.dtype]
        tail = "_kt" if self.k_tail else ""
        return f"flydsl_dense_gemm_{d}_{self.layout}_{self.cfg.key()}_b{int(self.has_bias)}{tail}"

    # "K-contiguous" per operand, in the (rows, K) view the MMA uses: A is (M, K), B is (N, K).
    @property
    def a_k_contig(self) -> bool:
        return self.a_major == "row"

    @property
    def b_k_contig(self) -> bool:
        return self.b_major == "col"

    @property
    def a_iters(self) -> int:
        """16-byte DMA instructions per thread per A tile."""
        return self.cfg.block_m * self.cfg.block_k // VEC // self.cfg.threads

    @property
    def b_iters(self) -> int:
        return self.cfg.block_n * self.cfg.block_k // VEC // self.cfg.threads

    @property
    def loads_per_tile(self) -> int:
        return self.a_iters + self.b_iters

    @property
    def mfma_per_tile(self) -> int:
        """MFMA instructions per wave per K tile."""
        cfg = self.cfg
        return (cfg.block_m // (cfg.m_waves * MMA_M)) * (cfg.block_n // (cfg.n_waves * MMA_N)) * (cfg.block_k // MMA_K)

    @property
    def rep_m(self) -> int:
        """MFMA blocks per wave along M."""
        return self.cfg.block_m // (self.cfg.m_waves * MMA_M)

    @property
    def c_vectors(self) -> int:
        """16-byte row vectors of the output tile."""
        return self.cfg.block_m * self.cfg.block_n // VEC

    @property
    def c_store_iters(self) -> int:
        return -(-self.c_vectors // self.cfg.threads)

    def elem_type(self):
        return fx.Float16 if self.dtype == torch.float16 else fx.BFloat16


# LLVM AMDGPU sched_group_barrier instruction classes (IntrinsicsAMDGPU.td).
SCHED_MFMA = 0x008
SCHED_VMEM = 0x010
SCHED_DS_READ = 0x100


def _dsl_control_flow(fn):
    """Let ``fn`` branch and loop on traced values, as code inside a ``@flyc.kernel`` can."""
    return ASTRewriter.transform(fn)


def _swizzle_for(rows_contig: bool, rows: int, block_k: int):
    """(B, M, S) of the XOR swizzle applied to an LDS tile, or None.

    K-contiguous tiles: XOR the 16-byte chunk index (bits 3..5 of the element offset) with the
    next three offset bits, so the 8 rows a ds_read_b128 wavefront phase touches hit distinct
    banks. M/N-contiguous tiles read with ds_read_b64_tr_b16 keep 16-element groups intact
    and XOR K bits into bits 4..6.
    """
    if not rows_contig:
        return (3, 3, 3)
    if rows in (64, 128, 256):
        return (2, 4, {64: 2, 128: 3, 256: 4}[rows])
    return None


# ---- block order ------------------------------------------------------------------------------


def block_order(pid, m, n, block_m: int, block_n: int, group_m: int):
    """(pid_m, pid_n): the output tile that workgroup ``pid`` computes."""
    num_pid_m = (m + block_m - 1) // block_m
    num_pid_n = (n + block_n - 1) // block_n
    if group_m > 0:
        # MI350 hands consecutive workgroup ids round-robin to its XCDs, each with its own
        # L2: give every XCD a contiguous run of ids first (when they divide evenly), so
        # that the group-M neighbourhood below shares one L2.
        num_wg = num_pid_m * num_pid_n
        by_xcd = (pid % NUM_XCDS) * (num_wg // NUM_XCDS) + pid // NUM_XCDS
        pid = ((num_wg % NUM_XCDS) == 0).select(by_xcd, pid)
        per_group = num_pid_n * group_m
        group_id = pid // per_group
        first_m = group_id * group_m
        rest_m = num_pid_m - first_m
        group_rows = (rest_m < group_m).select(rest_m, group_m)
        in_group = pid % per_group
        pid_m = first_m + in_group % group_rows
        pid_n = in_group // group_rows
    else:
        pid_m = pid // num_pid_n
        pid_n = pid % num_pid_n
    return pid_m, pid_n


# ---- LDS and global buffers ---------------------------------------------------------------------


def shared_tiles(spec: KernelSpec, elem):
    """LDS pointers ``(a, b, c)``: ``stages`` A and B tile buffers, and the epilogue's padded
    C tile, which reuses the A/B stage buffers once the main loop is done."""
    cfg = spec.cfg
    S, BM, BN, BK = cfg.stages, cfg.block_m, cfg.block_n, cfg.block_k

    @fx.struct
    class SharedAB:
        a: fx.Array[elem, S * BM * BK, 16]
        b: fx.Array[elem, S * BN * BK, 16]

    @fx.union
    class Shared:
        ab: SharedAB
        c: fx.Array[elem, BM * c_lds_row_stride(BN), 16]

    storage = fx.SharedAllocator().allocate(Shared)
    return storage.ab.a.peek().ptr, storage.ab.b.peek().ptr, storage.c.peek().ptr


def lds_layout(rows: int, block_k: int, k_contig: bool):
    """(rows, block_k) LDS tile layout: K-contiguous or rows-contiguous, XOR-swizzled."""
    base = fx.make_ordered_layout((rows, block_k), (1, 0) if k_contig else (0, 1))
    sw = _swizzle_for(not k_contig, rows, block_k)
    if sw is None:
        return base
    return fx.make_composed_layout(fx.static(fx.SwizzleType.get(*sw)), base)


def buffer_of(t, elem_bytes: int = ELEM_BYTES):
    """A buffer view of the 1-D operand ``t`` (``elem_bytes`` per element) whose num_records
    is its exact byte span.

    The buffer unit range-checks every dword of a 16-byte access on its own and zero-fills
    the ones past num_records without fetching them, so a DMA vector that runs past the
    operand's last element reads nothing beyond it. The eligibility gate keeps the
    M/N-contiguous operands' spans whole dwords (a dword straddling the end would be zeroed,
    losing the last element).
    """
    n_bytes = fx.Int64(fx.get_scalar(fx.size(fx.get_layout(t)))) * elem_bytes
    return rocdl.make_buffer_tensor(t, num_records_bytes=n_bytes)


# ---- async global -> LDS ------------------------------------------------------------------------


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

    def __init__(self, spec: KernelSpec, tid, a: Operand, b: Operand):
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


# ---- MMA and LDS -> register copies -------------------------------------------------------------


class Mma:
    """The MFMA tiling of the workgroup's output tile, its LDS -> register copies and the fp32
    accumulator fragment (zeroed)."""

    def __init__(self, spec: KernelSpec, tid, elem, a: Operand, b: Operand, out_buf):
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


# ---- software pipeline --------------------------------------------------------------------------


def main_loop(spec: KernelSpec, loads, mma, k_tiles, kt0=None):
    """All K tiles through ``stages`` LDS buffers: ``stages - 1`` tiles in flight ahead of the
    MFMAs, one barrier per tile. Returns with every DMA retired.

    ``k_tiles`` tiles starting at tile ``kt0`` (None: 0; split-K starts later). ``loads`` and
    ``mma`` are the family's: ``loads.load_stage(kt, stage)`` issues the DMAs of K tile ``kt``
    into LDS stage ``stage``, ``mma.compute_stage(stage, issue)`` accumulates one stage and calls
    ``issue()`` (the next tile's DMAs) at the point of its instruction stream where the DMAs
    should go (the dense MMA: after its LDS reads, so the DMAs can sit between its MFMAs).

    The loop is peeled so that its steady state is one basic block with no branch but the back
    edge: the prologue fetches tiles ``0 .. S-2``; each steady iteration waits for its tile with
    ``(S-2)`` tiles still in flight (never ``vmcnt(0)`` when ``S >= 3``), fetches tile
    ``kt + S - 1`` and computes tile ``kt``; the drain computes the last ``min(S-1, k_tiles)``
    tiles, waiting for one fewer tile in flight each time. The wait counts are the same when
    ``k_tiles < S - 1``: after tile ``kt`` exactly ``k_tiles - 1 - kt`` younger tiles were
    issued.
    """
    _main_loop(spec, loads.load_stage, mma.compute_stage, k_tiles, kt0)


@_dsl_control_flow
def _main_loop(spec: KernelSpec, load_stage, compute_stage, k_tiles, kt0):
    # Plain functions: the control-flow rewriter would carry an object whose method is called
    # in a loop or branch as loop/branch state.
    S = spec.cfg.stages
    per_tile = spec.loads_per_tile

    def tile(kt):
        return kt if const_expr(kt0 is None) else kt0 + kt

    # Prologue: tiles 0..S-2 into stages 0..S-2, those that exist. Tile 0 is fetched even when
    # there is none (a grouped GEMM's empty K group): its DMAs read zeros, never used.
    for s in range_constexpr(S - 1):
        if const_expr(s == 0):
            load_stage(tile(0), 0)
        else:
            if s < k_tiles:
                load_stage(tile(s), s)
    # Steady state: in iteration kt the DMA for tile kt+S-1 goes into stage (kt+S-1) % S, which
    # held tile kt-1 and is free after the barrier.
    for kt in range(k_tiles - (S - 1)):
        # Tile kt has landed once at most the S-2 younger tiles' DMAs remain outstanding (every
        # thread issues the same number of DMAs per tile).
        rocdl.s_waitcnt(vmcnt=(S - 2) * per_tile)
        # Everyone's DMA for tile kt is visible, and everyone finished reading tile kt-1's stage.
        gpu.barrier()
        nxt = kt + (S - 1)
        compute_stage(kt % S, lambda: load_stage(tile(nxt), nxt % S))
    # Drain: the last min(S-1, k_tiles) tiles, nothing more to fetch.
    for j in range_constexpr(S - 1):
        kt = k_tiles - (S - 1) + j
        if kt >= 0:
            rocdl.s_waitcnt(vmcnt=(S - 2 - j) * per_tile)
            gpu.barrier()
            compute_stage(kt % S, None)
    rocdl.s_waitcnt(vmcnt=0)


# ---- epilogue -----------------------------------------------------------------------------------


def stage_c_tile(spec: KernelSpec, mma: Mma, smem_c, elem, n0, n, alpha, beta, bias_buf):
    """Each lane rounds ``alpha * acc + beta * bias`` once (fp32 math) into the C tile in LDS.

    The accumulator fragment is ((4, 1), rep_m, rep_n), colexicographic: 4 consecutive rows of
    one column per MFMA block, then M repeats, then N repeats, so a lane's column depends only
    on the N repeat and bias is loaded once per repeat.
    """
    cfg = spec.cfg
    gpu.barrier()  # every wave is done reading the A/B stages that the C tile overwrites
    rows = mma.thr_mma.partition_C(mma.c_rows)
    cols = mma.thr_mma.partition_C(mma.c_cols)
    s_c = fx.make_view(smem_c, fx.make_layout((cfg.block_m, cfg.block_n), (c_lds_row_stride(cfg.block_n), 1)))
    per_n_rep = 4 * spec.rep_m
    bias_by_rep = {}
    acc = mma.acc
    for i in range_constexpr(fx.size(acc.shape).unpack()):
        r = fx.get_scalar(rows[i])
        c = fx.get_scalar(cols[i])
        val = acc[i] * alpha
        if spec.has_bias:
            rep = i // per_n_rep
            if rep not in bias_by_rep:
                col = n0 + c
                safe_col = (col < n).select(col, 0)
                bias_by_rep[rep] = bias_buf[safe_col].to(fx.Float32) * beta
            val = val + bias_by_rep[rep]
        s_c[r, c] = val.to(elem)
    gpu.barrier()


@_dsl_control_flow
def store_c_tile(spec: KernelSpec, smem_c, elem, out_buf, tid, m0, n0, m, n, ldc):
    """Threads re-read the C tile as 16-byte row vectors and store them to global memory:
    whole vectors where the row is in range, all 8 columns are < N and ldc keeps them 16-byte
    aligned; element by element (masked col < N) otherwise. Nothing outside out[:M, :N]."""
    BN, THREADS = spec.cfg.block_n, spec.cfg.threads
    C_VECTORS, C_LDS_STRIDE = spec.c_vectors, c_lds_row_stride(BN)
    out_iter = fx.get_iter(out_buf)
    vec_aligned = (ldc % VEC) == 0
    for it in range_constexpr(spec.c_store_iters):
        vid = it * THREADS + tid
        r = vid // (BN // VEC)
        c = vid % (BN // VEC) * VEC
        g_row = m0 + r
        g_col = n0 + c
        in_tile = (vid < C_VECTORS) if const_expr(C_VECTORS % THREADS) else True
        if in_tile and g_row < m:
            vals = fx.ptr_load(smem_c + (r * C_LDS_STRIDE + c), result_type=fx.Vector.make_type(VEC, elem))
            g_off = g_row * ldc + g_col
            if vec_aligned and g_col + VEC <= n:
                fx.ptr_store(vals, out_iter + g_off)
            else:
                for j in range_constexpr(VEC):
                    if g_col + j < n:
                        fx.ptr_store(vals[j], out_iter + (g_off + j))


# ---- the kernel ---------------------------------------------------------------------------------


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


@_dsl_control_flow
def store_partial_tile(spec: KernelSpec, mma: Mma, ws_buf, split, m0, n0, m, n):
    """Split-K: this workgroup's fp32 partial tile into the workspace ``[split_k, M, N]``
    (row-major, rows ``>= M`` and columns ``>= N`` skipped)."""
    rows = mma.thr_mma.partition_C(mma.c_rows)
    cols = mma.thr_mma.partition_C(mma.c_cols)
    ws_iter = fx.get_iter(ws_buf)
    plane = split * m
    acc = mma.acc
    for i in range_constexpr(fx.size(acc.shape).unpack()):
        g_row = m0 + fx.get_scalar(rows[i])
        g_col = n0 + fx.get_scalar(cols[i])
        if g_row < m and g_col < n:
            fx.ptr_store(acc[i], ws_iter + ((plane + g_row) * n + g_col))


REDUCE_THREADS = 256


@_dsl_control_flow
def reduce_partials(spec: KernelSpec, ws_buf, out_buf, bias_buf, m, n, ldc, alpha, beta, elem):
    """Split-K's second pass: ``out[r, c] = alpha * sum_s ws[s, r, c] + beta * bias[c]``, the
    splits summed in order 0, 1, ... (deterministic), rounded once to the output dtype. One
    thread per output element, consecutive threads on consecutive columns."""
    idx = fx.block_idx.x * REDUCE_THREADS + fx.thread_idx.x
    r = idx // n
    c = idx % n
    if r < m:
        plane = m * n
        off = r * n + c
        total = ws_buf[off]
        for sp in range_constexpr(1, spec.cfg.split_k):
            total = total + ws_buf[off + sp * plane]
        val = total * alpha
        if const_expr(spec.has_bias):
            val = val + bias_buf[c].to(fx.Float32) * beta
        fx.ptr_store(val.to(elem), fx.get_iter(out_buf) + (r * ldc + c))


@kernel_builder
def build(spec: KernelSpec):
    """The ``@flyc.jit`` launcher for ``spec``.

    Signature: ``launch(out, a, b, bias, ws, m, n, k, lda, ldb, ldc, alpha, beta, stream)`` with
    ``out``/``a``/``b``/``bias`` 1-D unit-stride views starting at each operand's first
    element (see ``launcher.flat_operand``), ``ws`` the fp32 split-K workspace (``split_k * M *
    N`` elements; read only when ``cfg.split_k > 1``), ints for sizes/strides (elements) and
    floats for alpha/beta. Grid ``(ceil(M/block_m) * ceil(N/block_n) * split_k, 1, 1)``, block
    ``(threads, 1, 1)``; with split-K a second launch, ``ceil(M * N / 256)`` workgroups of 256
    threads, reduces the workspace into ``out``.
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
        loads = TileLoads(spec, tid, op_a, op_b)
        mma = Mma(spec, tid, elem, op_a, op_b, out_buf)
        main_loop(spec, loads, mma, k_tiles, kt0)
        if const_expr(SPLIT > 1):
            store_partial_tile(spec, mma, buffer_of(ws, 4), split, m0, n0, m, n)
        else:
            stage_c_tile(spec, mma, smem_c, elem, n0, n, alpha, beta, bias_buf)
            store_c_tile(spec, smem_c, elem, out_buf, tid, m0, n0, m, n, ldc)

    @flyc.kernel(name=spec.name + "_reduce", known_block_size=[REDUCE_THREADS, 1, 1])
    def split_k_reduce_kernel(
        out: fx.Tensor,
        bias: fx.Tensor,
        ws: fx.Tensor,
        m: fx.Int32,
        n: fx.Int32,
        ldc: fx.Int32,
        alpha: fx.Float32,
        beta: fx.Float32,
    ):
        bias_buf = None
        if const_expr(spec.has_bias):
            bias_buf = buffer_of(bias)
        reduce_partials(spec, buffer_of(ws, 4), buffer_of(out), bias_buf, m, n, ldc, alpha, beta,
                        spec.elem_type())

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
        if const_expr(SPLIT > 1):
            reduce_x = (m * n + (REDUCE_THREADS - 1)) // REDUCE_THREADS
            split_k_reduce_kernel(out, bias, ws, m, n, ldc, alpha, beta).launch(
                grid=(reduce_x, 1, 1), block=(REDUCE_THREADS, 1, 1), stream=stream
            )

    return launch
