"""The TopK kernel for gfx950: one workgroup per row (a grid-stride loop over rows), radix select
of the k-th key, a deterministic gather of the survivors, a bitonic sort in LDS.

Per row ``x[r, 0:n]`` (unit stride, rows ``ldx`` elements apart):

1. **Keys.** Every element maps to an order-preserving 32-bit unsigned key (fp16/bf16 widen to
   fp32 exactly first): ``bits ^ (sign ? 0xFFFFFFFF : 0x80000000)``, NaN -> ``0xFFFFFFFF``. This
   is the order PyTorch's CUDA radix select uses (NaN above +inf, ``-0.0`` below ``+0.0``). For
   ``largest=False`` the key is inverted, so the kernel always selects the k largest keys.
2. **Radix select** (4 passes of 8 bits, most significant first): each pass builds a 256-bin
   histogram of the digit of the elements whose higher digits match the prefix found so far
   (one histogram per wave in LDS, LDS atomics only within a wave), sums the waves' bins,
   scans them from the top digit down (wave shuffles + per-wave totals in LDS) and picks the
   digit where the running count reaches the remaining k. After 4 passes ``thr`` is the k-th
   largest key and ``take_eq`` how many elements equal to it belong to the result.
3. **Gather** (no atomics, the same result on every run): each thread counts its elements above
   ``thr`` and equal to it; a workgroup exclusive scan of the packed counts (prefix sums) gives
   each thread its output slots; elements equal to ``thr`` are taken in thread order until
   ``take_eq`` are placed. Thread order is lane-strided (thread ``t`` takes ``t, t + T, ...``:
   coalesced reads) by default, and index order under ``index_order`` (deterministic mode:
   thread ``t`` takes a contiguous block, so the lowest-index ties are taken, in index order).
   Survivors (key, index) go to LDS, ``k_pad`` slots (padding: key 0, index INT32_MAX); LDS
   holds ``key ^ 0x80000000`` as int32, whose signed order is the key order (LDS loads are
   signless i32, which FlyDSL compares as signed).
4. **Sort** (``sorted=True`` and k > 1): bitonic sort of the ``k_pad`` (key, index) pairs in
   LDS, descending by key then ascending by index (a total order: equal values come out in
   index order, padding last).
5. **Store:** values are re-read from the row at the survivor's index (the input's exact bits:
   NaN payloads and the sign of zero survive), indices stored as int64.
"""

# No `from __future__ import annotations`: FlyDSL reads the kernel annotations as objects.
from dataclasses import dataclass

import flydsl.compiler as flyc
import flydsl.expr as fx
import torch
from flydsl.expr import gpu, range_constexpr
from flydsl.expr.llvm import atomic_add

from ...runtime.recipe import kernel_builder
from .config import TopKConfig

WAVE = 64
BINS = 256
RADIX_BITS = 8
PASSES = 32 // RADIX_BITS
PAD_INDEX = 2**31 - 1


@dataclass(frozen=True)
class KernelSpec:
    cfg: TopKConfig
    dtype: torch.dtype
    largest: bool
    sorted: bool
    index_order: bool = False  # deterministic mode: the gather takes elements in index order

    @property
    def name(self) -> str:
        d = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}[self.dtype]
        order = "largest" if self.largest else "smallest"
        s = "sorted" if self.sorted else "unsorted"
        det = "_det" if self.index_order else ""
        return f"flydsl_topk_{d}_{order}_{s}_{self.cfg.key()}{det}"


_FX_DTYPE = {torch.float32: "Float32", torch.float16: "Float16", torch.bfloat16: "BFloat16"}


