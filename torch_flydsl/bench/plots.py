"""matplotlib on the Agg backend, and the speedup-per-shape plot of ``python -m torch_flydsl bench``
(and of each suite's own script: every suite's ``plot`` draws through ``plot_speedups``).

The plot is one figure: a horizontal bar per shape and baseline, from 1x to FlyDSL's speedup on
a log axis (right of 1: FlyDSL is faster), the 1x line, the tie band and each baseline's geomean
(a dashed line) marked, the shapes numbered as the markdown report numbers them. Its size follows
the shape count: a shape's row height grows with the baselines, and past ``MAX_HEIGHT_IN`` the
shapes are split into side-by-side panels (at most ``MAX_PANELS``, then the rows get thinner), so
the PNG stays within ``MAX_WIDTH_IN`` x ``MAX_HEIGHT_IN`` at ``DPI``. The legend gives, per
baseline, the geomean as the markdown report prints it (``report.speedup_text``) and the
wins/ties/losses (``Comparison.tally``).
"""

from __future__ import annotations

import math
import textwrap
from pathlib import Path
from typing import Callable, Optional

from .report import TIE_BAND, Baseline, compare, speedup, speedup_text

DPI = 100
MAX_WIDTH_IN = 20.0  # 2000 px
MAX_HEIGHT_IN = 20.0  # 2000 px
MAX_PANELS = 4
XLABEL = "FlyDSL speedup = baseline ms / FlyDSL ms (log scale; right of 1x: FlyDSL faster)"
YLABEL = "shape (# as in the report)"
# Candidate x ticks, most wanted first: a tick is kept where it does not crowd one kept before it.
TICKS = (1, 2, 0.5, 10, 0.1, 100, 0.01, 4, 0.2, 20, 0.05, 1.5, 0.8, 3, 1.25, 0.9, 1.1, 0.7, 0.3, 6, 50, 0.02,
         0.6, 0.4, 1.75, 5, 8)
_TICK_PX = 36  # room one tick label needs
_BAR_IN = 0.075  # a bar's thickness per baseline
_ROW_PAD_IN = 0.06  # between two shapes' bar groups
_MIN_ROW_IN = 0.08
_HEAD_IN = 0.75  # suptitle and margins, without the legend
_FOOT_IN = 0.75  # the x ticks and the x label


def matplotlib_pyplot():
    """``matplotlib.pyplot`` on the Agg backend, or None when matplotlib is not installed."""
    import importlib.util

    if importlib.util.find_spec("matplotlib") is None:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def present(rows: list, baselines: list[Baseline]) -> list[Baseline]:
    """The baselines whose column some row holds (what a suite's own script timed); the first
    baseline when none does, so its plot still says n/a rather than nothing."""
    return [b for b in baselines if any(r.get(b.column) is not None for r in rows)] or baselines[:1]


def legend_text(rows: list, baseline: Baseline) -> str:
    """The legend entry of ``baseline``: its geomean as the report prints it and the W/T/L counts."""
    c = compare(rows, baseline)
    if not c.shapes:
        return f"vs {baseline.label}: n/a (no shape has both times)"
    return f"vs {baseline.label}: geomean {speedup_text(c.geomean)}, W/T/L {c.tally()} of {c.shapes}"


def x_ticks(lo: float, hi: float, axes_px: float) -> list[float]:
    """The ``TICKS`` within ``[lo, hi]`` that fit ``axes_px`` pixels of log axis, in order."""
    gap = math.log(hi / lo) * _TICK_PX / max(axes_px, 1.0)
    kept: list[float] = []
    for t in TICKS:
        if lo <= t <= hi and all(abs(math.log(t / k)) >= gap for k in kept):
            kept.append(t)
    return sorted(kept)


def _layout(n: int, baselines: int, legend_rows: int) -> tuple[int, int, float]:
    """(panels, shapes per panel, a shape's row height in inches) for ``n`` shapes."""
    row = _ROW_PAD_IN + _BAR_IN * max(baselines, 1)
    room = MAX_HEIGHT_IN - _HEAD_IN - _FOOT_IN - 0.22 * legend_rows
    panels = max(1, min(MAX_PANELS, math.ceil(n * row / room)))
    per = math.ceil(n / panels)
    return panels, per, max(_MIN_ROW_IN, min(row, room / per))


def plot_speedups(path: Path, title: str, rows: list, baselines: list[Baseline], label: Callable[[dict], str]) -> bool:
    """FlyDSL's speedup per shape against each baseline (see the module's docstring) into the
    PNG ``path``. False (and no file) without matplotlib, rows or baselines."""
    plt = matplotlib_pyplot()
    if plt is None or not rows or not baselines:
        return False
    fig = speedup_figure(plt, title, rows, baselines, label)
    _save(plt, fig, path)
    return True


