"""A small MI355X model of a GEMM kernel from its main K loop's gfx950 ISA: the "sim" (a replay of
the steady loop on one model CU) and the "static" throughput bound. Pure functions: no FlyDSL,
no torch. MODEL, NOT MEASUREMENT: every figure below is a stated constant (``Constants``, each
printed and overridable by ``benchmarks/isa_compare.py --set NAME=VALUE``), not a measurement.

The loop as a program (``program``): each instruction of the main K loop in loop order (see
``torch_flydsl.runtime.isa``) becomes one op:

* ``m`` an MFMA of a kind; its pipe time ``mfma_cycles(kind)``: ``v_mfma_f32_16x16x32_{bf16,f16}``
  ``mfma_bf16`` (16 clk: LLVM's gfx950 scheduling model); ``v_mfma_scale_f32_16x16x128_f8f6f4``
  ``mfma_scaled_fp8`` (32) when an operand is FP8/BF8, ``mfma_scaled_fp4`` (16) when both are FP4
  or FP6 (AMD's published MI355X rates; LLVM says 16 for all with a FIXME); a 32x32 shape
  ``mfma_32x32_factor`` (2) times its 16x16 one.
* ``d`` a global load (a DMA to LDS, or a plain load): ``64 x`` its bytes per lane.
* ``l`` an LDS read or write (``ds_*``): ``64 x`` its bytes per lane.
* ``k`` a scalar memory load; ``w`` an ``s_waitcnt`` (its ``vmcnt`` / ``lgkmcnt``); ``b`` an
  ``s_barrier``; ``v`` any other vector instruction; ``s`` any other scalar one.

The sim (``simulate``): ``resident`` workgroups of ``waves`` waves on one CU of ``simds`` SIMDs
(wave ``g`` of the CU on SIMD ``g mod simds``), every wave running the loop ``sim_iterations``
times from empty queues. A wave issues in order; its clock ``t`` advances by:

* MFMA: starts at ``max(t, pipe free)`` on its SIMD's MFMA pipe, which it holds for
  ``mfma_cycles(kind)``; the wave goes on ``vector_issue`` (4) cycles after the start (independent
  MFMAs pipeline; accumulator dependences are not modelled).
* global load: the CU's fill port (L2 -> CU, ``fill_bytes_per_clk`` B/clk) serves the bytes in
  issue order; the load completes ``dma_latency x latency_scale`` cycles after its bytes are
  served. A DMA's bytes also take the LDS port (below) at issue. The wave goes on after ``vector_issue``.
* LDS op: the CU's LDS port serves ``lds_bytes_per_clk`` B/clk in issue order; the op completes
  ``lds_latency`` cycles after its bytes are served; the wave goes on after ``vector_issue``.
* scalar load: completes ``smem_latency x latency_scale`` later (lgkm counter), ``scalar_issue``.
* ``s_waitcnt vmcnt(n) lgkmcnt(j)``: the wave waits until at most n of its global loads (j of its
  LDS/scalar ops) are outstanding (each counter drains in issue order), then ``scalar_issue``.
* ``s_barrier``: the n-th barrier of every wave of a workgroup releases all of them
  ``barrier_cycles`` after the last arrives. Two wave groups: when the ISA shows a barrier before
  the loop that some waves skip (``isa.skippable_barriers_before_loop``: the in-tree HTI kernel's
  ``wid // n_waves == 1`` group), the second half of the waves enters the loop one barrier ahead
  (their n-th loop barrier meets the first half's (n+1)-th). When each group has its own loop
  (``isa.wave_group_loops``: the plugin's MX ping-pong kernel), the first half runs the leading
  loop and the second half the lagging one, offset the same way.
* anything else: ``vector_issue`` (vector) or ``scalar_issue`` (scalar) cycles.

The steady period ``P`` is the mean time per loop iteration over the last iterations that every
wave finished (from iteration ``sim_iterations // 2 - 1``), divided by K tiles per iteration:
cycles per K tile with ``resident`` workgroups each advancing one K tile.

The static bound (``static_period``): per K tile, with ``r`` workgroups of ``w`` waves
resident on a CU, ``P = max(ceil(r w / simds) x C_mfma, r w x B_lds / lds_bytes_per_clk,
r w x B_fill / fill_bytes_per_clk)``: C_mfma the MFMA pipe cycles one wave issues per K tile,
B_lds its LDS bytes (reads, writes and DMA bytes landing in LDS), B_fill its global-load bytes.
No latency, perfect overlap.

A kernel's time on a shape (``kernel_time``; the same for both models, ``P(r)`` from either):
the busiest CU holds ``q = ceil(grid / cus)`` workgroups, at most ``r_max`` (occupancy from
VGPRs/LDS) at once; each walks ``tiles`` output tiles (persistent kernels; else 1) of ``kt``
K tiles. ``cycles = floor(q / r_max) x T(r_max) + T(q mod r_max)`` with
``T(r) = tiles x (kt x P(r) + overhead)``; ``overhead`` is 0 for the static bound and
``2 x dma_latency x latency_scale`` for the sim (filling the pipeline before the first tile and
draining the epilogue's stores). ``time = max(cycles / clock, hbm_bytes / hbm_bandwidth) +
handoff + (launches - 1) x launch_gap``; ``handoff`` is a split-K kernel's last-arriver wait,
``2 x round_trip_us x latency_scale`` (a counter atomic and the partial tiles' read).

Not modelled: clocks under load, the Infinity Cache, XCD placement, L2 hit rates beyond the fill
port, VALU contention, instruction-cache misses, what happens outside the main loop besides the
stated overhead.
"""

