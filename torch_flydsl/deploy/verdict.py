"""Whether a measured FlyDSL time earns a dispatch-table entry: the rules every writer of
entries shares (``bench OP --table``, ``bench.picks``; Inductor's autotuning results under
``TORCH_FLYDSL_RECORD_WINNERS``, ``deploy.winners``).

A table hit replaces the kernel its caller would otherwise run, so FlyDSL is judged against that
kernel, the shape's *baseline*:

1. both FlyDSL and the baseline have a time;
2. no time in the comparison beats the shape's roofline (``roofline_us``, MI355X figures in
   ``PEAKS``) by more than ``ROOFLINE_TOLERANCE``: such a time is bogus (a launch that did no
   work, a timer that missed it; ROCm autotuning has recorded near-zero timings that then won,
   pytorch#193658) and no entry is written on it;
3. FlyDSL beats the baseline by more than ``TIE_BAND`` (1%), and does not lose to ATen by more
   than the band either;
4. ties (within the band) keep the incumbent: an entry would add a dependency on FlyDSL's build
   and cache for no measured gain, and a winner picked by noise changes outputs across restarts.

A shape judged by rules 2-4 is *decided*: its old entries in a table are replaced (``pruned``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Iterable, Optional

TIE_BAND = 0.01


def outcome(x: float, band: float = TIE_BAND) -> str:
    if x > 1 + band:
        return "win"
    if x < 1 - band:
        return "loss"
    return "tie"


@dataclass(frozen=True)
class Peaks:
    """Peak rates no correct timing can beat, per GPU. Every figure is an assumption, not a
    measurement: see ``PEAKS_SOURCE``."""

    hbm_bytes_per_s: float
    cache_bytes: int  # the Infinity Cache (MALL): a warm operand set this small may be served from it
    cache_bytes_per_s: float
    matrix_flops_per_s: dict  # dense (no sparsity) matrix-core peak per operand class

    def flops_per_s(self, operands: str) -> float:
        return self.matrix_flops_per_s[operands]


PEAKS = Peaks(
    hbm_bytes_per_s=8.0e12,
    cache_bytes=256 * 2**20,
    cache_bytes_per_s=17.2e12,
    matrix_flops_per_s={"bf16": 2.5e15, "fp16": 2.5e15, "fp8": 5.0e15, "fp4": 10.0e15},
)
PEAKS_SOURCE = ("AMD Instinct MI355X as AMD publishes it (8 TB/s HBM3E; dense matrix peaks without sparsity: "
                "BF16/FP16 2.5 PFLOP/s, FP8 5 PFLOP/s, MXFP4 10 PFLOP/s; 256 MiB Infinity Cache), and for the "
                "Infinity Cache's bandwidth MI300X's published 17.2 TB/s; assumed, not measured on this GPU (an "
                "MI350X, clocked lower, only makes the bound looser)")
ROOFLINE_TOLERANCE = 0.9  # a time under 0.9 x the roofline is rejected
# The matrix-core class of each table dtype (w4a8: the faster of its two, so the bound stays a
# lower bound).
OPERANDS = {"bfloat16": "bf16", "float16": "fp16", "mxfp8": "fp8", "mxfp8-e5m2": "fp8", "mxfp4": "fp4",
            "w4a8": "fp4"}
ELEMENT_BITS = {"bfloat16": (16, 16), "float16": (16, 16), "mxfp8": (8, 8), "mxfp8-e5m2": (8, 8), "mxfp4": (4, 4),
                "w4a8": (8, 4)}  # (activation, weight) bits per element
SCALE_BLOCK = 32  # MX formats: one E8M0 byte per 32 values along K


@dataclass(frozen=True)
class Work:
    """What one GEMM must do: its FLOPs and the bytes it must move at least once (each operand
    read once, the output written once), and the matrix-core class it runs on."""

    flops: float
    bytes: float
    operands: str


def dense_work(m: int, n: int, k: int, dtype: str = "bfloat16") -> Work:
    """``x[M, K] @ W[N, K].T`` (``dtype``: a table dtype: ``bfloat16``, ``float16`` or an MX
    format, whose scales count too; the output is 16-bit)."""
    a_bits, b_bits = ELEMENT_BITS[dtype]
    scales = (m + n) * (k // SCALE_BLOCK) if dtype not in ("bfloat16", "float16") else 0
    return Work(2.0 * m * n * k, m * k * a_bits / 8 + n * k * b_bits / 8 + scales + 2.0 * m * n, OPERANDS[dtype])


def grouped_work(rows: int, n: int, k: int, experts_read: int, dtype: str = "bfloat16") -> Work:
    """A grouped GEMM of ``rows`` routed rows over ``experts_read`` experts that have any."""
    elem = 2.0
    return Work(2.0 * rows * n * k, elem * (rows * k + experts_read * n * k + rows * n), OPERANDS[dtype])


def roofline_us(work: Work, warm: bool = True, peaks: Peaks = PEAKS) -> tuple[float, str]:
    """The least time ``work`` can take, in microseconds, and which bound sets it. Memory: the
    bytes at HBM bandwidth, or, when the timing was warm (no cache flush) and they fit in the
    Infinity Cache, at its bandwidth (back-to-back calls find their operands there)."""
    compute = work.flops / peaks.flops_per_s(work.operands) * 1e6
    cached = warm and work.bytes <= peaks.cache_bytes
    memory = work.bytes / (peaks.cache_bytes_per_s if cached else peaks.hbm_bytes_per_s) * 1e6
    if compute >= memory:
        return compute, f"compute: {work.flops / 1e9:.4g} GFLOP at {peaks.flops_per_s(work.operands) / 1e15:g} PFLOP/s"
    where = "Infinity Cache (warm)" if cached else "HBM"
    rate = peaks.cache_bytes_per_s if cached else peaks.hbm_bytes_per_s
    return memory, f"memory: {work.bytes / 2**20:.4g} MiB at {rate / 1e12:g} TB/s {where}"


@dataclass(frozen=True)
class Timed:
    label: str
    ms: float


def bogus(times: Iterable[Timed], work: Work, warm: bool = True) -> Optional[str]:
    """Why one of ``times`` cannot be real (under ``ROOFLINE_TOLERANCE`` x the roofline), or None."""
    roof, bound = roofline_us(work, warm)
    for t in times:
        if t.ms * 1e3 < ROOFLINE_TOLERANCE * roof:
            return (f"bogus timing: {t.label}'s {t.ms * 1e3:.4g} us is under {ROOFLINE_TOLERANCE:g} x the roofline "
                    f"{roof:.4g} us ({bound})")
    return None


@dataclass(frozen=True)
class Verdict:
    win: bool
    decided: bool  # both sides timed: the run says something about this shape
    reason: str


def judge(ours: Timed, baseline: Timed, aten: Optional[Timed] = None, ours_vs_aten: Optional[Timed] = None,
          work: Optional[Work] = None, warm: bool = True, band: float = TIE_BAND) -> Verdict:
    """Rules 2-4 of the module docstring for one shape (``ours_vs_aten``: FlyDSL's time to set
    against ATen's where it differs from ``ours``, e.g. the GEMM without vLLM's quantizer). A time
    that is not positive is bogus whether or not ``work`` gives a roofline."""
    vs_aten = ours_vs_aten or ours
    if ours.ms <= 0 or baseline.ms <= 0:
        return Verdict(False, True, f"bogus timing: {ours.label} {ours.ms:.4g} ms, {baseline.label} "
                                    f"{baseline.ms:.4g} ms (a time must be positive)")
    if work is not None:
        timed = [ours, baseline, *([aten, vs_aten] if aten is not None else [])]
        why = bogus(dict.fromkeys(timed), work, warm)
        if why:
            return Verdict(False, True, why)
    x = baseline.ms / ours.ms
    got = outcome(x, band)
    if got == "tie":
        return Verdict(False, True, f"tie with {baseline.label} ({x:.3f}x, within +-{band:.0%}): "
                                    f"{baseline.label}'s kernel is kept (ties keep the incumbent)")
    if got == "loss":
        return Verdict(False, True, f"{baseline.label} is faster ({x:.3f}x)")
    if aten is not None and aten is not baseline and outcome(aten.ms / vs_aten.ms, band) == "loss":
        return Verdict(False, True, f"beats {baseline.label} ({x:.3f}x) but loses to {aten.label} "
                                    f"({aten.ms / vs_aten.ms:.3f}x)")
    return Verdict(True, True, f"wins {x:.3f}x over {baseline.label}")


def undecided(reason: str) -> Verdict:
    return Verdict(False, False, reason)


def pruned(old: Iterable, decided: set, by_bias: bool = False) -> list:
    """The old entries minus what a run decided: exact entries at a decided (weight, M) dropped,
    ranges cut around decided M values. A weight is ``(op, dtype, layout, n, k, groups)``, with
    ``bias`` after ``layout`` when ``by_bias`` (a run that timed the bias variants apart)."""
    out = []
    for e in old:
        weight = (e.op, e.dtype, e.layout, *((e.bias,) if by_bias else ()), e.n, e.k, e.groups)
        lo, hi = e.m_range
        cuts = sorted(m for (*w, m) in decided if tuple(w) == weight and lo <= m <= hi)
        if not cuts:
            out.append(e)
            continue
        if not isinstance(e.m, tuple):
            continue
        start = lo
        for m in [*cuts, hi + 1]:
            if start <= m - 1:
                out.append(replace(e, m=start if start == m - 1 else (start, m - 1)))
            start = m + 1
    return out