def _save(plt, fig, path: Path) -> None:
    fig.savefig(path, dpi=DPI)
    plt.close(fig)


def speedup_figure(plt, title: str, rows: list, baselines: list[Baseline], label: Callable[[dict], str]):
    """The figure ``plot_speedups`` saves (the module's docstring says what it shows)."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    n, k = len(rows), len(baselines)
    entries = k + 2  # and the tie band and the geomean's line
    labels = [f"#{i} {label(r)}" for i, r in enumerate(rows, 1)]
    panels, per, row_in = _layout(n, k, math.ceil(entries / 2))  # room for a legend of two columns
    font = max(4.0, min(8.0, row_in * 72 * 0.8))
    label_in = max(len(s) for s in labels) * font * 0.55 / 72 + 0.35
    bars_in = 6.0 if panels == 1 else 4.0
    width = min(MAX_WIDTH_IN, max(8.0, panels * (label_in + bars_in) + 0.4))
    ncols = max(1, min(entries, int(width // 5.0)))
    title = textwrap.fill(title, int(width * 11))
    height = min(MAX_HEIGHT_IN, per * row_in + _HEAD_IN + _FOOT_IN + 0.22 * math.ceil(entries / ncols)
                 + 0.2 * title.count("\n"))
    fig, axes = plt.subplots(1, panels, figsize=(width, height), sharex=True, squeeze=False, layout="constrained",
                             dpi=DPI)
    axes = list(axes[0])

    speedups = [[speedup(r, b.column, b.ours) for r in rows] for b in baselines]
    values = [x for xs in speedups for x in xs if x]
    lo = min([*values, 1 - 5 * TIE_BAND]) / 1.06
    hi = max([*values, 1 + 5 * TIE_BAND]) * 1.06
    geomeans = [compare(rows, b).geomean for b in baselines]
    colors = [f"C{j}" for j in range(k)]
    thick = 0.8 / k
    for p, ax in enumerate(axes):
        first, last = p * per, min(n, (p + 1) * per)
        ax.axvspan(1 - TIE_BAND, 1 + TIE_BAND, color="0.85", linewidth=0, zorder=0)
        ax.axvline(1.0, color="black", linewidth=0.9, zorder=1)
        for j, xs in enumerate(speedups):
            ys = [i - first - 0.4 + (j + 0.5) * thick for i in range(first, last)]
            got = [xs[i] for i in range(first, last)]
            ax.barh(ys, [x - 1 if x else math.nan for x in got], left=1.0, height=thick, color=colors[j], zorder=2)
            # a tick at each value: a tie's bar is too short to see, a missing time has none
            ax.scatter([x or math.nan for x in got], ys, marker="|", s=(thick * row_in * 72) ** 2, color=colors[j],
                       linewidths=1.2, zorder=4)
            if geomeans[j]:
                ax.axvline(geomeans[j], color=colors[j], linestyle="--", linewidth=1.0, zorder=3)
        ax.set_xscale("log")
        ax.set_xlim(lo, hi)
        ax.set_ylim(per - 0.5, -0.5)  # the first shape on top, every panel's rows as tall
        ax.set_yticks(range(last - first), labels[first:last], fontsize=font)
        ax.tick_params(axis="y", length=0)
        ax.set_xlabel(textwrap.fill(XLABEL, 60 if panels > 1 else 100), fontsize=8)
        if p == 0:
            ax.set_ylabel(YLABEL, fontsize=8)
        ax.grid(axis="x", color="0.9", linewidth=0.6)
        ax.set_axisbelow(True)
    axes_px = (width / panels - label_in - 0.3) * DPI
    times = FuncFormatter(lambda v, _: f"{v:g}x")
    for ax in axes:
        ax.xaxis.set_major_locator(FixedLocator(x_ticks(lo, hi, axes_px)))
        ax.xaxis.set_minor_locator(NullLocator())
        ax.xaxis.set_major_formatter(times)
        ax.tick_params(axis="x", labelsize=8)
    handles = [*(Patch(color=c) for c in colors), Patch(color="0.85"), Line2D([], [], color="0.4", linestyle="--")]
    texts = [*(legend_text(rows, b) for b in baselines), f"tie band: 1x +-{TIE_BAND:.0%}",
             "geomean (dashed, in the baseline's colour)"]
    fig.legend(handles, texts, loc="outside lower center", ncols=ncols, fontsize=8, frameon=False)
    fig.suptitle(title, fontsize=11)
    return fig
