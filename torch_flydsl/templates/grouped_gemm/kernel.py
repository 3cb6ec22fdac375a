"""The grouped GEMM kernel for gfx950: ``out[offs[g-1]:offs[g]] = A[offs[g-1]:offs[g]] @ B[g]``.

One kernel per ``KernelSpec`` (tile config, dtype, B's per-group major) serves every T, N, K
(K a multiple of block_k), group count, group sizes and strides.

Schedule. The grid is an upper bound on the output tiles that any split of T rows into G
groups can need, ``(ceil(T / block_m) + G) * ceil(N / block_n)`` (each group adds at most one
partial M tile), so it depends only on shapes, never on the offsets: no host sync, and the
launch can be captured in a CUDA graph. Output tiles are numbered group by group (a group's
M tiles x the N tiles, row-major), and workgroup ``pid`` finds its tile with one scan over the
G offsets (``find_tile``: G scalar loads, branch-free selects). Empty groups own no tile and
cost only their step of that scan; workgroups past the real tile count exit after it.

Per tile, everything is the dense kernel's (``dense_gemm.kernel``): async buffer->LDS DMA into
``stages`` LDS buffers, MFMA ``16x16x32``, the padded-LDS epilogue. A group's rows are the
tile's row range: A rows at or past the group's end are clamped (to row 0, as dense clamps
rows past M; they only feed masked outputs), and the store writes only rows below the group's
end, so a tile never reads into a neighbour's output or writes one. B's DMA offsets carry the
group's base ``g * ldbg``.
"""

# No `from __future__ import annotations`: FlyDSL reads the kernel annotations as objects.
import functools
from dataclasses import dataclass

import flydsl.compiler as flyc
import flydsl.expr as fx
import torch

from ..dense_gemm import kernel as dense
from .config import GroupedGemmConfig

OFFS_BYTES = 4  # int32 offsets


@dataclass(frozen=True)
class KernelSpec:
    cfg: GroupedGemmConfig
    dtype: torch.dtype
    b_major: str  # each group's [K, N]: "row" (N contiguous) or "col" (K contiguous)

    @property
    def dense(self) -> dense.KernelSpec:
        """The dense kernel's spec for one tile: row-major A, this B, no bias."""
        return dense.KernelSpec(self.cfg, self.dtype, "row", self.b_major, False)

    @property
    def name(self) -> str:
        d = {torch.bfloat16: "bf16", torch.float16: "fp16"}[self.dtype]
        return f"flydsl_grouped_gemm_{d}_n{'t' if self.b_major == 'col' else 'n'}_{self.cfg.key()}"


def tile_upper_bound(tokens, groups, n, block_m: int, block_n: int):
    """Output tiles any split of ``tokens`` rows into ``groups`` groups can need (the grid)."""
    return ((tokens + block_m - 1) // block_m + groups) * ((n + block_n - 1) // block_n)


@dense._dsl_control_flow
def find_tile(offs_buf, pid, groups, tokens, n, block_m: int, block_n: int):
    """(group, first row, end row, pid_m, pid_n) of output tile ``pid``; group is -1 when
    ``pid`` is past the last tile. Offsets are clamped as the reference clamps them: a
    group ends at or after the previous one and at or before ``tokens``."""
    n_tiles = (n + block_n - 1) // block_n
    found = fx.Int32(-1)
    start = fx.Int32(0)
    end = fx.Int32(0)
    local = fx.Int32(0)
    seen = fx.Int32(0)  # tiles of the groups before g
    prev = fx.Int32(0)  # end row of group g-1
    for g in range(groups):
        g_end = offs_buf[g]
        g_end = (g_end < tokens).select(g_end, tokens)
        g_end = (g_end < prev).select(prev, g_end)
        tiles = (g_end - prev + block_m - 1) // block_m * n_tiles
        here = (found < 0).select((pid < seen + tiles).select(fx.Int32(g), found), found)
        first = here != found  # this group holds the tile (it was not found before)
        start = first.select(prev, start)
        end = first.select(g_end, end)
        local = first.select(pid - seen, local)
        found = here
        seen = seen + tiles
        prev = g_end
    return found, start, end, local // n_tiles, local % n_tiles


@functools.lru_cache(maxsize=None)
def build(spec: KernelSpec):
    """The ``@flyc.jit`` launcher for ``spec``.

    Signature: ``launch(out, a, b, offs, tokens, n, k, groups, lda, ldb, ldbg, ldc, stream)``
    with ``out``/``a``/``b``/``offs`` 1-D unit-stride views from each operand's first element
    (``dense_gemm.launcher.flat_operand``), ints for sizes and strides (elements; ``ldb`` is
    the leading stride of one group's matrix, ``ldbg`` the stride between groups). Grid
    ``(tile_upper_bound(...), 1, 1)``, block ``(threads, 1, 1)``.
    """
    cfg = spec.cfg
    d = spec.dense
    BM, BN, BK = cfg.block_m, cfg.block_n, cfg.block_k
    THREADS = cfg.threads

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
        lda: fx.Int32,
        ldb: fx.Int32,
        ldbg: fx.Int32,
        ldc: fx.Int32,
    ):
        elem = d.elem_type()
        tid = fx.thread_idx.x
        offs_buf = dense.buffer_of(offs, OFFS_BYTES)
        group, start, end, pid_m, pid_n = find_tile(offs_buf, fx.block_idx.x, groups, tokens, n, BM, BN)
        if group >= 0:
            m0 = start + pid_m * BM
            n0 = pid_n * BN
            smem_a, smem_b, smem_c = dense.shared_tiles(d, elem)
            a_layout = dense.lds_layout(BM, BK, d.a_k_contig)
            b_layout = dense.lds_layout(BN, BK, d.b_k_contig)
            a_buf = dense.buffer_of(a)
            b_buf = dense.buffer_of(b)
            out_buf = dense.buffer_of(out)
            op_a = dense.Operand(a_buf, smem_a, a_layout, BM, d.a_k_contig, d.a_iters, m0, end, lda)
            op_b = dense.Operand(b_buf, smem_b, b_layout, BN, d.b_k_contig, d.b_iters, n0, n, ldb, group * ldbg)
            loads = dense.TileLoads(d, tid, op_a, op_b)
            mma = dense.Mma(d, tid, elem, op_a, op_b, out_buf)
            dense.main_loop(d, loads, mma, k // BK)
            dense.stage_c_tile(d, mma, smem_c, elem, n0, n, fx.Float32(1.0), fx.Float32(0.0), None)
            dense.store_c_tile(d, smem_c, elem, out_buf, tid, m0, n0, end, n, ldc)

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
        lda: fx.Int32,
        ldb: fx.Int32,
        ldbg: fx.Int32,
        ldc: fx.Int32,
        stream: fx.Stream = fx.Stream(None),
    ):
        grid_x = tile_upper_bound(tokens, groups, n, BM, BN)
        grouped_gemm_kernel(out, a, b, offs, tokens, n, k, groups, lda, ldb, ldbg, ldc).launch(
            grid=(grid_x, 1, 1), block=(THREADS, 1, 1), stream=stream
        )

    return launch
