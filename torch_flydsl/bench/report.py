"""FlyDSL's speedups against each baseline: per shape, their geometric mean, win/tie/loss
counts, and the markdown report (``<op>.md``, ``summary.md``) that holds them.

A speedup is the baseline's time over FlyDSL's (above 1: FlyDSL is faster). A shape is a tie
when its speedup is within ``TIE_BAND`` of 1 (``|speedup - 1| <= 0.01``), a win above that band
and a loss below it. Shapes where either time is missing count for neither the geometric mean
nor the tally.

Every speedup the reports print, the plot's legend included, goes through ``speedup_text``
(three decimals: a 0.995x geomean prints as 0.995x, not 1.00x), and the plot's
wins/ties/losses through ``Comparison.tally`` (``summary.md``'s order).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Iterable, Optional

from ..deploy.verdict import TIE_BAND, outcome  # noqa: F401 - re-exported
FLYDSL_MS = "flydsl_ms"


@dataclass(frozen=True)
class Baseline:
    key: str  # short name, used in column names: aten, triton, intree, vllm
    label: str  # as the report names it
    column: str  # the row's milliseconds column
    # FlyDSL's milliseconds column it is compared with: what FlyDSL runs in its place (e.g. the
    # MXFP8 linear's quantizer plus the GEMM, against vLLM's kernel that does both)
    ours: str = FLYDSL_MS


def geomean(xs: Iterable) -> Optional[float]:
    xs = [x for x in xs if x]
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else None


def speedup(row: dict, column: str, ours_column: str = FLYDSL_MS) -> Optional[float]:
    """The baseline's time over FlyDSL's in ``row`` (None where either is missing or zero)."""
    ours, theirs = row.get(ours_column), row.get(column)
    return theirs / ours if ours and theirs else None


@dataclass(frozen=True)
class Comparison:
    baseline: Baseline
    shapes: int  # shapes with both times
    geomean: Optional[float]
    wins: int
    ties: int
    losses: int

    def tally(self) -> str:
        """``wins/ties/losses``, as the summary and the plot print them."""
        return f"{self.wins}/{self.ties}/{self.losses}"

    def line(self) -> str:
        if not self.shapes:
            return f"vs {self.baseline.label}: n/a (no shape has both times)"
        return (f"vs {self.baseline.label}: geomean {speedup_text(self.geomean)} over {self.shapes} shapes, "
                f"{self.wins} wins, {self.ties} ties, {self.losses} losses (ties within +-{TIE_BAND:.0%})")


def compare(rows: list, baseline: Baseline, band: float = TIE_BAND) -> Comparison:
    xs = [x for x in (speedup(r, baseline.column, baseline.ours) for r in rows) if x]
    outcomes = [outcome(x, band) for x in xs]
    return Comparison(baseline, len(xs), geomean(xs), outcomes.count("win"), outcomes.count("tie"),
                      outcomes.count("loss"))


def _ms(v) -> str:
    return "" if v is None or v == "" else f"{v:.4g}"


def speedup_text(v: Optional[float]) -> str:
    """A speedup as every report prints it: three decimals and an x (``0.995x``); empty for None."""
    return "" if v is None else f"{v:.3f}x"


def _cell(v) -> str:
    return str(v if v is not None else "").replace("|", "\\|").replace("\n", " ")


def _md_table(headers: list, body: list) -> list[str]:
    return ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|",
            *("| " + " | ".join(map(_cell, r)) + " |" for r in body)]


def summary_table(comparisons: list[Comparison]) -> list[str]:
    body = [(c.baseline.label, c.shapes, speedup_text(c.geomean), c.wins, c.ties, c.losses) for c in comparisons]
    return _md_table(["FlyDSL vs", "shapes", "geomean speedup", "wins", "ties", "losses"], body)


def markdown(title: str, rows: list, baselines: list[Baseline], label: Callable[[dict], str],
             config_column: Optional[str] = "flydsl_config", preamble: Iterable[str] = ()) -> str:
    """``<op>.md``: the comparisons first, then one line per shape with every column's time,
    FlyDSL's speedup against each baseline, and the row's note."""
    comparisons = [compare(rows, b) for b in baselines]
    lines = [f"# {title}", "", *preamble, *([""] if preamble else []),
             f"Speedup = baseline time / FlyDSL time (above 1: FlyDSL is faster); a tie is within "
             f"+-{TIE_BAND:.0%}.", "", *summary_table(comparisons), ""]
    headers = ["#", "shape", "FlyDSL ms", *([] if config_column is None else ["FlyDSL config"]),
               *(f"{b.label} ms" for b in baselines), *(f"x {b.label}" for b in baselines), "note"]
    body = []
    for i, r in enumerate(rows, 1):
        body.append((i, label(r), _ms(r.get(FLYDSL_MS)), *([] if config_column is None else [r.get(config_column)]),
                     *(_ms(r.get(b.column)) for b in baselines),
                     *(speedup_text(speedup(r, b.column, b.ours)) for b in baselines),
                     r.get("note") or ""))
    lines += _md_table(headers, body)
    return "\n".join(lines) + "\n"
