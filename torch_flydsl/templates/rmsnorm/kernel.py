"""The RMSNorm forward kernel for gfx950: ``y = x * rsqrt(mean(x^2) + eps) * weight`` per row,
fp32 math, ``y`` rounded once to the input dtype, fp32 ``rstd`` per row.

One kernel per ``KernelSpec`` (dtype, weight on/off, config) serves every row count and every
row length up to the config's register capacity.

* Rows -> GPU: ``waves`` wave64 waves per row; with one wave per row a workgroup takes
  ``rows_per_block`` rows (one per wave). The grid is capped (``config.MAX_WORKGROUPS``) and
  workgroups loop over rows with a grid stride, so any row count fits the launch limits.
* One pass over ``x``: each thread loads its ``slots`` 16-byte vectors of the row into
  registers, the sum of squares is taken from those registers, and the same registers are
  scaled and stored; ``x`` is read from memory once.
* Alignment (any ``n``, e.g. 4097): rows of a contiguous ``[rows, n]`` input start wherever
  ``row * n`` puts them. Per row, the first ``head`` elements up to the first 16-byte boundary
  and the ``tail`` after the last whole vector are loaded and stored as scalars (one element
  per thread, at most 2 * vec - 2 of them); the body in between is whole 16-byte vectors at
  16-byte aligned addresses of ``x`` and ``y`` (they share a layout). ``weight`` element ``j``
  pairs with ``x`` element ``j``, so when ``n`` is not a multiple of ``vec`` the weight vectors
  of a row start at ``head`` (2-byte aligned for 16-bit data): buffer loads take unaligned
  addresses (ROCm runs gfx9+ with SH_MEM_CONFIG's unaligned mode); every weight vector lies
  inside ``weight``, never straddling its end.
* Masking without branches: an inactive vector or scalar points its buffer offset at the end
  of the operand's exact span (``num_records``); the buffer unit returns zeros for such loads
  without fetching and drops such stores.
* Reduction: per-thread fp32 sum, a wave butterfly (``gpu.shuffle xor``), then, with several
  waves per row, one partial per wave through LDS and one barrier per row; the partials are
  double-buffered by row parity, so a wave that races ahead to the next row never overwrites
  partials another wave is still reading.
"""

# No `from __future__ import annotations`: FlyDSL reads the kernel annotations as objects.
import math
from dataclasses import dataclass

import flydsl.compiler as flyc
import flydsl.expr as fx
import torch
from flydsl.expr import const_expr, gpu, range_constexpr, rocdl

from ...runtime.recipe import kernel_builder
from .config import WAVE_SIZE, RmsNormConfig

_ELEM = {torch.bfloat16: ("bf16", "BFloat16"), torch.float16: ("fp16", "Float16"), torch.float32: ("fp32", "Float32")}


@dataclass(frozen=True)
class KernelSpec:
    cfg: RmsNormConfig
    dtype: torch.dtype
    has_weight: bool

    @property
    def vec(self) -> int:
        return 16 // self.dtype.itemsize

    @property
    def name(self) -> str:
        return f"flydsl_rmsnorm_{_ELEM[self.dtype][0]}_{self.cfg.key()}_w{int(self.has_weight)}"

    def elem_type(self):
        return getattr(fx, _ELEM[self.dtype][1])


def buffer_of(t, elem_bytes: int):
    """A buffer view of the 1-D operand ``t`` whose num_records is its exact byte span (loads
    past it read zeros without a fetch, stores past it are dropped)."""
    n_bytes = fx.Int64(fx.get_scalar(fx.size(fx.get_layout(t)))) * elem_bytes
    return rocdl.make_buffer_tensor(t, num_records_bytes=n_bytes)


def span_of(t):
    """Elements in the 1-D operand ``t``: the masked-off offset (just past num_records)."""
    return fx.get_scalar(fx.size(fx.get_layout(t)))


