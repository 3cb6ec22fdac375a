"""Helpers the device benchmarks share (``scaled_gemm_device_bench.py``,
``grouped_gemm_device_bench.py``): the device gate, event timing, error and throughput
arithmetic, the printed table and the CSV. Nothing here is specific to a kernel family.

The scripts import it from their own directory: ``python benchmarks/<script>.py`` puts that
directory first on ``sys.path``, and each script adds it too, for loading it by file path as
the tests do.
"""

from __future__ import annotations

import csv
import math
import statistics
from pathlib import Path
from typing import Callable, Optional

import torch

FLUSH_BYTES = 512 * 2**20  # beyond MI355X's 256 MiB Infinity Cache


def device_gate() -> Optional[str]:
    """Why this machine cannot run a device benchmark (None: a ROCm gfx950 GPU is here)."""
    if not torch.cuda.is_available():
        return "torch.cuda.is_available() is False"
    if torch.version.hip is None:
        return f"torch {torch.__version__} is not a ROCm build"
    arch = getattr(torch.cuda.get_device_properties(0), "gcnArchName", "") or "unknown arch"
    return None if "gfx950" in arch else f"cuda:0 is {arch}"


def time_ms(fn: Callable, warmup: int, iters: int, flush: Optional[torch.Tensor] = None) -> float:
    """Milliseconds per call: ``torch.cuda.Event`` around ``iters`` back-to-back calls after
    ``warmup``; with ``flush`` (a buffer zeroed before each call), the median single call."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    event = lambda: torch.cuda.Event(enable_timing=True)  # noqa: E731
    if flush is None:
        start, end = event(), event()
        start.record()
        for _ in range(iters):
            fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / iters
    pairs = []
    for _ in range(iters):
        flush.zero_()
        start, end = event(), event()
        start.record()
        fn()
        end.record()
        pairs.append((start, end))
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in pairs)


def rel_error(out: torch.Tensor, ref: Optional[torch.Tensor]) -> float:
    """max |out - ref| / max |ref| (NaN without a reference)."""
    if ref is None:
        return float("nan")
    return float((out.double() - ref).abs().max() / ref.abs().max().clamp_min(1e-300))


def tflops(flops: float, ms: Optional[float]) -> Optional[float]:
    return flops / (ms * 1e-3) / 1e12 if ms else None


def geomean(xs) -> Optional[float]:
    xs = [x for x in xs if x]
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else None


def table(rows: list, headers: list, floatfmt: str = ".4g") -> str:
    try:
        from tabulate import tabulate
    except ImportError:
        cells = [[str(h) for h in headers]] + [["" if v is None else str(v) for v in r] for r in rows]
        widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
        return "\n".join("  ".join(v.rjust(w) for v, w in zip(r, widths)) for r in cells)
    return tabulate(rows, headers=headers, floatfmt=floatfmt, missingval="-")


def write_csv(path: Path, rows: list, columns: list) -> None:
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=columns, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)


def matplotlib_pyplot():
    """``matplotlib.pyplot`` on the Agg backend, or None when matplotlib is not installed."""
    import importlib.util

    if importlib.util.find_spec("matplotlib") is None:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt

