"""The MX scaled GEMM kernel for gfx950: ``out = (A * 2^sa) @ (B * 2^sb) [+ bias[n]]``.

One kernel is built per ``KernelSpec`` (tile config, A and B formats, output dtype, bias
on/off); it serves every M, N, K (K a multiple of block_k), leading stride and storage offset.
A is ``[M, K]`` row-major, B ``[N, K]`` row-major (``[K, N]`` column-major), so both operands
are K-contiguous; the E8M0 scales are ``[M, K/32]`` and ``[N, K/32]`` row-major.

Structure of one workgroup (``m_waves x n_waves`` wave64 waves, one ``block_m x block_n``
output tile), reusing the GEMM toolkit's pieces (``templates/gemm``) where the logic is the
same:

* Block order: ``gemm.block_order`` (row-major, or XCD remap + group-M).
* Global -> LDS, pipelined by ``gemm.main_loop`` (``stages`` LDS buffers, ``stages - 1`` K
  tiles in flight, one barrier per tile, ``s_waitcnt vmcnt`` accounting): the A/B tiles are
  bytes; the kernel sees them as 16-bit units and moves them with the toolkit's
  ``TileLoads`` (16-byte async DMAs into an XOR-swizzled K-contiguous LDS tile). A
  K tile of A is ``block_m`` rows of ``block_k * bits / 8`` bytes. The scale tiles
  (``rows x block_k/32`` bytes) move with 4-byte async DMAs (``StageLoads.load_scales``);
  their last round may carry padding lanes that fetch an in-range dword into LDS slots no one
  reads, so every thread issues the same number of DMAs per tile and the vmcnt accounting
  stays exact.
* LDS -> registers and MFMA (``ScaledMma``): ``v_mfma_scale_f32_16x16x128_f8f6f4``, fp32
  accumulators, one call per 16x16 output block and 128-K step, A/B formats in cbsz/blgp.
* Epilogue: ``gemm.epilogue.stage_c_tile`` / ``store_c_tile`` (fp32 accumulator + bias,
  rounded once to the output dtype, staged through LDS, masked 16-byte row stores; nothing
  outside ``out[:M, :N]`` is written). The scaled MFMA's accumulator layout is that of the
  plain ``v_mfma_f32_16x16x32`` MFMA, so a tiled MMA of the latter partitions C.

K order and scales, under the hardware's semantics (AMD's "Matrix Core Programming on AMD
CDNA3 and CDNA4 architecture", sections 5.4-5.5, and Triton's ``chooseScaledMfmaScaleLayout``).
In one 16x16x128 instruction lane ``l`` holds row (column) ``l % 16`` of A (B) and 32 values;
with ``g = l // 16``:

* an FP8 operand's 32 values are instruction k ``16g .. 16g+15`` and ``64+16g .. 64+16g+15``
  (two runs of 16); an FP4 operand's are ``32g .. 32g+31`` (32 consecutive; 16 bytes, the
  even k in the low nibble);
* the E8M0 byte lane ``l`` supplies (selected by opsel from its 32-bit scale register)
  scales instruction k block ``g`` (``32g .. 32g+31``) of row (column) ``l % 16``, whichever
  lanes hold those values.

So for FP8 a lane's values straddle two scale blocks and its scale byte belongs to values
other lanes hold. Keeping each lane's 32 values inside one logical 32-block (the same K
permutation for A and B) cannot work with scales that vary along K: lane groups 0 and 1 then
hold two different logical blocks, yet their first runs form instruction block 0 and take one
scale (lane group 0's); that is right only when the two blocks' scales are equal. The kernel
therefore fixes one map from instruction k to logical k per MFMA step and uses it for A and B
alike (the dot product only needs A and B to agree), chosen so that every instruction scale
block is one whole logical 32-block: with ``S = block_k / 128``
steps per tile, instruction block ``b`` of step ``kk`` is logical block ``b * S + kk`` of the
tile, offsets within the block kept. Then:

* lane ``l`` reads its data for step ``kk`` from those logical blocks: FP8 16-byte runs at
  byte ``32 * ((g // 2) * S + kk) + 16 * (g % 2)`` and ``32 * ((2 + g // 2) * S + kk) +
  16 * (g % 2)`` of its tile row, FP4 16 bytes at ``16 * (g * S + kk)``;
* lane ``l``'s scale word holds the ``S`` consecutive bytes of logical blocks
  ``g*S .. g*S+S-1`` of its row (one LDS read per tile), and step ``kk`` selects byte ``kk``
  with opsel.

Mixed FP8 x FP4 (and e4m3 x e5m2) works unchanged: each operand is read for its own format
and both follow the same instruction-to-logical map. FlyDSL 0.5.0's ``MFMA_Scale`` atom models
FP8 as 32 consecutive k with each lane scaling its own values; the kernel does not use that
atom, and under that model it would be right only where scales are constant along each row's
128-K step (and for FP4 x FP4, where both models agree).

Tails: as in the dense kernel, rows of A past M and columns of B past N are clamped to row 0
on load (they only feed masked outputs); every DMA reads inside its operand (buffer
num_records = the operand's exact byte span). No K tail.
"""