@kernel_builder
def build(spec: KernelSpec):
    """The ``@flyc.jit`` launcher for ``spec``.

    Signature: ``launch(x, values, indices, rows, n, k, ldx, ldv, ldi, grid, stream)``: 1-D
    unit-stride views from each operand's first element (``x`` and ``values`` in the input
    dtype, ``indices`` int64); ``ld*`` are row strides in elements; ``grid`` workgroups loop
    over the rows. Block ``(threads, 1, 1)``. Needs ``1 <= k <= min(n, k_pad)``.
    """
    cfg = spec.cfg
    T = cfg.threads
    WAVES = T // WAVE
    KP = cfg.k_pad
    LARGEST = spec.largest
    SORTED = spec.sorted and KP > 1
    INDEX_ORDER = spec.index_order
    if T % WAVE or T < BINS:
        raise ValueError(f"threads {T} must be a multiple of {WAVE} and at least {BINS} (one bin per thread)")
    SLOT_STEPS = max(KP // T, 1)
    PAIR_STEPS = max(KP // 2 // T, 1)
    LOG_KP = KP.bit_length() - 1
    XT = getattr(fx, _FX_DTYPE[spec.dtype])

    @fx.struct
    class Shared:
        hist: fx.Array[fx.Int32, WAVES * BINS, 16]
        skey: fx.Array[fx.Int32, KP, 16]  # key ^ 0x80000000: signed order = key order
        sidx: fx.Array[fx.Int32, KP, 16]
        wsum: fx.Array[fx.Int32, WAVES, 16]
        sel: fx.Array[fx.Int32, 4, 16]

    def key_of(v):
        f = v if fx.const_expr(spec.dtype == torch.float32) else v.to(fx.Float32)
        u = f.bitcast(fx.Uint32)
        mask = ((u >> 31) != 0).select(fx.Uint32(0xFFFFFFFF), fx.Uint32(0x80000000))
        key = (f != f).select(fx.Uint32(0xFFFFFFFF), u ^ mask)
        if fx.const_expr(not LARGEST):
            key = ~key
        return key

    def gather_index(it, tid, iters):
        """The element thread ``tid`` gathers at step ``it``: lane-strided (coalesced), or, in
        index order, a contiguous block per thread (thread order = index order)."""
        if fx.const_expr(INDEX_ORDER):
            return tid * iters + it
        return it * T + tid

    @flyc.jit
    def block_scan(v, tid, lds):
        """Inclusive scan of ``v`` over the workgroup in thread order (ends after a barrier)."""
        lane = tid % WAVE
        wave = tid // WAVE
        for s in range_constexpr(6):
            off = 1 << s
            up = gpu.shuffle_up(v, off, WAVE)
            v = (lane >= off).select(v + up, v)
        if lane == WAVE - 1:
            lds.wsum[wave] = v
        gpu.barrier()
        base = fx.Int32(0)
        for w in range_constexpr(WAVES - 1):
            base = base + (wave > w).select(lds.wsum[w], fx.Int32(0))
        return v + base

    @flyc.kernel(name=spec.name, known_block_size=[T, 1, 1])
    def topk_kernel(X: fx.Tensor, V: fx.Tensor, I: fx.Tensor, rows: fx.Int32, n: fx.Int32, k: fx.Int32,
                    ldx: fx.Int32, ldv: fx.Int32, ldi: fx.Int32, grid: fx.Int32):
        tid = fx.thread_idx.x
        wave = tid // WAVE
        lds = fx.SharedAllocator().allocate(Shared).peek()
        iters = (n + T - 1) // T
        for r in range(fx.block_idx.x, rows, grid):
            base = r * ldx
            # ---- radix select: thr = the k-th largest key, need = how many equal to it to take
            prefix = fx.Uint32(0)
            pmask = fx.Uint32(0)
            need = k
            for p in range_constexpr(PASSES):
                shift = 32 - RADIX_BITS * (p + 1)
                if tid < BINS:
                    for w in range_constexpr(WAVES):
                        lds.hist[w * BINS + tid] = fx.Int32(0)
                gpu.barrier()
                for it in range(iters):
                    i = it * T + tid
                    if i < n:
                        key = key_of(X[base + i])
                        if (key & pmask) == prefix:
                            digit = ((key >> shift) & fx.Uint32(BINS - 1)).to(fx.Int32)
                            atomic_add(lds.hist.ptr + (wave * BINS + digit), fx.Int32(1))
                gpu.barrier()
                # Thread t owns digit 255 - t (threads past 255 count nothing): the inclusive scan
                # in thread order counts the matching keys at or above each digit, and the
                # thread where it reaches `need` owns the digit of the need-th largest key.
                d = fx.Int32(BINS - 1) - tid
                c = fx.Int32(0)
                if tid < BINS:
                    for w in range_constexpr(WAVES):
                        c = c + lds.hist[w * BINS + d]
                incl = block_scan(c, tid, lds)
                excl = incl - c
                if (tid < BINS) & (excl < need) & (need <= incl):
                    lds.sel[0] = d
                    lds.sel[1] = excl
                gpu.barrier()
                d = lds.sel[0]
                prefix = prefix | (d.to(fx.Uint32) << shift)
                pmask = pmask | (fx.Uint32(BINS - 1) << shift)
                need = need - lds.sel[1]
            thr = prefix
            # ---- gather: per-thread counts, one packed scan (above << 16 | equal), then placement
            n_gt = fx.Int32(0)
            n_eq = fx.Int32(0)
            for it in range(iters):
                i = gather_index(it, tid, iters)
                if i < n:
                    key = key_of(X[base + i])
                    n_gt = n_gt + (key > thr).select(fx.Int32(1), fx.Int32(0))
                    n_eq = n_eq + (key == thr).select(fx.Int32(1), fx.Int32(0))
            packed = (n_gt << 16) | n_eq
            incl = block_scan(packed, tid, lds)
            excl = incl - packed
            gt_pos = excl >> 16
            eq_pos = excl & 0xFFFF
            above = k - need
            for j in range_constexpr(SLOT_STEPS):
                s = j * T + tid
                if s < KP:
                    lds.skey[s] = fx.Int32(-(2**31))
                    lds.sidx[s] = fx.Int32(PAD_INDEX)
            gpu.barrier()
            for it in range(iters):
                i = gather_index(it, tid, iters)
                if i < n:
                    key = key_of(X[base + i])
                    if key > thr:
                        lds.skey[gt_pos] = (key ^ fx.Uint32(0x80000000)).to(fx.Int32)
                        lds.sidx[gt_pos] = i
                    if (key == thr) & (eq_pos < need):
                        lds.skey[above + eq_pos] = (key ^ fx.Uint32(0x80000000)).to(fx.Int32)
                        lds.sidx[above + eq_pos] = i
                    gt_pos = gt_pos + (key > thr).select(fx.Int32(1), fx.Int32(0))
                    eq_pos = eq_pos + (key == thr).select(fx.Int32(1), fx.Int32(0))
            gpu.barrier()
            # ---- bitonic sort of the k_pad survivors: key descending, index ascending
            if fx.const_expr(SORTED):
                for log_size in range_constexpr(1, LOG_KP + 1):
                    size = 1 << log_size
                    for log_step in range_constexpr(log_size):
                        stride = size >> (log_step + 1)
                        for j in range_constexpr(PAIR_STEPS):
                            q = j * T + tid
                            if q < KP // 2:
                                lo = (q // stride) * stride * 2 + q % stride
                                hi = lo + stride
                                ka = lds.skey[lo]
                                kb = lds.skey[hi]
                                ia = lds.sidx[lo]
                                ib = lds.sidx[hi]
                                # a before b in the final order: larger key, or equal key and smaller index
                                a_first = (ka > kb) | ((ka == kb) & (ia < ib))
                                descending = (lo & size) == 0
                                swap = a_first != descending
                                if swap:
                                    lds.skey[lo] = kb
                                    lds.skey[hi] = ka
                                    lds.sidx[lo] = ib
                                    lds.sidx[hi] = ia
                        gpu.barrier()
            # ---- store: values re-read at the survivors' indices, int64 indices
            for j in range_constexpr(SLOT_STEPS):
                s = j * T + tid
                if s < k:
                    idx = lds.sidx[s]
                    V[r * ldv + s] = X[base + idx]
                    I[r * ldi + s] = idx.to(fx.Int64)
            gpu.barrier()  # LDS is reused by the next row

    @flyc.jit
    def launch(X: fx.Tensor, V: fx.Tensor, I: fx.Tensor, rows: fx.Int32, n: fx.Int32, k: fx.Int32,
               ldx: fx.Int32, ldv: fx.Int32, ldi: fx.Int32, grid: fx.Int32, stream: fx.Stream = fx.Stream(None)):
        topk_kernel(X, V, I, rows, n, k, ldx, ldv, ldi, grid).launch(grid=(grid, 1, 1), block=(T, 1, 1),
                                                                   stream=stream)

    launch.__name__ = spec.name
    return launch
