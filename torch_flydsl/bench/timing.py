"""The device gate, event and CUDA-graph timing, and the error and throughput arithmetic the
suites share. Nothing here is specific to a kernel family."""

from __future__ import annotations

import statistics
from typing import Callable, Optional

import torch

FLUSH_BYTES = 512 * 2**20  # beyond MI355X's 256 MiB Infinity Cache
GRAPH_REPLAYS = 5


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


def _capture(fn: Callable, warmup: int, iters: int):
    """``iters`` calls of ``fn`` captured in one CUDA graph on the current (side) stream after
    ``warmup`` eager calls, replayed once to warm up."""
    for _ in range(warmup):
        fn()
    torch.cuda.current_stream().synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=torch.cuda.current_stream()):
        for _ in range(iters):
            fn()
    graph.replay()
    torch.cuda.current_stream().synchronize()
    return graph


def graph_times_ms(fns: list, warmup: int, iters: int, replays: int = GRAPH_REPLAYS) -> list:
    """Per callable, milliseconds per call from replays of its CUDA graph: the median of
    ``replays`` timed replays, interleaved over the callables (round r starts at the r-th) so
    that clock or power drift during the run falls on every column alike. Where a capture
    fails, its exception instead of a time."""
    graphs = []
    for fn in fns:
        try:
            graphs.append(_capture(fn, warmup, iters))
        except Exception as e:  # something in the call cannot be captured
            graphs.append(e)
            torch.cuda.synchronize()
    live = [i for i, g in enumerate(graphs) if not isinstance(g, Exception)]
    times: dict = {i: [] for i in live}
    for r in range(replays):
        k = r % len(live) if live else 0
        for i in live[k:] + live[:k]:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            graphs[i].replay()
            end.record()
            end.synchronize()
            times[i].append(start.elapsed_time(end) / iters)
    return [g if isinstance(g, Exception) else statistics.median(times[i]) for i, g in enumerate(graphs)]


def rel_error(out: torch.Tensor, ref: Optional[torch.Tensor]) -> float:
    """max |out - ref| / max |ref| (NaN without a reference)."""
    if ref is None:
        return float("nan")
    return float((out.double() - ref).abs().max() / ref.abs().max().clamp_min(1e-300))


def tflops(flops: float, ms: Optional[float]) -> Optional[float]:
    return flops / (ms * 1e-3) / 1e12 if ms else None


def short_error(e: BaseException) -> str:
    """``Type: message``, cut to 200 characters (for notes and CSV cells)."""
    return f"{type(e).__name__}: {e}"[:200]


def check_and_time(fn: Callable, ref, args, flush, limit: float, timer: Callable = time_ms) -> dict:
    """``err`` (against ``ref``, NaN without one) from ``fn``'s first call, then ``ms`` from
    ``timer`` unless the error exceeds ``limit``; ``error`` on any exception."""
    entry: dict[str, float | str] = {}
    try:
        entry["err"] = err = rel_error(fn(), ref)
        if not err > limit:  # NaN (no check) times too
            entry["ms"] = timer(fn, args.warmup, args.iters, flush)
    except Exception as e:  # compile or launch failure, an operand form this build does not take
        entry["error"] = short_error(e)
    return entry


def baseline_column(row: dict, notes: list, key: str, who: str, make: Callable, ref, args, flush, limit: float,
                    timer: Callable = time_ms) -> None:
    """One baseline's column of ``row`` (``<key>_ms``, ``<key>_err``): ``make()`` builds its call
    (its exception, e.g. ``baselines.Unavailable``, becomes a note), then ``check_and_time``."""
    try:
        fn = make()
    except Exception as e:
        notes.append(f"{who}: {short_error(e)}")
        return
    entry = check_and_time(fn, ref, args, flush, limit, timer)
    row.update({f"{key}_ms": entry.get("ms"), f"{key}_err": entry.get("err")})
    if "error" in entry:
        notes.append(f"{who}: {entry['error']}")
