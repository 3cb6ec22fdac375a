"""The register TopK kernel for gfx950 (small k): one wave64 per row, a sorted top-``k_pad`` list
per lane in VGPRs, a butterfly merge across the wave, no LDS and no atomics.

Per row ``x[r, 0:n]`` (unit stride, rows ``ldx`` elements apart); a workgroup of ``threads``
(two waves) takes two rows, workgroups loop over rows with a grid stride:

1. **Keys and order.** Each element maps to the 32-bit key of the radix path (``kernel.py``):
   ``bits ^ (sign ? 0xFFFFFFFF : 0x80000000)`` of its fp32 value (fp16/bf16 widen exactly),
   every NaN -> ``0xFFFFFFFF`` (one ordinal), inverted for ``largest=False``. A candidate is
   the 64-bit ``key << 32 | (0xFFFFFFFF - index)``: its unsigned order is key descending, then
   index ascending, a total order on a row's elements; padding is 0, below every element.
2. **Streaming.** Each lane reads 16-byte chunks (4 fp32 or 8 fp16/bf16 elements; lane ``l``
   of chunk ``c`` holds elements ``(c * 64 + l) * vec ...``), ``UNROLL`` chunks in flight per
   loop step, through a buffer resource bounded at the row's end. A lane merges a chunk only
   where one of its keys reaches the wave's threshold ``t`` (else the branch is skipped with
   ``s_cbranch_execz`` when no lane of the wave needs it): ``t``, refreshed once per step, is
   the larger of the lanes' largest ``k_pad``-th best key (a butterfly max) and the
   ``k_pad``-th largest of the lanes' best keys (a bitonic sort across the wave), each a lower
   bound of the row's k-th key, so nothing skipped can belong to the result. The next step's
   chunks are loaded before this step's merges (one step of prefetch). A merge sorts the chunk in groups of
   ``min(k_pad, vec)`` (bitonic network), then merges each group into the lane's sorted list:
   ``d[i] = max(list[i], group[k_pad-1-i])`` is bitonic and holds the top ``k_pad``; a bitonic
   merge sorts it.
3. **Tail.** The last partial chunks (and rows shorter than a wave) are read masked: elements
   past ``n`` have key 0 and an index past ``n``, so they rank below every element of the row.
   The buffer unit range-checks whole dwords, so a 16-bit row of odd ``n`` reads its last
   element as 0; that element's key comes from a scalar load of it instead.
4. **Cross-lane merge.** Six butterfly steps (``shuffle xor`` 1, 2, ..., 32: ``ds_swizzle`` /
   DPP / ``ds_bpermute`` as LLVM lowers them) merge each lane's list with its partner's the same
   way; both partners compute the same list, so after step 6 every lane holds the row's sorted
   top ``k_pad``.
5. **Store.** Lane ``j < k`` writes pair ``j``: the value re-read from the row at its index (the
   input's exact bits), the index as int64. Always sorted (``sorted=False`` allows any order).

The result is a function of the input only (no atomics, no LDS, no order between waves): the
same bits on every run, ties in index order, in and out of deterministic mode.
"""

# No `from __future__ import annotations`: FlyDSL reads the kernel annotations as objects.
from dataclasses import dataclass

import flydsl.compiler as flyc
import flydsl.expr as fx
import torch
from flydsl.expr import const_expr, gpu, range_constexpr, rocdl

from ...runtime.recipe import kernel_builder
from .config import TopKConfig

WAVE = 64
UNROLL = 4  # 16-byte chunks in flight per lane per loop step
_FX_DTYPE = {torch.float32: "Float32", torch.float16: "Float16", torch.bfloat16: "BFloat16"}
_SHORT = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}


@dataclass(frozen=True)
class RegisterSpec:
    cfg: TopKConfig
    dtype: torch.dtype
    largest: bool

    @property
    def vec(self) -> int:
        return 16 // self.dtype.itemsize

    @property
    def name(self) -> str:
        order = "largest" if self.largest else "smallest"
        return f"flydsl_topk_{_SHORT[self.dtype]}_{order}_{self.cfg.key()}"


def _ce(a, b):
    """Compare-exchange of two candidates: ``(larger, smaller)``."""
    gt = a > b
    return gt.select(a, b), gt.select(b, a)


def sort_desc(v: list) -> list:
    """Bitonic sort (descending) of a power-of-two list of candidates, unrolled."""
    v = list(v)
    m = len(v)
    size = 2
    while size <= m:
        stride = size // 2
        while stride >= 1:
            for i in range(m):
                j = i ^ stride
                if j > i:
                    hi, lo = _ce(v[i], v[j])
                    desc = (i & size) == 0
                    v[i], v[j] = (hi, lo) if desc else (lo, hi)
            stride //= 2
        size *= 2
    return v