# No `from __future__ import annotations`: FlyDSL reads the kernel annotations as objects.
from dataclasses import dataclass
from typing import Any, Optional

import flydsl.compiler as flyc
import flydsl.expr as fx
import torch
from flydsl.expr import const_expr, range_constexpr, rocdl

from ...runtime.recipe import kernel_builder
from ..gemm.block_order import block_order
from ..gemm.buffers import buffer_of
from ..gemm.epilogue import stage_c_tile, store_c_tile
from ..gemm.geometry import UNIT_BYTES, c_lds_row_stride  # UNIT_BYTES: A/B tiles move as 16-bit units
from ..gemm.lds import lds_layout
from ..gemm.tile_loads import Operand, TileLoads
from ..gemm.tile_spec import TileShape, TileSpec
from .config import MMA_M, MMA_N, SCALE_DMA_BYTES, SCALE_SLOTS, WAVE_SIZE, ScaledGemmConfig, TileBytes
from .pingpong import mx_pingpong
from .pipeline import Schedule, interleave, mx_main_loop
from .prefetch import PrefetchSchedule, PrefetchScaledMma, mx_prefetch_loop
from .problem import MxFormat


@dataclass(frozen=True)
class KernelSpec:
    """Everything that selects one compiled kernel; the other properties are derived from it."""

    cfg: ScaledGemmConfig
    a_fmt: MxFormat
    b_fmt: MxFormat
    out_dtype: torch.dtype
    has_bias: bool

    @property
    def name(self) -> str:
        out = "fp16" if self.out_dtype == torch.float16 else "bf16"
        return f"flydsl_scaled_gemm_{self.a_fmt.name}x{self.b_fmt.name}_{out}_{self.cfg.key()}_b{int(self.has_bias)}"

    @property
    def tb(self) -> TileBytes:
        return self.cfg.tile_bytes(self.a_fmt, self.b_fmt)

    @property
    def schedule(self) -> Schedule:
        """The plain pipeline's issue pattern (its vmcnt waits)."""
        tb = self.tb
        return Schedule(self.cfg.stages, self.cfg.chunk, tb.data_per_tile, tb.scales_per_chunk)

    @property
    def prefetch_schedule(self) -> PrefetchSchedule:
        """The register-prefetch pipeline's issue pattern (``prefetch``)."""
        tb = self.tb
        return PrefetchSchedule(self.cfg.stages, self.cfg.chunk, tb.data_per_tile, tb.scales_per_chunk)

    def out_elem(self):
        return fx.Float16 if self.out_dtype == torch.float16 else fx.BFloat16

    def tile_view(self, row_bytes: int, waves: Optional[int] = None) -> TileSpec:
        """The toolkit's spec for the same output tile, waves and stages, with K tiles of
        ``row_bytes / 2`` bf16-sized units per row: what ``TileLoads`` (moving one operand's K
        tile) and the epilogue (``rep_m``, ``c_vectors``, bias) read. ``waves``: a loader view
        for that many waves (one wave group of the ping-pong loop) instead of the workgroup's."""
        c = self.cfg
        mw, nw = (c.m_waves, c.n_waves) if waves is None else (1, waves)
        units = TileShape(c.block_m, c.block_n, row_bytes // UNIT_BYTES, mw, nw, c.stages)
        return TileSpec(units, self.out_dtype, "row", "col", self.has_bias)


def shared_tiles(spec: KernelSpec):
    """LDS pointers ``(a, b, sa, sb, c)``: ``stages`` A/B data tiles (16-bit units), two scale
    chunk slots per operand (dwords), and the epilogue's padded C tile, which reuses them after
    the main loop."""
    cfg, tb = spec.cfg, spec.tb
    S, BM, BN = cfg.stages, cfg.block_m, cfg.block_n

    @fx.struct
    class Stages:
        a: fx.Array[fx.Int16, S * BM * tb.a_row // UNIT_BYTES, 16]
        b: fx.Array[fx.Int16, S * BN * tb.b_row // UNIT_BYTES, 16]
        sa: fx.Array[fx.Int32, SCALE_SLOTS * tb.scale_slots_a, 16]
        sb: fx.Array[fx.Int32, SCALE_SLOTS * tb.scale_slots_b, 16]

    @fx.union
    class Shared:
        stages: Stages
        c: fx.Array[spec.out_elem(), BM * c_lds_row_stride(BN), 16]

    st = fx.SharedAllocator().allocate(Shared)
    return (st.stages.a.peek().ptr, st.stages.b.peek().ptr, st.stages.sa.peek().ptr,
            st.stages.sb.peek().ptr, st.c.peek().ptr)


# ---- async global -> LDS ------------------------------------------------------------------------


@dataclass(frozen=True)
class ScaleOperand:
    """One operand's E8M0 scales as their DMA sees them: rows ``row0 ..`` (``row_bound`` = M
    or N) of a dword-addressed buffer with leading stride ``ld`` dwords, staged into ``smem``
    (``slots`` dwords per chunk slot, ``iters`` DMA rounds per thread and chunk); ``oob``: a
    dword index past the buffer's num_records (a DMA pointed there fetches nothing)."""

    buf: Any
    smem: Any
    slots: int
    iters: int
    row0: Any
    row_bound: Any
    ld: Any
    oob: Any
    base: Any = None  # dword offset of this operand's scales in ``buf`` (a grouped GEMM's group)


def span_of(t):
    """Elements of the 1-D operand ``t``: an index past its last one is past num_records."""
    return fx.Int32(fx.get_scalar(fx.size(fx.get_layout(t))))


def data_operand(buf, smem, layout, rows, iters, row0, row_bound, ld, k_tiles, row_units, span, base=None):
    """A K-contiguous data operand whose DMAs for K tiles at or past ``k_tiles`` point past its
    buffer (``span`` units): the pipeline's fetches beyond the last tile read nothing."""
    return Operand(buf, smem, layout, rows, True, iters, row0, row_bound, ld, base, k_tiles * row_units, span)


class StageLoads:
    """Issues the async DMAs of one K tile's A/B data into an LDS stage, and of one scale chunk
    (``chunk`` K tiles of A's and B's scales) into a scale slot."""

    def __init__(self, spec: KernelSpec, tid, a: Operand, b: Operand, sa: ScaleOperand, sb: ScaleOperand, k_tiles,
                 waves: Optional[int] = None):
        """``waves``: the DMAs are shared by that many waves (``tid`` counted among them: one wave
        group of the ping-pong loop) instead of the workgroup's; the operands' ``iters`` match."""
        self.spec, self.tid, self.a, self.b, self.sa, self.sb = spec, tid, a, b, sa, sb
        self.threads = spec.cfg.threads if waves is None else waves * WAVE_SIZE
        self.data_a = TileLoads(spec.tile_view(spec.tb.a_row, waves), tid, a, a)
        self.data_b = TileLoads(spec.tile_view(spec.tb.b_row, waves), tid, b, b)
        self.dma32 = fx.make_copy_atom(rocdl.cdna4.BufferLoadAsyncLDS32b(), 32)
        # LDS dword offset of this wave's first lane (a DMA writes lane l at base + 4*l).
        self.wave_dwords = rocdl.readfirstlane(fx.Int32.ir_type, fx.Int32(tid // WAVE_SIZE * WAVE_SIZE))
        self.unit = fx.make_layout(1, 1)
        self.k_dwords = k_tiles * spec.cfg.steps  # scale dwords per row (K / 128)

    def load_scales(self, s: ScaleOperand, j, slot):
        """Scale chunk ``j``: ``Q = chunk * steps`` dwords (4 E8M0 bytes each) per row, row ``r``
        at slot dwords ``r*Q ..``. Dwords past K, rows past M/N and the padding lanes of the
        last round point past the buffer (zeros into slot dwords no one reads)."""
        q, threads = self.spec.tb.chunk_dwords, self.threads
        lds = s.smem + slot * s.slots + fx.Int32(self.wave_dwords)
        for i in range_constexpr(s.iters):
            idx = i * threads + self.tid
            g_row = s.row0 + idx // q
            kd = j * q + idx % q
            offset = g_row * s.ld + kd
            if const_expr(s.base is not None):
                offset = offset + s.base
            offset = (g_row < s.row_bound).select(offset, s.oob)
            offset = (kd < self.k_dwords).select(offset, s.oob)
            src = fx.make_view(fx.get_iter(s.buf) + offset, self.unit)
            dst = fx.make_view(lds + i * threads, self.unit)
            fx.copy_atom_call(self.dma32, src, dst)

    def load_data(self, kt, stage):
        """K tile ``kt`` of A and B into LDS stage ``stage``."""
        cfg, tb = self.spec.cfg, self.spec.tb
        self.data_a.load_tile(self.a, self.a.smem + stage * (cfg.block_m * tb.a_row // UNIT_BYTES), kt)
        self.data_b.load_tile(self.b, self.b.smem + stage * (cfg.block_n * tb.b_row // UNIT_BYTES), kt)

    def load_chunk(self, j, slot):
        """Scale chunk ``j`` of A and B into scale slot ``slot``."""
        self.load_scales(self.sa, j, slot)
        self.load_scales(self.sb, j, slot)

    def load_a(self, kt, stage):
        """K tile ``kt`` of A into LDS stage ``stage`` and its scales (chunks of one tile) into
        slot ``stage``: the ping-pong loop's A group."""
        cfg, tb = self.spec.cfg, self.spec.tb
        self.data_a.load_tile(self.a, self.a.smem + stage * (cfg.block_m * tb.a_row // UNIT_BYTES), kt)
        self.load_scales(self.sa, kt, stage)

    def load_b(self, kt, stage):
        """The same for B: the ping-pong loop's B group."""
        cfg, tb = self.spec.cfg, self.spec.tb
        self.data_b.load_tile(self.b, self.b.smem + stage * (cfg.block_n * tb.b_row // UNIT_BYTES), kt)
        self.load_scales(self.sb, kt, stage)


# ---- LDS -> registers and the scaled MFMA -------------------------------------------------------


def operand_chunks(fmt: MxFormat, g, kk: int, steps: int):
    """Byte offsets, in a tile row, of the 16-byte runs lane group ``g`` feeds to MFMA step
    ``kk`` (instruction block b of step kk = logical block b * steps + kk; module docstring)."""
    if fmt.bits == 4:
        return [16 * (g * steps + kk)]
    half, sub = g // 2, g % 2
    return [32 * (half * steps + kk) + 16 * sub, 32 * ((2 + half) * steps + kk) + 16 * sub]


class ScaledMma:
    """The workgroup's MFMA tiling, its LDS -> register reads, and the fp32 accumulator
    fragment (zeroed). ``thr_mma``, ``c_rows``, ``c_cols`` and ``acc`` are what the toolkit's
    epilogue reads (``gemm.epilogue.Accumulators``)."""

    def __init__(self, spec: KernelSpec, tid, a: Operand, b: Operand, sa: ScaleOperand,
                 sb: ScaleOperand, out_buf):
        cfg = spec.cfg
        BM, BN = cfg.block_m, cfg.block_n
        self.spec, self.a, self.b, self.sa, self.sb = spec, a, b, sa, sb
        self.rep_m = cfg.block_m // (cfg.m_waves * MMA_M)
        self.rep_n = cfg.block_n // (cfg.n_waves * MMA_N)
        # The plain 16x16 MFMA has the scaled one's accumulator layout: its tiled MMA
        # partitions C (and the epilogue reads it); the MFMA itself is called below.
        atom = fx.make_mma_atom(rocdl.MFMA(MMA_M, MMA_N, 32, fx.BFloat16))
        self.tiled_mma = fx.make_tiled_mma(atom, fx.make_layout((cfg.m_waves, cfg.n_waves, 1), (cfg.n_waves, 1, 0)))
        self.thr_mma = self.tiled_mma.thr_slice(tid)
        self.c_rows = fx.make_view(0, fx.make_layout((BM, BN), (1, 0)))
        self.c_cols = fx.make_view(0, fx.make_layout((BM, BN), (0, 1)))
        self.acc = self.thr_mma.make_fragment_C(fx.make_view(fx.get_iter(out_buf), fx.make_layout((BM, BN), (1, BM))))
        self.acc.fill(0.0)
        # This lane's place in the MFMA blocks: block (i, j) of wave (wm, wn) covers rows
        # i * 16 * m_waves + wm * 16 + [0, 16) and the same for columns (the tiled MMA's
        # order); lane l feeds row/column l % 16 and K group g = l // 16.
        wave = tid // WAVE_SIZE
        lane = tid % WAVE_SIZE
        self.g = lane // 16
        self.a_row0 = (wave // cfg.n_waves) * MMA_M + lane % 16
        self.b_row0 = (wave % cfg.n_waves) * MMA_N + lane % 16

    def _read_operand(self, smem_stage, layout, row, fmt: MxFormat, kk: int):
        """One lane's MFMA operand for step ``kk`` from tile row ``row`` (``tile_views``) of a
        tile in ``fmt``: vector<8xi32> (FP8) or vector<4xi32> (FP4)."""
        base, delta = row
        units = fmt.row_bytes(self.spec.cfg.block_k) // UNIT_BYTES
        parts = []
        for byte in operand_chunks(fmt, self.g, kk, self.spec.cfg.steps):
            off = fx.get_scalar(fx.crd2idx((base, byte // UNIT_BYTES), layout))
            v = fx.ptr_load(smem_stage + delta * units + off, result_type=fx.Vector.make_type(8, fx.Int16))
            parts.append(fx.Vector(v).bitcast(fx.Int32))
        if len(parts) == 1:
            return parts[0]
        return parts[0].shuffle(parts[1], list(range(8)))

    def _read_scales(self, s: ScaleOperand, slot, row, p: int):
        """This lane's scale word for tile ``p`` of the chunk in ``slot``, tile row ``row``: bytes
        ``g*steps ..`` of that tile's ``4 * steps`` scale bytes of its row, zero-extended (opsel
        picks byte ``kk`` at step ``kk``)."""
        base, delta = row
        steps, chunk = self.spec.cfg.steps, self.spec.cfg.chunk
        unit = {1: fx.Int8, 2: fx.Int16, 4: fx.Int32}[steps]
        ptr = fx.recast_iter(unit, s.smem + slot * s.slots)
        # Row r's tile p starts at dword r * q + p * steps (q = chunk * steps dwords per row), unit
        # (r * q + p * steps) * 4 / steps; the constant part is its own term (a ds_read offset).
        word = fx.ptr_load(ptr + (delta * 4 * chunk + 4 * p) + (base * (4 * chunk) + self.g))
        return word if steps == 4 else word.to(fx.Int32)

    def tile_views(self, stage):
        """``(a_stage, b_stage, a_rows, b_rows)``: LDS stage ``stage``'s A and B tiles and the
        tile rows of this lane's MFMA row (column) blocks, each ``(base, delta)``: this lane's
        first block row and a constant (a multiple of 16). With K-contiguous rows of >= 32
        units, ``delta`` rows are a multiple of 512 units, which the XOR swizzle (offset bits
        6..8 into 3..5) leaves alone, so every block's LDS offset is the first block's plus a
        constant: one address register per operand run, the rest immediate offsets."""
        cfg, tb = self.spec.cfg, self.spec.tb
        assert min(tb.a_row, tb.b_row) // UNIT_BYTES * MMA_M % 512 == 0
        a_stage = self.a.smem + stage * (cfg.block_m * tb.a_row // UNIT_BYTES)
        b_stage = self.b.smem + stage * (cfg.block_n * tb.b_row // UNIT_BYTES)
        a_rows = [(self.a_row0, i * MMA_M * cfg.m_waves) for i in range(self.rep_m)]
        b_rows = [(self.b_row0, j * MMA_N * cfg.n_waves) for j in range(self.rep_n)]
        return a_stage, b_stage, a_rows, b_rows

    def accumulate(self, i: int, j: int, kk: int, av, bv, sa, sb):
        """acc block (i, j) += one scaled MFMA of step ``kk`` on operands ``av``/``bv`` with
        scale words ``sa``/``sb``."""
        spec = self.spec
        # Accumulator fragment ((4, 1), rep_m, rep_n), colexicographic.
        base = 4 * (i + self.rep_m * j)
        c = fx.Vector.from_elements([self.acc[base + e] for e in range(4)], fx.Float32)
        d = fx.Vector(rocdl.mfma_scale_f32_16x16x128_f8f6f4(
            fx.Vector.make_type(4, fx.Float32), [av, bv, c, spec.a_fmt.mfma_code, spec.b_fmt.mfma_code, kk, sa, kk, sb]))
        for e in range_constexpr(4):
            self.acc[base + e] = d[e]

    def compute(self, stage, slot, p: int, issue=None, dmas: int = 0):
        """acc += the K tile in LDS stage ``stage`` (tile ``p`` of the scale chunk in ``slot``);
        ``issue()`` (``dmas`` DMAs per thread, or None) goes after the LDS reads, its DMAs
        spread between the MFMAs."""
        spec, cfg = self.spec, self.spec.cfg
        a_stage, b_stage, a_rows, b_rows = self.tile_views(stage)
        sa = [self._read_scales(self.sa, slot, r, p) for r in a_rows]
        sb = [self._read_scales(self.sb, slot, r, p) for r in b_rows]
        av_k = [[self._read_operand(a_stage, self.a.layout, r, spec.a_fmt, kk) for r in a_rows]
                for kk in range(cfg.steps)]
        bv_k = [[self._read_operand(b_stage, self.b.layout, r, spec.b_fmt, kk) for r in b_rows]
                for kk in range(cfg.steps)]
        if issue is not None:
            issue()
        for kk in range_constexpr(cfg.steps):
            av, bv = av_k[kk], bv_k[kk]
            for j in range_constexpr(self.rep_n):
                for i in range_constexpr(self.rep_m):
                    self.accumulate(i, j, kk, av[i], bv[j], sa[i], sb[j])
        if issue is not None:
            interleave(dmas, self.rep_m * self.rep_n * cfg.steps)


# ---- the kernel ---------------------------------------------------------------------------------


@kernel_builder
def build(spec: KernelSpec):
    """The ``@flyc.jit`` launcher for ``spec``.

    Signature: ``launch(out, a, b, sa, sb, bias, m, n, k, lda, ldb, ldsa, ldsb, ldc, stream)``
    with 1-D unit-stride views starting at each operand's first element (see
    ``launcher.compile_args``): ``a``/``b`` as int16 (2-byte units), ``sa``/``sb`` as int32
    (4 E8M0 bytes each), ``out``/``bias`` in the output dtype; sizes in values (K logical),
    ``lda``/``ldb`` in 2-byte units, ``ldsa``/``ldsb`` in dwords, ``ldc`` in elements.
    Grid ``(ceil(M/block_m) * ceil(N/block_n), 1, 1)``, block ``(threads, 1, 1)``.
    """
    cfg, tb = spec.cfg, spec.tb
    BM, BN, BK = cfg.block_m, cfg.block_n, cfg.block_k
    THREADS = cfg.threads
    out_bytes = spec.out_dtype.itemsize

    @flyc.kernel(name=spec.name, known_block_size=[THREADS, 1, 1])
    def scaled_gemm_kernel(
        out: fx.Tensor,
        a: fx.Tensor,
        b: fx.Tensor,
        sa: fx.Tensor,
        sb: fx.Tensor,
        bias: fx.Tensor,
        m: fx.Int32,
        n: fx.Int32,
        k: fx.Int32,
        lda: fx.Int32,
        ldb: fx.Int32,
        ldsa: fx.Int32,
        ldsb: fx.Int32,
        ldc: fx.Int32,
    ):
        tid = fx.thread_idx.x
        pid_m, pid_n = block_order(fx.block_idx.x, m, n, BM, BN, cfg.group_m)
        m0 = pid_m * BM
        n0 = pid_n * BN
        k_tiles = k // BK

        smem_a, smem_b, smem_sa, smem_sb, smem_c = shared_tiles(spec)
        a_buf = buffer_of(a, UNIT_BYTES)
        b_buf = buffer_of(b, UNIT_BYTES)
        out_buf = buffer_of(out, out_bytes)
        bias_buf = None
        if const_expr(spec.has_bias):
            bias_buf = buffer_of(bias, out_bytes)

        a_layout = lds_layout(BM, tb.a_row // UNIT_BYTES, True)
        b_layout = lds_layout(BN, tb.b_row // UNIT_BYTES, True)
        op_a = data_operand(a_buf, smem_a, a_layout, BM, tb.a_dma, m0, m, lda, k_tiles, tb.a_row // UNIT_BYTES,
                            span_of(a))
        op_b = data_operand(b_buf, smem_b, b_layout, BN, tb.b_dma, n0, n, ldb, k_tiles, tb.b_row // UNIT_BYTES,
                            span_of(b))
        sc_a = ScaleOperand(buffer_of(sa, SCALE_DMA_BYTES), smem_sa, tb.scale_slots_a, tb.sa_dma, m0, m, ldsa,
                            span_of(sa))
        sc_b = ScaleOperand(buffer_of(sb, SCALE_DMA_BYTES), smem_sb, tb.scale_slots_b, tb.sb_dma, n0, n, ldsb,
                            span_of(sb))
        loads = StageLoads(spec, tid, op_a, op_b, sc_a, sc_b, k_tiles)
        mma = ScaledMma(spec, tid, op_a, op_b, sc_a, sc_b, out_buf)
        if const_expr(cfg.prefetch):
            pmma = PrefetchScaledMma(mma)
            mx_prefetch_loop(spec.prefetch_schedule, loads, pmma, k_tiles)
        elif const_expr(cfg.pingpong):
            mx_pingpong(spec, tid, op_a, op_b, sc_a, sc_b, mma, k_tiles, StageLoads)
        else:
            mx_main_loop(spec.schedule, loads, mma, k_tiles)
        epilogue = spec.tile_view(tb.a_row)  # same output tile, waves and bias
        stage_c_tile(epilogue, mma, smem_c, spec.out_elem(), n0, n, 1.0, 1.0, bias_buf)
        store_c_tile(epilogue, smem_c, spec.out_elem(), out_buf, tid, m0, n0, m, n, ldc)

    @flyc.jit
    def launch(
        out: fx.Tensor,
        a: fx.Tensor,
        b: fx.Tensor,
        sa: fx.Tensor,
        sb: fx.Tensor,
        bias: fx.Tensor,
        m: fx.Int32,
        n: fx.Int32,
        k: fx.Int32,
        lda: fx.Int32,
        ldb: fx.Int32,
        ldsa: fx.Int32,
        ldsb: fx.Int32,
        ldc: fx.Int32,
        stream: fx.Stream = fx.Stream(None),
    ):
        grid_x = ((m + BM - 1) // BM) * ((n + BN - 1) // BN)
        scaled_gemm_kernel(out, a, b, sa, sb, bias, m, n, k, lda, ldb, ldsa, ldsb, ldc).launch(
            grid=(grid_x, 1, 1), block=(THREADS, 1, 1), stream=stream
        )

    return launch