from __future__ import annotations

import heapq
import math
import re
from collections import deque
from dataclasses import asdict, dataclass, fields, replace
from typing import Callable, Iterable, Optional, Sequence

from torch_flydsl.runtime import isa


@dataclass(frozen=True)
class Constants:
    """Every constant of the model (MI355X unless said): printed by every report, overridable."""

    clock_ghz: float = 2.4  # spec peak; ~2.0 sustained is measured (landscape_2026_12.md)
    cus: int = 256
    simds: int = 4
    hbm_tbps: float = 8.0  # spec; ~7.2 measured
    fill_bytes_per_clk: float = 64.0  # L2 -> CU per CU: 16 x 128 B/clk per XCD of 32 CUs (CDNA3's L2, assumed)
    lds_bytes_per_clk: float = 128.0  # CDNA3's figure; CDNA4's unpublished: report 128 and 256
    dma_latency: float = 1000.0  # cycles, global load issue -> data in LDS / registers (assumed; ~420 ns)
    latency_scale: float = 1.0  # multiplies dma_latency, smem_latency and round_trip_us (corners 0.6, 1.6)
    lds_latency: float = 64.0  # cycles after the LDS port served the bytes (assumed)
    smem_latency: float = 200.0  # cycles (assumed)
    barrier_cycles: float = 16.0  # release after the last wave arrives (assumed)
    vector_issue: float = 4.0  # cycles a wave64 takes to issue a vector/memory instruction (16-lane SIMD)
    scalar_issue: float = 1.0
    mfma_bf16: float = 16.0  # v_mfma_f32_16x16x32_bf16 per SIMD (LLVM's gfx950 model)
    mfma_scaled_fp8: float = 32.0  # v_mfma_scale_f32_16x16x128_f8f6f4, an FP8/BF8 operand
    mfma_scaled_fp4: float = 16.0  # the same, FP4/FP6 x FP4/FP6
    mfma_32x32_factor: float = 2.0
    launch_gap_us: float = 1.0  # each launch after the first (assumed)
    round_trip_us: float = 0.7  # one dependent access past L2 (split-K handoff; assumed)
    lds_per_cu: int = 160 * 1024
    threads_per_cu: int = 2048
    sim_iterations: int = 20  # the period is measured over the second half (converged on every loop tried at 20)

    def with_overrides(self, pairs: Iterable[str]) -> "Constants":
        """``NAME=VALUE`` pairs (``--set``); ValueError names an unknown constant."""
        types_ = {f.name: f.type for f in fields(self)}
        changes: dict = {}
        for pair in pairs:
            name, _, value = pair.partition("=")
            name = name.strip()
            if name not in types_ or not value:
                raise ValueError(f"--set {pair!r}: constants are {', '.join(types_)} (NAME=VALUE)")
            changes[name] = int(value) if types_[name] in (int, "int") else float(value)
        return replace(self, **changes)

    def describe(self) -> str:
        return ", ".join(f"{k}={v:g}" for k, v in asdict(self).items())


CORNERS = ((128.0, 0.6), (128.0, 1.6), (256.0, 0.6), (256.0, 1.6))  # (lds_bytes_per_clk, latency_scale)


def corner(c: Constants, lds: float, lat: float) -> Constants:
    return replace(c, lds_bytes_per_clk=lds, latency_scale=lat)


def corner_name(lds: float, lat: float) -> str:
    return f"LDS{lds:g}/lat{lat:g}"


def mfma_cycles(kind: str, c: Constants) -> float:
    """SIMD pipe cycles of one MFMA of ``kind`` (``isa.mfma_kind``)."""
    if "f8f6f4" in kind:
        fmts = kind.split(" ", 1)[1].split("x") if " " in kind else ["fp8", "fp8"]
        base = c.mfma_scaled_fp8 if any(f in ("fp8", "bf8") for f in fmts) else c.mfma_scaled_fp4
    else:
        base = c.mfma_bf16
    return base * (c.mfma_32x32_factor if "32x32" in kind else 1.0)


