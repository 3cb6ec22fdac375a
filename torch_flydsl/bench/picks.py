"""Which benchmarked shapes become dispatch-table entries (``python -m torch_flydsl bench OP
--table FILE``), and why every other shape gets none.

A table hit replaces the kernel its caller would otherwise run, so FlyDSL is judged against that
kernel (the *baseline* of the shape):

- with vLLM in the run, vLLM's own path (the ``vllm`` column, ``bench.vllm_columns``): the
  re-routes serve only calls inside vLLM, and there a hit replaces exactly that;
- without vLLM, the fastest other column the suite timed (ATen, Triton, in-tree FlyDSL): what
  the best of PyTorch would do, stated in each result.

Per shape, the rules of ``deploy.verdict`` (``judge``; the first that fails gives the shape's
reason): both sides timed (FlyDSL: a config fit, passed the correctness check and was timed), no
time under the roofline, a win by more than ``TIE_BAND`` (1%) over the baseline without a loss to
ATen; ties keep the incumbent, vLLM's or PyTorch's kernel, so a shape within +-1% never gets an
entry, whichever side is nominally faster.

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

from ..deploy.verdict import (  # noqa: F401 - the verdict rules, re-exported for the bench suites
    ELEMENT_BITS, OPERANDS, PEAKS, PEAKS_SOURCE, ROOFLINE_TOLERANCE, SCALE_BLOCK, Peaks, Timed, Verdict, Work, bogus,
    dense_work, grouped_work, judge, pruned, roofline_us, undecided)


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
