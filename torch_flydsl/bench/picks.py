"""Which benchmarked shapes become dispatch-table entries (``python -m torch_flydsl bench OP
--table FILE``), and why every other shape gets none.

A table hit replaces the kernel its caller would otherwise run, so FlyDSL is judged against that
kernel (the *baseline* of the shape):

- with vLLM in the run, vLLM's own path (the ``vllm`` column, ``bench.vllm_columns``): the
  re-routes serve only calls inside vLLM, and there a hit replaces exactly that;
- without vLLM, the fastest other column the suite timed (ATen, Triton, in-tree FlyDSL): what
  the best of PyTorch would do, stated in each result.

Per shape, in this order (the first rule that fails gives the shape's reason):

1. FlyDSL has a time (a config fit, passed the correctness check and was timed), and so does the
   baseline.
2. No time in the comparison beats the shape's roofline (``roofline_us``, MI355X figures in
   ``PEAKS``) by more than ``ROOFLINE_TOLERANCE``: such a time is bogus (a launch that did no
   work, a timer that missed it) and no entry is written on it.
3. FlyDSL beats the baseline by more than ``report.TIE_BAND`` (1%), and does not lose to ATen by
   more than the band either.
4. Ties (within the band) keep the incumbent, vLLM's or PyTorch's kernel: an entry would add a
   dependency on FlyDSL's build and cache for no measured gain. So a shape within +-1% never
   gets an entry, whichever side is nominally faster.

Then M ranges (``merge_ranges``): for one weight (op, dtype, N, K, groups), recorded M values
that are neighbours in the sorted list of every M measured for it, all won, pick the same config
and (with vLLM) face the same vLLM kernel become one entry ``m: [lo, hi]`` (the table's
inclusive range; an exact entry still wins a lookup). A lost or tied M between them breaks the
run, so a range never covers a measured M that FlyDSL did not win; it does cover the unmeasured
M between its neighbours.

Writing (``write_table``): entries of the measured shapes that this run decided (win, tie, loss
or a bogus time) replace the table's old ones: an old exact entry at a decided M is dropped, an
old M range holding decided M values keeps only its pieces between them; a shape whose
measurement failed keeps what the table had.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Iterable, Optional

from .report import TIE_BAND, outcome


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
    against ATen's where it differs from ``ours``, e.g. the GEMM without vLLM's quantizer)."""
    vs_aten = ours_vs_aten or ours
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


def fastest(row: dict, columns: Iterable[tuple[str, str]]) -> Optional[Timed]:
    """The fastest of the ``(column, label)`` times ``row`` holds."""
    timed = [Timed(label, row[c]) for c, label in columns if row.get(c)]
    return min(timed, key=lambda t: t.ms) if timed else None


@dataclass(frozen=True)
class Pick:
    """One judged shape: the rows it stands for (a grouped shape has one per routing), the
    entries it gives before M ranges are merged (one per bias variant; empty: none), and why."""

    rows: tuple
    label: str
    verdict: Verdict
    entries: tuple = ()
    weight: tuple = ()  # (op, dtype, layout, n, k, groups): the shapes M ranges merge over
    m: int = 0
    regime: Optional[str] = None  # the baseline's kernel: a range never spans a change of it
    notes: tuple = field(default_factory=tuple)

    @property
    def reason(self) -> str:
        head = "entry" if self.entries else "no entry"
        return "; ".join([f"{head}: {self.verdict.reason}", *self.notes])


def entries_for(op: str, dtype: str, m: int, n: int, k: int, config: str, us: Optional[float], groups: int = 0,
                bias: tuple = (False, True)) -> tuple:
    from ..dispatch_table import Entry

    return tuple(Entry(op, dtype, "nt", b, m, n, k, config, "bench", None if us is None else round(us, 3), groups)
                 for b in bias)


def merge_ranges(picks: list[Pick]) -> list[Pick]:
    """``picks`` with neighbouring winners merged into M ranges (module docstring): each merged
    pick's entries become the range's, held by the run's first pick (the others hold none and
    say which range serves them)."""
    out = list(picks)
    by_weight: dict = {}
    for i, p in enumerate(picks):
        if p.weight:
            by_weight.setdefault(p.weight, []).append(i)
    for where in by_weight.values():
        where.sort(key=lambda i: picks[i].m)
        run: list[int] = []
        for i in where:
            p = picks[i]
            if run and p.entries and _joins(picks[run[-1]], p):
                run.append(i)
                continue
            if len(run) > 1:
                _merge(out, picks, run)
            run = [i] if p.entries else []
        if len(run) > 1:
            _merge(out, picks, run)
    return out


def _joins(last: Pick, p: Pick) -> bool:
    return p.m != last.m and p.entries[0].config == last.entries[0].config and p.regime == last.regime


def _merge(out: list, picks: list, run: list[int]) -> None:
    lo, hi = picks[run[0]].m, picks[run[-1]].m
    first = picks[run[0]]
    cfg = first.entries[0].config
    ranged = tuple(replace(e, m=(lo, hi), us=None) for e in first.entries)
    note = f"M {lo}-{hi} is one entry ({len(run)} neighbouring measured M all win with {cfg})"
    out[run[0]] = replace(first, entries=ranged, notes=(*first.notes, note))
    for i in run[1:]:
        out[i] = replace(picks[i], entries=(), verdict=picks[i].verdict, notes=(*picks[i].notes, f"served by {note}"))


def written(picks: list[Pick]) -> list:
    return [e for p in picks for e in p.entries]


def served(pick: Pick) -> bool:
    """Whether the table will serve this shape with FlyDSL (its own entry, or a merged range)."""
    return bool(pick.entries) or any(n.startswith("served by ") for n in pick.notes)


def _decided(picks: list[Pick]) -> set:
    return {(*p.weight, p.m) for p in picks if p.weight and p.verdict.decided}


def pruned(old: Iterable, decided: set) -> list:
    """The old entries minus what this run decided (module docstring): exact entries at a
    decided (weight, M) dropped, ranges cut around decided M values."""
    out = []
    for e in old:
        weight = (e.op, e.dtype, e.layout, e.n, e.k, e.groups)
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


def write_table(path: Path, picks: list[Pick]) -> str:
    """Merge the picks' entries into the table file ``path`` (under its lock; old entries of the
    shapes this run decided are replaced, see ``pruned``); one line saying what was written."""
    from .. import dispatch_table as dt
    from ..deploy.files import update

    new, decided = written(picks), _decided(picks)
    dropped: list = []

    def rewrite() -> str:
        old = dt.load(path) if path.is_file() and path.stat().st_size else dt.DispatchTable()
        kept = pruned(old.entries, decided)
        dropped.append(len(old.entries) - sum(1 for e in kept if e in old.entries))
        return dt.DispatchTable(kept, old.arch).merged(new).text()

    update(Path(path), rewrite)
    won = sum(1 for p in picks if served(p))
    biases = sorted({e.bias for e in new})
    how = " (with and without bias)" if biases == [False, True] else ""
    return (f"{won} of {len(picks)} shape(s) won by FlyDSL written to the dispatch table {path}{how}: "
            f"{len(new)} entries" + (f"; {dropped[0]} old entries of the decided shapes replaced" if dropped and
                                     dropped[0] else ""))