def merge_sorted(a: list, b: list) -> list:
    """The top ``len(a)`` of ``a`` (sorted descending, power-of-two length) and ``b`` (sorted
    descending, no longer than ``a``), sorted descending."""
    K = len(a)
    d = list(a)
    for i in range(K - len(b), K):
        x, y = a[i], b[K - 1 - i]
        d[i] = (x > y).select(x, y)
    stride = K // 2
    while stride >= 1:  # bitonic merge of the (V-shaped) bitonic sequence d
        for i in range(K):
            if i & stride == 0:
                d[i], d[i + stride] = _ce(d[i], d[i + stride])
        stride //= 2
    return d


@kernel_builder
def build(spec: RegisterSpec):
    """The ``@flyc.jit`` launcher for ``spec``; the radix kernel's signature:
    ``launch(x, values, indices, rows, n, k, ldx, ldv, ldi, grid, stream)`` (1-D unit-stride
    views, ``ld*`` row strides in elements, ``grid`` workgroups). Needs ``1 <= k <= min(n, k_pad)``.
    """
    cfg = spec.cfg
    T = cfg.threads
    WAVES = T // WAVE
    K = cfg.k_pad
    VEC = spec.vec
    G = min(K, VEC, 4)  # chunk elements sorted and merged together (8 at a time: SGPR spills at k_pad 16)
    STEP = WAVE * VEC  # elements per chunk (all lanes)
    LARGEST = spec.largest
    elem = getattr(fx, _FX_DTYPE[spec.dtype])
    ebytes = spec.dtype.itemsize

    def key_of(v):
        f = v if const_expr(spec.dtype == torch.float32) else v.to(fx.Float32)
        u = f.bitcast(fx.Uint32)
        # sign ? 0xFFFFFFFF : 0x80000000 as an arithmetic shift and an or (no compare)
        mask = (f.bitcast(fx.Int32) >> 31).to(fx.Uint32) | fx.Uint32(0x80000000)
        key = (f != f).select(fx.Uint32(0xFFFFFFFF), u ^ mask)
        if const_expr(not LARGEST):
            key = key ^ fx.Uint32(0xFFFFFFFF)
        return key

    def candidate(key, j):
        """``key << 32 | (0xFFFFFFFF - j)`` as Uint64."""
        return (key.to(fx.Uint64) << 32) | (j ^ fx.Int32(-1)).to(fx.Uint32).to(fx.Uint64)

    def chunk_keys(chunk, j0, n, masked: bool, last=None):
        keys = []
        for e in range_constexpr(VEC):
            key = key_of(chunk[e])
            if const_expr(masked):
                if const_expr(ebytes == 2):
                    key = (j0 + e == n - 1).select(last, key)
                key = (j0 + e < n).select(key, fx.Uint32(0))
            keys.append(key)
        return keys

    def reaches(keys, t):
        """Whether one of the chunk's keys reaches ``t`` (their max, then one compare)."""
        top = keys[0]
        for e in range_constexpr(1, VEC):
            top = (keys[e] > top).select(keys[e], top)
        return top >= t

    def merge_chunk(lst, keys, j0):
        for g in range_constexpr(VEC // G):
            group = [candidate(keys[g * G + e], j0 + (g * G + e)) for e in range_constexpr(G)]
            lst = merge_sorted(lst, sort_desc(group))
        return lst

    def shuffle64(c, off):
        lo = (c & fx.Uint64(0xFFFFFFFF)).to(fx.Uint32).to(fx.Int32)
        hi = (c >> 32).to(fx.Uint32).to(fx.Int32)
        lo = lo.shuffle_xor(off, WAVE).to(fx.Uint32)
        hi = hi.shuffle_xor(off, WAVE).to(fx.Uint32)
        return (hi.to(fx.Uint64) << 32) | lo.to(fx.Uint64)

    def wave_max(v):
        for s in range_constexpr(6):
            o = v.to(fx.Int32).shuffle_xor(1 << s, WAVE).to(fx.Uint32)
            v = (o > v).select(o, v)
        return v

    def kth_largest(v, lane):
        """The K-th largest of the 64 lanes' ``v`` (every lane gets it): a bitonic sort across
        the wave (21 shuffle-xor stages), then lane K-1's value."""
        size = 2
        while size <= WAVE:
            stride = size // 2
            while stride >= 1:
                o = v.to(fx.Int32).shuffle_xor(stride, WAVE).to(fx.Uint32)
                hi = (o > v).select(o, v)
                lo = (o > v).select(v, o)
                keep_hi = ((lane & size) == 0) == ((lane & stride) == 0)
                v = keep_hi.select(hi, lo)
                stride //= 2
            size *= 2
        return gpu.shuffle_idx(v.to(fx.Int32), K - 1, WAVE).to(fx.Uint32)

    def threshold(lst, lane):
        """A lower bound of the row's k_pad-th key so far (every lane gets it): the larger of
        the largest lane's k_pad-th key and the k_pad-th largest of the lanes' best keys (each
        has k_pad elements at or above it)."""
        a = wave_max((lst[K - 1] >> 32).to(fx.Uint32))
        b = kth_largest((lst[0] >> 32).to(fx.Uint32), lane)
        return (a > b).select(a, b)

    @flyc.kernel(name=spec.name, known_block_size=[T, 1, 1])
    def topk_register_kernel(X: fx.Tensor, V: fx.Tensor, I: fx.Tensor, rows: fx.Int32, n: fx.Int32, k: fx.Int32,
                             ldx: fx.Int32, ldv: fx.Int32, ldi: fx.Int32, grid: fx.Int32):
        tid = fx.thread_idx.x
        lane = tid % WAVE
        wave = tid // WAVE
        x_ptr = fx.get_iter(X)
        full = n // (STEP * UNROLL)
        rest = n - full * (STEP * UNROLL)
        tail = (rest + (STEP - 1)) // STEP
        vty = fx.Vector.make_type(VEC, elem)
        for rr in range(fx.block_idx.x * WAVES + wave, rows, grid * WAVES):
            r = fx.Int32(rr)
            base = r * ldx
            row = rocdl.make_buffer_ptr(x_ptr + base, num_records_bytes=fx.Int64(n) * ebytes)
            # The buffer unit range-checks whole dwords: an odd 16-bit row's last element shares
            # its dword with the next row and reads 0; the tail takes its key from a scalar load.
            last = fx.Uint32(0)
            if const_expr(ebytes == 2):
                last = key_of(X[base + n - 1])
            lst = [fx.Uint64(0) for _ in range_constexpr(K)]
            t = fx.Uint32(0)
            # One step ahead: step it + 1's chunks load while step it merges (the loads of the
            # last step's successor fall past the row's end or into its tail: never used).
            nxt = [fx.ptr_load(row + (lane * VEC + u * STEP), result_type=vty) for u in range_constexpr(UNROLL)]
            for it in range(full):
                c0 = fx.Int32(it) * (STEP * UNROLL) + lane * VEC
                chunks = nxt
                nxt = [fx.ptr_load(row + (c0 + (UNROLL + u) * STEP), result_type=vty) for u in range_constexpr(UNROLL)]
                for u in range_constexpr(UNROLL):
                    j0 = c0 + u * STEP
                    keys = chunk_keys(chunks[u], j0, n, False)
                    if reaches(keys, t):
                        lst = merge_chunk(lst, keys, j0)
                t = threshold(lst, lane)
            for c in range(tail):
                j0 = full * (STEP * UNROLL) + fx.Int32(c) * STEP + lane * VEC
                chunk = fx.ptr_load(row + j0, result_type=vty)
                keys = chunk_keys(chunk, j0, n, True, last)
                if reaches(keys, t):
                    lst = merge_chunk(lst, keys, j0)
            for s in range_constexpr(6):
                lst = merge_sorted(lst, [shuffle64(lst[i], 1 << s) for i in range_constexpr(K)])
            mine = lst[0]
            for j in range_constexpr(1, K):
                mine = (lane == j).select(lst[j], mine)
            if lane < k:
                idx = ((mine & fx.Uint64(0xFFFFFFFF)).to(fx.Uint32) ^ fx.Uint32(0xFFFFFFFF)).to(fx.Int32)
                V[r * ldv + lane] = X[base + idx]
                I[r * ldi + lane] = idx.to(fx.Int64)

    @flyc.jit
    def launch(X: fx.Tensor, V: fx.Tensor, I: fx.Tensor, rows: fx.Int32, n: fx.Int32, k: fx.Int32,
               ldx: fx.Int32, ldv: fx.Int32, ldi: fx.Int32, grid: fx.Int32, stream: fx.Stream = fx.Stream(None)):
        topk_register_kernel(X, V, I, rows, n, k, ldx, ldv, ldi, grid).launch(grid=(grid, 1, 1), block=(T, 1, 1),
                                                                            stream=stream)

    launch.__name__ = spec.name
    return launch
