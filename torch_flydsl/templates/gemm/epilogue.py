"""The epilogue: ``alpha * acc + beta * bias[col]`` in fp32, rounded once to the output dtype
and staged through a padded C tile in LDS (aliasing the A/B stages), then written as 16-byte
row vectors (``stage_c_tile``, ``store_c_tile``).

Rows at or past the bound are skipped, and a vector that crosses N (or an output whose leading
stride is not a multiple of 8 elements) is written element by element with ``col < N``
masks: nothing outside ``out[:M, :N]`` is ever written.
"""

from typing import Any, Protocol

import flydsl.expr as fx
from flydsl.expr import const_expr, gpu, range_constexpr

from ..dsl import dsl_control_flow
from .geometry import VEC, c_lds_row_stride
from .tile_spec import TileSpec


class Accumulators(Protocol):
    """What the epilogue reads of a family's MMA (``mma.Mma`` or the scaled one): the thread's
    slice of the tiled MMA, the row and column of every accumulator element, the fp32
    accumulator fragment."""

    thr_mma: Any
    c_rows: Any
    c_cols: Any
    acc: Any


def stage_c_tile(spec: TileSpec, mma: Accumulators, smem_c, elem, n0, n, alpha, beta, bias_buf, acc_at=None):
    """Each lane rounds ``alpha * acc + beta * bias`` once (fp32 math) into the C tile in LDS.

    The accumulator fragment is ((4, 1), rep_m, rep_n), colexicographic: 4 consecutive rows of
    one column per MFMA block, then M repeats, then N repeats, so a lane's column depends only
    on the N repeat and bias is loaded once per repeat. ``acc_at(i, row, col)`` (tile-local
    row and column) gives the fp32 value of accumulator element ``i`` instead of the MMA's
    fragment (a split-K reduction's sum of partial tiles).
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
        val = (acc[i] if acc_at is None else acc_at(i, r, c)) * alpha
        if spec.has_bias:
            rep = i // per_n_rep
            if rep not in bias_by_rep:
                col = n0 + c
                safe_col = (col < n).select(col, 0)
                bias_by_rep[rep] = bias_buf[safe_col].to(fx.Float32) * beta
            val = val + bias_by_rep[rep]
        s_c[r, c] = val.to(elem)
    gpu.barrier()


@dsl_control_flow
def store_c_tile(spec: TileSpec, smem_c, elem, out_buf, tid, m0, n0, m, n, ldc):
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