def wave_sum(v):
    """Butterfly sum over the 64 lanes of a wave: every lane ends with the total."""
    for s in range_constexpr(int(math.log2(WAVE_SIZE))):
        v = v + v.shuffle_xor(WAVE_SIZE // (2 << s), WAVE_SIZE)
    return v


class Row:
    """The part of one row a thread owns: ``slots`` body vectors and at most one head/tail scalar,
    loaded into registers (fp32 for the math; the packed vectors are kept as loaded)."""

    def __init__(self, spec: KernelSpec, lane, row, n, x_iter, x_end):
        cfg, vec, elem = spec.cfg, spec.vec, spec.elem_type()
        tpr = cfg.threads_per_row
        self.spec, self.lane = spec, lane
        start = row * n
        # Elements before the first 16-byte boundary of the row (x's base is 16-byte aligned).
        mis = start % vec
        head = (mis == 0).select(0, vec - mis)
        head = (head < n).select(head, n)
        body = (n - head) // vec
        tail = n - head - body * vec
        self.head, self.body = head, body
        self.vec_off = []
        self.vals = []
        for s in range_constexpr(cfg.slots):
            v = s * tpr + lane
            on = v < body
            self.vec_off.append((on, v * vec + head))
            off = on.select(start + head + v * vec, x_end)
            self.vals.append(fx.ptr_load(x_iter + off, result_type=fx.Vector.make_type(vec, elem)))
        # Scalars: lanes [0, head) take the head, lanes [vec, vec + tail) the tail.
        tail_lane = lane - vec
        in_head = lane < head
        in_tail = (lane >= vec) & (tail_lane < tail)
        col = in_head.select(lane, head + body * vec + tail_lane)
        self.s_on = in_head | in_tail
        self.s_col = col
        self.scalar = fx.ptr_load(x_iter + self.s_on.select(start + col, x_end))

    def sum_squares(self):
        acc = None
        for s in range_constexpr(self.spec.cfg.slots):
            f = self.vals[s].to(fx.Float32)
            part = (f * f).reduce("add")
            acc = part if acc is None else acc + part
        f = self.scalar.to(fx.Float32)
        return acc + f * f

    def store(self, rstd, y_iter, y_end, w_iter, w_end, row, n):
        spec, vec, elem = self.spec, self.spec.vec, self.spec.elem_type()
        start = row * n
        for s in range_constexpr(spec.cfg.slots):
            on, col = self.vec_off[s]
            f = self.vals[s].to(fx.Float32) * rstd
            if const_expr(spec.has_weight):
                w = fx.ptr_load(w_iter + on.select(col, w_end), result_type=fx.Vector.make_type(vec, elem))
                f = f * w.to(fx.Float32)
            fx.ptr_store(f.to(elem), y_iter + on.select(start + col, y_end))
        f = self.scalar.to(fx.Float32) * rstd
        if const_expr(spec.has_weight):
            f = f * fx.ptr_load(w_iter + self.s_on.select(self.s_col, w_end)).to(fx.Float32)
        fx.ptr_store(f.to(elem), y_iter + self.s_on.select(start + self.s_col, y_end))


@kernel_builder
def build(spec: KernelSpec):
    """The ``@flyc.jit`` launcher for ``spec``.

    Signature: ``launch(y, rstd, x, w, rows, n, n_f, eps, workgroups, stream)``: ``y``/``x``
    the contiguous ``[rows, n]`` output and input as 1-D views (16-byte aligned starts), ``rstd``
    fp32 ``[rows]``, ``w`` the ``[n]`` weight (any 1-D tensor when there is none: not read),
    ``n_f`` = float(n), ``eps`` fp32, ``workgroups`` the grid. Block ``(threads, 1, 1)``.
    """
    cfg = spec.cfg
    THREADS, TPR, RPB, WAVES = cfg.threads, cfg.threads_per_row, cfg.rows_per_block, cfg.waves
    elem_bytes = spec.dtype.itemsize

    @fx.struct
    class Partials:
        part: fx.Array[fx.Float32, 2 * WAVES, 16]

    @flyc.kernel(name=spec.name, known_block_size=[THREADS, 1, 1])
    def rmsnorm_kernel(
        y: fx.Tensor,
        rstd_out: fx.Tensor,
        x: fx.Tensor,
        w: fx.Tensor,
        rows: fx.Int32,
        n: fx.Int32,
        n_f: fx.Float32,
        eps: fx.Float32,
        workgroups: fx.Int32,
    ):
        tid = fx.thread_idx.x
        wave = tid // WAVE_SIZE
        x_buf = buffer_of(x, elem_bytes)
        y_buf = buffer_of(y, elem_bytes)
        r_buf = buffer_of(rstd_out, 4)
        x_iter, y_iter, r_iter = fx.get_iter(x_buf), fx.get_iter(y_buf), fx.get_iter(r_buf)
        x_end, y_end, r_end = span_of(x), span_of(y), span_of(rstd_out)
        w_iter = None
        w_end = None
        if const_expr(spec.has_weight):
            w_iter = fx.get_iter(buffer_of(w, elem_bytes))
            w_end = span_of(w)
        part = None
        if const_expr(WAVES > 1):
            part = fx.SharedAllocator().allocate(Partials).peek().part.view(fx.make_layout(2 * WAVES, 1))
        if const_expr(RPB > 1):
            lane = tid % WAVE_SIZE  # one wave per row
            first = fx.block_idx.x * RPB + wave
        else:
            lane = tid
            first = fx.block_idx.x
        stride = workgroups * RPB
        iters = (rows - first + (stride - 1)) // stride
        for it in range(iters):
            row = first + it * stride
            r = Row(spec, lane, row, n, x_iter, x_end)
            ss = wave_sum(r.sum_squares())
            if const_expr(WAVES > 1):
                base = (it % 2) * WAVES
                if tid % WAVE_SIZE == 0:
                    fx.memref_store(ss, part, base + wave)
                gpu.barrier()
                ss = fx.memref_load(part, base)
                for k in range_constexpr(1, WAVES):
                    ss = ss + fx.memref_load(part, base + k)
            rstd = fx.math.rsqrt(ss / n_f + eps)
            r.store(rstd, y_iter, y_end, w_iter, w_end, row, n)
            fx.ptr_store(rstd, r_iter + (lane == 0).select(row, r_end))

    @flyc.jit
    def launch(
        y: fx.Tensor,
        rstd_out: fx.Tensor,
        x: fx.Tensor,
        w: fx.Tensor,
        rows: fx.Int32,
        n: fx.Int32,
        n_f: fx.Float32,
        eps: fx.Float32,
        workgroups: fx.Int32,
        stream: fx.Stream = fx.Stream(None),
    ):
        rmsnorm_kernel(y, rstd_out, x, w, rows, n, n_f, eps, workgroups).launch(
            grid=(workgroups, 1, 1), block=(THREADS, 1, 1), stream=stream
        )

    return launch