# -- the loop as a program ---------------------------------------------------------------------

Op = tuple  # ("m", kind) | ("d", bytes) | ("l", bytes) | ("k",) | ("w", vmcnt, lgkmcnt) | ("b",) | ("v",) | ("s",)


def program(instructions: Sequence[isa.Instruction]) -> list[Op]:
    """The loop's instructions (loop order) as the sim's ops (see the module docstring)."""
    ops: list[Op] = []
    for ins in instructions:
        op = ins.op
        if isa.is_mfma(ins):
            ops.append(("m", isa.mfma_kind(ins)))
        elif op.startswith(("buffer_", "global_")):
            ops.append(("d", 64 * (isa.vmem_bytes_per_lane(ins) or 4)))
        elif op.startswith("ds_"):
            ops.append(("l", 64 * (isa.lds_bytes_per_lane(ins) or 4)))
        elif op.startswith(("s_load", "s_buffer_load")):
            ops.append(("k",))
        elif op == "s_waitcnt":
            f = isa.wait_fields(ins)
            ops.append(("w", f.get("vmcnt", -1), f.get("lgkmcnt", -1)))
        elif op == "s_barrier":
            ops.append(("b",))
        elif op.startswith("s_"):
            ops.append(("s",))
        else:
            ops.append(("v",))
    return ops


@dataclass(frozen=True)
class TileCosts:
    """What one wave issues per K tile (the static bound's inputs)."""

    mfma_cycles: float
    lds_bytes: float
    fill_bytes: float


def tile_costs(ops: Sequence[Op], tiles_per_iter: float, c: Constants) -> TileCosts:
    dma_lds = sum(o[1] for o in ops if o[0] == "d")  # every loop load of these kernels is a DMA to LDS
    return TileCosts(sum(mfma_cycles(o[1], c) for o in ops if o[0] == "m") / tiles_per_iter,
                     (sum(o[1] for o in ops if o[0] == "l") + dma_lds) / tiles_per_iter,
                     dma_lds / tiles_per_iter)


def static_period(costs: TileCosts, waves: int, resident: int, c: Constants) -> float:
    """Cycles per K tile with ``resident`` workgroups of ``waves`` waves on a CU (the static bound)."""
    w = waves * resident
    return max(math.ceil(w / c.simds) * costs.mfma_cycles, w * costs.lds_bytes / c.lds_bytes_per_clk,
               w * costs.fill_bytes / c.fill_bytes_per_clk)


# -- the sim -------------------------------------------------------------------------------------

class _Queue:
    """A counter's outstanding ops as completion times that drain in issue order."""

    __slots__ = ("times",)

    def __init__(self):
        self.times: deque = deque()

    def push(self, done: float) -> None:
        self.times.append(max(done, self.times[-1]) if self.times else done)

    def wait(self, t: float, allowed: int) -> float:
        """The time at which at most ``allowed`` ops are outstanding (from ``t``)."""
        q = self.times
        while q and q[0] <= t:
            q.popleft()
        while len(q) > allowed:
            t = max(t, q.popleft())
        return t


