"""Small FlyDSL kernels used as emulator test subjects (each with a planted-bug variant)."""

import math

import flydsl.compiler as flyc
import flydsl.expr as fx
from flydsl.expr import gpu, range_constexpr
from flydsl.expr.typing import Constexpr

WAVE = 64

# ---- vector add with a tail ------------------------------------------------------------------


@flyc.kernel
def _vadd_kernel(A: fx.Tensor, B: fx.Tensor, C: fx.Tensor, n: fx.Int32, bug: Constexpr[int]):
    i = fx.block_idx.x * 256 + fx.thread_idx.x
    if fx.const_expr(bug == 0):
        if i < n:
            C[i] = A[i] + B[i]
    elif fx.const_expr(bug == 1):  # off-by-one bound: touches element n
        if i <= n:
            C[i] = A[i] + B[i]
    else:  # off-by-one index: reads the neighbour
        if i < n - 1:
            C[i] = A[i + 1] + B[i]


@flyc.jit
def vadd(A: fx.Tensor, B: fx.Tensor, C: fx.Tensor, n: fx.Int32, bug: Constexpr[int] = 0, stream: fx.Stream = fx.Stream(None)):
    _vadd_kernel(A, B, C, n, bug).launch(grid=((n + 255) // 256, 1, 1), block=(256, 1, 1), stream=stream)


# ---- scaled copy into a padded output (planted stray writes) ------------------------------------

PAD_COPY_OK, PAD_COPY_WRITES_PADDING, PAD_COPY_WRITES_INPUT = 0, 1, 2


@flyc.kernel
def _pad_copy_kernel(X: fx.Tensor, Y: fx.Tensor, rows: fx.Int32, cols: fx.Int32, ldy: fx.Int32,
                     bug: Constexpr[int]):
    """Y[r * ldy + c] = 2 * X[r * cols + c]: a dense [rows, cols] matrix into rows of stride ldy."""
    i = fx.block_idx.x * 256 + fx.thread_idx.x
    if i < rows * cols:
        r = i // cols
        c = i % cols
        Y[r * ldy + c] = X[i] * 2.0
        if fx.const_expr(bug == PAD_COPY_WRITES_PADDING):
            if c == cols - 1:
                Y[r * ldy + cols] = X[i]  # one past the row: the padding column
        if fx.const_expr(bug == PAD_COPY_WRITES_INPUT):
            X[i] = 0.0


@flyc.jit
def pad_copy(X: fx.Tensor, Y: fx.Tensor, rows: fx.Int32, cols: fx.Int32, ldy: fx.Int32, bug: Constexpr[int] = 0,
             stream: fx.Stream = fx.Stream(None)):
    _pad_copy_kernel(X, Y, rows, cols, ldy, bug).launch(grid=((rows * cols + 255) // 256, 1, 1), block=(256, 1, 1),
                                                        stream=stream)


# ---- block sum: wave shuffles + LDS + barrier ----------------------------------------------------

RED_THREADS = 256
RED_SLOTS = RED_THREADS // WAVE


@fx.struct
class _RedShared:
    part: fx.Array[fx.Float32, RED_SLOTS, 16]


@flyc.kernel
def _block_sum_kernel(X: fx.Tensor, Out: fx.Tensor, n: fx.Int32, barrier: Constexpr[bool]):
    tid = fx.thread_idx.x
    bid = fx.block_idx.x
    lds = fx.SharedAllocator().allocate(_RedShared).peek()
    part = lds.part.view(fx.make_layout(RED_SLOTS, 1))
    i = bid * RED_THREADS + tid
    safe = (i < n).select(i, 0)
    x = (i < n).select(X[safe], 0.0)

    def wave_sum(v):
        for s in range_constexpr(int(math.log2(WAVE))):
            v = v + v.shuffle_xor(WAVE // (2 << s), WAVE)
        return v

    lane = tid % WAVE
    wave = tid // WAVE
    w = wave_sum(x)
    if lane == 0:
        fx.memref_store(w, part, wave)
    if fx.const_expr(barrier):
        gpu.barrier()
    if tid == 0:
        total = fx.memref_load(part, 0)
        for s in range_constexpr(1, RED_SLOTS):
            total = total + fx.memref_load(part, s)
        Out[bid] = total


@flyc.jit
def block_sum(X: fx.Tensor, Out: fx.Tensor, n: fx.Int32, barrier: Constexpr[bool] = True, stream: fx.Stream = fx.Stream(None)):
    _block_sum_kernel(X, Out, n, barrier).launch(grid=((n + RED_THREADS - 1) // RED_THREADS, 1, 1), block=(RED_THREADS, 1, 1), stream=stream)


# ---- tiled MFMA GEMM through LDS (C[M,N] = A[M,K] @ B[N,K]^T, bf16 in, f32 out) ------------------

BM, BN, BK = 32, 32, 64
MMA_THREADS = 256


@fx.struct
class _MmaShared:
    a: fx.Array[fx.BFloat16, BM * BK, 16]
    b: fx.Array[fx.BFloat16, BN * BK, 16]


@flyc.kernel
def _mma_lds_kernel(A: fx.Tensor, B: fx.Tensor, C: fx.Tensor, k_tiles: fx.Int32, barrier: Constexpr[bool]):
    tid = fx.thread_idx.x
    bid_m = fx.block_idx.x
    bid_n = fx.block_idx.y
    lds = fx.SharedAllocator().allocate(_MmaShared).peek()
    sA = lds.a.view(fx.make_layout((BM, BK), (BK, 1)))
    sB = lds.b.view(fx.make_layout((BN, BK), (BK, 1)))
    sA_flat = lds.a.view(fx.make_layout(BM * BK, 1))
    sB_flat = lds.b.view(fx.make_layout(BN * BK, 1))

    mma_atom = fx.make_mma_atom(fx.rocdl.MFMA(16, 16, 32, fx.BFloat16))
    tiled_mma = fx.make_tiled_mma(mma_atom, fx.make_layout((2, 2, 1), (2, 1, 0)))
    thr_mma = tiled_mma.thr_slice(tid)
    read = fx.make_copy_atom(fx.UniversalCopy128b(), fx.BFloat16)
    thr_copy_a = fx.make_tiled_copy_A(read, tiled_mma).get_slice(tid)
    thr_copy_b = fx.make_tiled_copy_B(read, tiled_mma).get_slice(tid)
    frag_a = thr_mma.make_fragment_A(sA)
    frag_b = thr_mma.make_fragment_B(sB)
    frag_a_dst = thr_copy_a.retile(frag_a)
    frag_b_dst = thr_copy_b.retile(frag_b)
    s_a = thr_copy_a.partition_S(sA)
    s_b = thr_copy_b.partition_S(sB)

    Cb = fx.rocdl.make_buffer_tensor(C)
    gC = fx.slice(fx.zipped_divide(Cb, (BM, BN)), (None, (bid_m, bid_n)))
    acc = thr_mma.make_fragment_C(gC)
    acc.fill(0.0)

    K = fx.Int32(fx.get_scalar(A.shape[1]))
    for kt in range(k_tiles):
        if fx.const_expr(barrier):
            gpu.barrier()  # everyone finished reading the previous tile
        for it in range_constexpr(BM * BK // MMA_THREADS):
            e = it * MMA_THREADS + tid
            r = e // BK
            c = e % BK
            fx.memref_store(A[(bid_m * BM + r, kt * BK + c)], sA_flat, e)
            fx.memref_store(B[(bid_n * BN + r, kt * BK + c)], sB_flat, e)
        if fx.const_expr(barrier):
            gpu.barrier()  # the tile is complete in LDS
        for kk in range_constexpr(BK // 32):
            fx.copy(read, s_a[None, None, kk], frag_a_dst[None, None, kk])
            fx.copy(read, s_b[None, None, kk], frag_b_dst[None, None, kk])
            fx.gemm(tiled_mma, acc, frag_a[None, None, kk], frag_b[None, None, kk], acc)

    store = fx.make_copy_atom(fx.rocdl.BufferCopy32b(), fx.Float32)
    thr_copy_c = fx.make_tiled_copy_C(store, tiled_mma).get_slice(tid)
    fx.copy(store, thr_copy_c.retile(acc), thr_copy_c.partition_S(gC), pred=None)


@flyc.jit
def mma_lds(A: fx.Tensor, B: fx.Tensor, C: fx.Tensor, k_tiles: fx.Int32, barrier: Constexpr[bool] = True, stream: fx.Stream = fx.Stream(None)):
    M = fx.get_scalar(A.shape[0])
    N = fx.get_scalar(B.shape[0])
    _mma_lds_kernel(A, B, C, k_tiles, barrier).launch(grid=(M // BM, N // BN, 1), block=(MMA_THREADS, 1, 1), stream=stream)
