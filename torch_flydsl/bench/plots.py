"""matplotlib on the Agg backend, and the speedup-per-shape plot of ``python -m torch_flydsl bench``."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from .report import TIE_BAND, Baseline, compare, speedup


def matplotlib_pyplot():
    """``matplotlib.pyplot`` on the Agg backend, or None when matplotlib is not installed."""
    import importlib.util

    if importlib.util.find_spec("matplotlib") is None:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_speedups(path: Path, title: str, rows: list, baselines: list[Baseline], label: Callable[[dict], str]) -> bool:
    """One bar per shape and baseline: FlyDSL's speedup (log scale, 1 and the tie band
    marked), the geomean per baseline in the legend. False (and no file) without matplotlib."""
    plt = matplotlib_pyplot()
    if plt is None or not rows or not baselines:
        return False
    width = 0.8 / len(baselines)
    fig, ax = plt.subplots(figsize=(max(8.0, 0.32 * len(rows) * len(baselines) + 2), 5))
    for j, b in enumerate(baselines):
        g = compare(rows, b).geomean
        xs = [i - 0.4 + (j + 0.5) * width for i in range(len(rows))]
        ax.bar(xs, [speedup(r, b.column, b.ours) or float("nan") for r in rows], width=width,
               label=f"vs {b.label}" + (f" (geomean {g:.2f}x)" if g else ""))
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.axhspan(1 - TIE_BAND, 1 + TIE_BAND, color="grey", alpha=0.3, linewidth=0)
    if any(speedup(r, b.column, b.ours) for r in rows for b in baselines):
        from matplotlib.ticker import FuncFormatter

        ax.set_yscale("log")
        times = FuncFormatter(lambda v, _: f"{v:g}x")
        ax.yaxis.set_major_formatter(times)
        ax.yaxis.set_minor_formatter(times)
        ax.tick_params(axis="y", which="minor", labelsize=7)
    ax.set_ylabel("FlyDSL speedup (baseline ms / FlyDSL ms)")
    ax.set_title(title)
    ax.set_xticks(range(len(rows)), [label(r) for r in rows], rotation=60, ha="right",
                  fontsize=7 if len(rows) < 40 else 5)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True