def simulate(ops: Sequence[Op], waves: int, resident: int, c: Constants, tiles_per_iter: float = 1.0,
             wave_groups: bool = False, lagging_ops: Optional[Sequence[Op]] = None) -> float:
    """Steady cycles per K tile of one workgroup with ``resident`` workgroups on the model CU;
    ``lagging_ops``: the second wave group's own loop (``isa.wave_group_loops``; implies
    ``wave_groups``), the same number of K tiles per iteration."""
    iters = c.sim_iterations
    total = waves * resident
    if lagging_ops is not None:
        wave_groups = True
    prog = [lagging_ops if lagging_ops is not None and g % waves >= waves // 2 else ops for g in range(total)]
    pc = [0] * total
    it = [0] * total
    bars = [0] * total
    released = [False] * total
    vm = [_Queue() for _ in range(total)]
    lgkm = [_Queue() for _ in range(total)]
    ends: list[list[float]] = [[] for _ in range(total)]
    pipe = [0.0] * c.simds
    port = {"lds": 0.0, "fill": 0.0}
    arrivals: dict = {}  # (workgroup, barrier n) -> [count, latest time, parked waves]
    dma_lat, smem_lat = c.dma_latency * c.latency_scale, c.smem_latency * c.latency_scale
    if wave_groups:
        for g in range(total):
            if g % waves >= waves // 2:
                bars[g] = 1
        for r in range(resident):
            arrivals[(r, 1)] = [waves - waves // 2, 0.0, []]
    heap = [(0.0, g) for g in range(total)]
    heapq.heapify(heap)

    def serve(name: str, start: float, nbytes: float, rate: float) -> float:
        s = max(start, port[name])
        port[name] = s + nbytes / rate
        return port[name]

    while heap:
        now, g = heapq.heappop(heap)
        op = prog[g][pc[g]]
        kind = op[0]
        if kind == "m":
            s = g % c.simds
            start = max(now, pipe[s])
            pipe[s] = start + mfma_cycles(op[1], c)
            now = start + c.vector_issue
        elif kind == "d":
            served = serve("fill", now, op[1], c.fill_bytes_per_clk)
            serve("lds", now, op[1], c.lds_bytes_per_clk)
            vm[g].push(served + dma_lat)
            now += c.vector_issue
        elif kind == "l":
            lgkm[g].push(serve("lds", now, op[1], c.lds_bytes_per_clk) + c.lds_latency)
            now += c.vector_issue
        elif kind == "k":
            lgkm[g].push(now + smem_lat)
            now += c.scalar_issue
        elif kind == "w":
            if op[1] >= 0:
                now = vm[g].wait(now, op[1])
            if op[2] >= 0:
                now = lgkm[g].wait(now, op[2])
            now += c.scalar_issue
        elif kind == "b":
            if released[g]:  # the barrier this wave was parked on has released it (at ``now``)
                released[g] = False
            else:
                now += c.scalar_issue
                bars[g] += 1
                key = (g // waves, bars[g])
                a = arrivals.setdefault(key, [0, 0.0, []])
                a[0] += 1
                a[1] = max(a[1], now)
                a[2].append(g)
                if a[0] < waves:
                    continue  # parked until the last wave of its workgroup arrives
                now = a[1] + c.barrier_cycles
                del arrivals[key]
                for w in a[2]:
                    if w != g:
                        released[w] = True
                        heapq.heappush(heap, (now, w))
        else:
            now += c.vector_issue if kind == "v" else c.scalar_issue
        pc[g] += 1
        if pc[g] == len(prog[g]):
            pc[g] = 0
            it[g] += 1
            ends[g].append(now)
        if it[g] < iters:
            heapq.heappush(heap, (now, g))
    done = min(len(e) for e in ends)
    if done < 2:
        raise RuntimeError(f"the sim finished {done} iteration(s) on some wave: the loop's barriers cannot all meet")
    first = max(0, min(iters // 2 - 1, done - 2))
    span = max(e[done - 1] for e in ends) - max(e[first] for e in ends)
    return span / (done - 1 - first) / tiles_per_iter


# -- a kernel on a shape -----------------------------------------------------------------------

@dataclass(frozen=True)
class Work:
    """What a kernel launches for one shape: ``grid`` workgroups, each walking ``tiles`` output
    tiles of ``k_tiles`` K tiles; the unique bytes it must move through HBM; launches; whether
    a split-K handoff follows."""

    grid: int
    tiles: int
    k_tiles: int
    hbm_bytes: float
    launches: int = 1
    split_handoff: bool = False


def kernel_time(work: Work, r_max: int, period: Callable[[int], float], c: Constants,
                overhead_cycles: float = 0.0) -> float:
    """Microseconds for ``work`` (module docstring); ``period(r)``: cycles per K tile with ``r``
    workgroups resident."""
    r_max = max(1, r_max)
    q = -(-work.grid // c.cus)
    full, rem = divmod(q, r_max)

    def t_round(r: int) -> float:
        return work.tiles * (work.k_tiles * period(r) + overhead_cycles)

    cycles = (full * t_round(min(r_max, q)) if full else 0.0) + (t_round(rem) if rem else 0.0)
    us = max(cycles / (c.clock_ghz * 1e3), work.hbm_bytes / (c.hbm_tbps * 1e6))
    if work.split_handoff:
        us += 2 * c.round_trip_us * c.latency_scale
    return us + (work.launches - 1) * c.launch_gap_us


def sim_overhead(c: Constants) -> float:
    return 2 * c.dma_latency * c.latency_scale


def geomean(xs: Iterable[float]) -> float:
    xs = [x for x in xs if x > 0 and math.isfinite(x)]
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else float("nan")


_MMA_RE = re.compile(r"(\d+)x(\d+)x(\d+)")


def mma_shape(kind: str) -> tuple[int, int, int]:
    """(M, N, K) of an MFMA mnemonic (``v_mfma_f32_16x16x32_bf16`` -> (16, 16, 32))."""
    m = _MMA_RE.search(kind)
    if not m:
        raise ValueError(f"no MxNxK in {kind!r}")
    return int(m.group(1)), int(m.group(2)), int(m.group(3))


def optional_float(x: Optional[float]) -> str:
    return "-" if x is None or not math.isfinite(x) else f"{x:.2f}"
