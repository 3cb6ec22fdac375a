"""Time the dense GEMM family on an MI350 (gfx950): every curated FlyDSL config that fits,
against ATen (``torch.mm``) and Inductor's Triton GEMM (max-autotune, Triton only), on 15
BF16 NT LLM shapes.

    python benchmarks/dense_gemm_device_bench.py [--shapes 1,4,15] [--via launcher|op]
        [--timing graph|events] [--no-triton] [--warmup 10] [--iters 50] [--flush-l2] [--no-check]
        [--breadth curated] [--out dense_gemm_bench]
    python benchmarks/dense_gemm_device_bench.py --dry-run     # the plan; any machine
    python -m torch_flydsl bench mm [--shapes seed|FILE] [--out DIR]   # the installed command

(this module holds the suite; ``benchmarks/dense_gemm_device_bench.py`` is its script entry point.
Through ``python -m torch_flydsl bench mm`` each shape also gets, where vLLM imports, a vLLM column:
``torch.ops.vllm.rocm_unquantized_gemm``, what vLLM itself runs for the linear layer
(``bench.vllm_columns``), the baseline ``--table`` judges entries against: ``table_picks``.)

The suite (``SUITE``): ``y = x @ W.T`` with x ``[M, K]`` and W ``[N, K]`` both row-major
bfloat16 (B = W.T is ``[K, N]`` column-major: the kernel's ``nt`` layout), bfloat16 output, no
bias. Llama-style projections, decode to prefill:

    #1-7   M = 1, 16, 32, 64, 128, 256, 512 x (N, K) = (4096, 4096)   attention projection, 8B-class
    #8     32 x 14336 x 4096       MLP gate/up, decode (8B-class)
    #9     32 x 4096 x 14336       MLP down, decode: long K
    #10    128 x 11008 x 4096      MLP gate/up (7B-class)
    #11    128 x 4096 x 11008      MLP down (7B-class)
    #12    2048 x 28672 x 4096     fused gate+up, prefill (70B-class)
    #13    4096 x 4096 x 14336     MLP down, prefill
    #14    4096 x 4096 x 4096      square
    #15    8192 x 8192 x 8192      square, attention projection (70B-class)

Timed: ATen ``torch.mm(x, W.t(), out=y)`` and FlyDSL write one preallocated output; Triton
(which allocates its output each call): ``torch.compile(torch.mm,
mode="max-autotune-no-cudagraphs")`` with
``max_autotune_gemm_backends="TRITON"``: Inductor's Triton mm template, or where Inductor
decomposes the mm (M=1) its own Triton reduction, which the note names (a shape whose compiled
code runs no Triton kernel leaves the column empty, with the reason); FlyDSL: every
curated config that fits (``family.configs_for``) through the launcher with the compiled kernel
and its packed arguments reused (``--via op``: ``torch.ops.torch_flydsl.dense_mm_out`` under
``ops.strict()``, what Inductor's generated code calls), the fastest correct one reported.

Correctness first (unless ``--no-check``): every config's, ATen's and Triton's result against
the float64 product on the device; a result whose max error exceeds 2^-7 max|ref| is reported
and never timed or picked. Then timing (``--timing``): ``graph`` (default) captures
``--iters`` back-to-back calls of each column in its own CUDA graph on a side stream (after
``--warmup`` eager calls, then one warm-up replay) and times 5 replays of each, interleaved
over all of the shape's columns (round r starts at the r-th), taking the median per column
divided by ``--iters``: warm caches (operands stay in L2/MALL between calls), no host launch
overhead, and clock or power drift during a shape falls on every column alike. Where capture
fails for a column, that column is timed with ``events`` and the note says so. ``events``:
``torch.cuda.Event`` around ``--iters`` back-to-back eager calls per column, one column after
another (host overhead included where the host is slower than the kernel); with
``--flush-l2`` (events only) a 512 MiB buffer is zeroed before each call and the median single
call is taken.

Prints a table, geometric-mean speedups (vs ATen, vs Triton, vs the faster of the two per
shape) and wins/ties/losses within +-1% against the faster of the two; writes
``dense_gemm_bench.csv`` (one row per shape), ``dense_gemm_bench_configs.csv`` (every config
timed) and, with matplotlib installed, ``dense_gemm_bench.png`` into ``--out``. Without a ROCm
gfx950 GPU it says so, prints the plan (what ``--dry-run`` prints) and exits 0.

No MI350 has run this yet: FlyDSL timings from it are untested on hardware.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, Callable, Optional

import torch

from ..registry import family_for
from . import baselines, vllm_columns
from .baselines import TritonUnavailable  # noqa: F401  (bench_shape callers and tests catch it by this name)
from .plots import plot_speedups, present
from .report import TIE_BAND, Baseline, geomean, outcome
from .shapes import Field
from .suite import SpecRecords, Suite, plan_keys
from .tables import table, write_csv
from .timing import FLUSH_BYTES, GRAPH_REPLAYS, device_gate, graph_times_ms, rel_error, short_error, tflops, time_ms

SUITE = (
    *((m, 4096, 4096) for m in (1, 16, 32, 64, 128, 256, 512)),
    (32, 14336, 4096),
    (32, 4096, 14336),
    (128, 11008, 4096),
    (128, 4096, 11008),
    (2048, 28672, 4096),
    (4096, 4096, 14336),
    (4096, 4096, 4096),
    (8192, 8192, 8192),
)
DTYPE = torch.bfloat16
LAYOUT = "nt"
ERROR_LIMIT = 2.0**-7  # max |out - ref| / max |ref| for a result to count


def _family():
    return family_for("mm")


def problem_for(m: int, n: int, k: int):
    """The family's problem (or Decline) for one suite entry."""
    return _family().explain_problem("mm", m, n, k, DTYPE, LAYOUT)


def candidates(problem, breadth: str = "curated") -> list:
    return _family().configs_for(problem, breadth)[0]


def operands(m: int, n: int, k: int, device="cpu") -> tuple:
    """``(x, W.t(), y)``: x ``[M, K]``, W ``[N, K]`` (so B is column-major), y ``[M, N]``."""
    x = torch.randn(m, k, device=device).to(DTYPE)
    w = torch.randn(n, k, device=device).to(DTYPE)
    return x, w.t(), torch.empty(m, n, dtype=DTYPE, device=device)


def aten_fn(a, b, out) -> Callable[[], torch.Tensor]:
    return lambda: torch.mm(a, b, out=out)


def triton_fn(a, b) -> Callable[[], torch.Tensor]:
    """What Inductor's max-autotune makes of this mm with Triton as its only GEMM backend: its
    Triton mm template, or (where Inductor decomposes the mm, as it does for M=1) its own Triton
    reduction; ``.template`` says which. It allocates its output each call (under graph capture
    from the graph's private pool). Raises ``TritonUnavailable`` when the compiled code runs
    no Triton kernel."""
    return baselines.triton_fn(lambda a, b: torch.mm(a, b), a, b, what="mm")


def intree_fn(a, b) -> Callable[[], torch.Tensor]:
    """torch's in-tree FlyDSL backend's mm (Inductor, FLYDSL as its only GEMM backend, the plugin
    deferring); raises ``baselines.IntreeUnavailable`` when it did not serve it."""
    return baselines.intree_compiled_fn(lambda a, b: torch.mm(a, b), a, b, what="mm")


def vllm_fn(a, b) -> Callable[[], torch.Tensor]:
    """What vLLM runs for this linear layer call: ``torch.ops.vllm.rocm_unquantized_gemm(x, W)``
    (``bench.vllm_columns``), allocating its output each call as vLLM does."""
    return vllm_columns.dense_fn(a, b.t())


def flydsl_fn(via: str, cfg, problem, a, b, out) -> Callable[[], torch.Tensor]:
    """One FlyDSL call into ``out`` on the current stream (compiles on first use)."""
    if via == "op":
        from torch_flydsl import ops

        ops.register()
        op, key = ops.op("dense_mm_out"), cfg.key()

        def call():
            with ops.strict():  # a fallback to PyTorch raises instead of being timed as FlyDSL
                op(a, b, cfg=key, out=out)
            return out

        return call
    from torch_flydsl.runtime import kernel_cache
    from torch_flydsl.templates.dense_gemm.launcher import compile_args

    jit_fn, args = compile_args(cfg, a, b, out, None, stream=torch.cuda.current_stream(a.device), problem=problem)
    compiled = kernel_cache.compiled_for(jit_fn, args, a.device)
    return lambda: (compiled(*args), out)[1]


def check(fn: Callable, ref) -> dict:
    """``err`` of ``fn``'s first call against ``ref`` (NaN without one), or ``error``."""
    try:
        return {"err": rel_error(fn(), ref)}
    except Exception as e:  # compile or launch failure
        return {"error": short_error(e)}


def time_entries(todo: list, args, flush) -> None:
    """Time every ``(entry, fn)`` whose check passed (NaN, no check, counts as passed): sets
    ``ms`` and ``timed`` (``graph``, or ``events`` where capture failed, with ``graph_error``)."""
    todo = [(e, fn) for e, fn in todo if "error" not in e and not e["err"] > ERROR_LIMIT]
    rest = todo
    if args.timing == "graph":
        rest = []
        for (e, fn), t in zip(todo, graph_times_ms([fn for _, fn in todo], args.warmup, args.iters)):
            if isinstance(t, Exception):
                e["graph_error"] = short_error(t)
                rest.append((e, fn))
            else:
                e.update(ms=t, timed="graph")
    for e, fn in rest:
        try:
            e.update(ms=time_ms(fn, args.warmup, args.iters, flush), timed="events")
        except Exception as ex:
            e["error"] = short_error(ex)


def _note(who: str, entry: dict) -> Optional[str]:
    if "error" in entry:
        return f"{who}: {entry['error']}"
    if "graph_error" in entry:
        return f"{who}: timed with events (graph capture failed: {entry['graph_error']})"
    return None


def bench_shape(m: int, n: int, k: int, args, flush, config_rows: list, dev) -> dict:
    """One suite entry: every fitting config's error (appended to ``config_rows``), ATen's and
    Triton's, all checked first; then every correct one timed (graph replays interleaved over
    all of them); the fastest correct config is FlyDSL's."""
    from torch_flydsl.templates.base import Decline
    from torch_flydsl.templates.dense_gemm import reference

    row: dict[str, Any] = {"M": m, "N": n, "K": k}
    problem = problem_for(m, n, k)
    if isinstance(problem, Decline):
        return {**row, "note": f"declined: {problem}"}
    a, b, out = operands(m, n, k, dev)
    ref = None if args.no_check else reference(a, b, device=dev)
    notes, todo, mine = [], [], []
    for cfg in candidates(problem, args.breadth):
        out.fill_(float("nan"))
        entry = {"M": m, "N": n, "K": k, "config": cfg.key()}
        try:
            fn = flydsl_fn(args.via, cfg, problem, a, b, out)
            entry.update(check(fn, ref))
            todo.append((entry, fn))
        except Exception as e:  # building the launcher's arguments failed
            entry["error"] = short_error(e)
        mine.append(entry)
    aten = {}
    fn = aten_fn(a, b, out)
    aten.update(check(fn, ref))
    todo.append((aten, fn))
    tri = None
    if not args.no_triton:
        try:
            fn = triton_fn(a, b)
            tri = check(fn, ref)
            todo.append((tri, fn))
            if not getattr(fn, "template", True):
                notes.append("Triton: Inductor decomposed the mm (no mm template)")
        except Exception as e:  # no Triton kernel for this shape, or an Inductor compile failure
            notes.append(f"Triton: {short_error(e)}")
    tree = None
    if getattr(args, "intree", False):
        try:
            fn = intree_fn(a, b)
            tree = check(fn, ref)
            todo.append((tree, fn))
        except Exception as e:  # the in-tree backend did not serve it, or failed to compile
            notes.append(f"in-tree: {short_error(e)}")
    vl = None
    if getattr(args, "vllm", False):
        row["vllm_kernel"] = vllm_columns.expected_dense(m, n, k)
        try:
            fn = vllm_fn(a, b)
            vl = check(fn, ref)
            todo.append((vl, fn))
        except Exception as e:  # vLLM's op refused these operands
            notes.append(f"vLLM: {short_error(e)}")
    time_entries(todo, args, flush)
    for entry in mine:
        if "error" in entry:
            print(f"  {m}x{n}x{k} {entry['config']}: {entry['error']}", file=sys.stderr)
    config_rows.extend(mine)
    wrong = sum(1 for e in mine if e.get("err", 0) > ERROR_LIMIT)
    if wrong:
        notes.append(f"{wrong} config(s) above the error limit")
    timed = [e for e in mine if "ms" in e]
    if timed:
        best = min(timed, key=lambda e: e["ms"])
        row.update(flydsl_config=best["config"], flydsl_ms=best["ms"], flydsl_err=best["err"])
        notes += filter(None, [_note("FlyDSL", best)])
    row.update(aten_ms=aten.get("ms"), aten_err=aten.get("err"))
    notes += filter(None, [_note("ATen", aten)])
    if tri is not None:
        row.update(triton_ms=tri.get("ms"), triton_err=tri.get("err"))
        notes += filter(None, [_note("Triton", tri)])
    if tree is not None:
        row.update(intree_ms=tree.get("ms"), intree_err=tree.get("err"))
        notes += filter(None, [_note("in-tree", tree)])
    if vl is not None:
        row.update(vllm_ms=vl.get("ms"), vllm_err=vl.get("err"))
        notes += filter(None, [_note("vLLM", vl)])
    finish_row(row)
    row["note"] = "; ".join(notes)
    return row


def finish_row(row: dict) -> dict:
    """TFLOP/s per column and FlyDSL's speedups: vs ATen, vs Triton, vs the faster of the two."""
    flops = 2 * row["M"] * row["N"] * row["K"]
    for who in ("flydsl", "aten", "triton", "intree", "vllm"):
        if f"{who}_ms" in row or who not in ("intree", "vllm"):
            row[f"{who}_tflops"] = tflops(flops, row.get(f"{who}_ms"))
    theirs = [row[f"{w}_ms"] for w in ("aten", "triton") if row.get(f"{w}_ms")]
    if row.get("flydsl_ms"):
        for who in ("aten", "triton", "intree", "vllm"):
            if row.get(f"{who}_ms"):
                row[f"x_{who}"] = row[f"{who}_ms"] / row["flydsl_ms"]
        if theirs:
            row["x_best"] = min(theirs) / row["flydsl_ms"]
    return row


COLUMNS = ["M", "N", "K", "flydsl_config", "flydsl_ms", "flydsl_tflops", "aten_ms", "aten_tflops", "triton_ms",
           "triton_tflops", "x_aten", "x_triton", "x_best", "flydsl_err", "aten_err", "triton_err", "note"]
PRINTED = ["M", "N", "K", "flydsl_config", "flydsl_ms", "flydsl_tflops", "aten_tflops", "triton_tflops", "x_aten",
           "x_triton", "x_best", "note"]
CONFIG_COLUMNS = ["M", "N", "K", "config", "ms", "timed", "err", "error", "graph_error"]


def summary(rows: list) -> list[str]:
    """Geometric-mean speedups and wins/ties/losses against the faster of ATen and Triton."""
    lines = []
    for key, name in (("x_aten", "ATen (torch.mm)"), ("x_triton", "Triton (Inductor)"),
                      ("x_best", "the faster of ATen and Triton per shape")):
        xs = [r[key] for r in rows if r.get(key)]
        g = geomean(xs)
        lines.append(f"geometric-mean speedup vs {name}: " + (f"{g:.3f}x over {len(xs)} shapes" if g else "n/a"))
    xs = [r["x_best"] for r in rows if r.get("x_best")]
    if xs:
        got = [outcome(x) for x in xs]
        lines.append(f"vs the faster of the two: {got.count('win')} wins, {got.count('tie')} ties, "
                     f"{got.count('loss')} losses (ties within +-{TIE_BAND:.0%})")
    return lines


def plot(path: Path, rows: list) -> bool:
    """FlyDSL's speedups per shape (``plots.plot_speedups``) against each column timed and
    against the faster of ATen and Triton per shape."""
    def faster(r: dict):
        theirs = [r[c] for c in ("aten_ms", "triton_ms") if r.get(c)]
        return min(theirs) if theirs else None

    best = Baseline("best", "the faster of ATen and Triton", "best_ms")
    rows = [{**r, "best_ms": faster(r)} for r in rows]
    return plot_speedups(path, BENCH.title, rows, present(rows, [*BENCH.baselines(True, True), best]), BENCH.label)


def plan(shapes, args) -> str:
    """The shapes, the configs that fit each and how they would be timed."""
    from torch_flydsl.templates.base import Decline

    rows = []
    sets: dict[tuple[str, ...], list[str]] = {}
    for i, (m, n, k) in shapes:
        p = problem_for(m, n, k)
        keys = () if isinstance(p, Decline) else tuple(c.key() for c in candidates(p, args.breadth))
        rows.append((i, m, n, k, round(2 * m * n * k / 1e9, 3), f"declined: {p}" if isinstance(p, Decline) else len(keys)))
        sets.setdefault(keys, []).append(f"#{i}")
    lines = [f"{len(rows)} shapes (bf16 NT: x[M,K] @ W[N,K].T, bf16 out), {args.breadth} configs that fit each:",
             table(rows, ["#", "M", "N", "K", "GFLOP", "configs"], floatfmt="g")]
    for keys, where in sets.items():
        scope = "every shape" if len(where) == len(rows) else ", ".join(where)
        lines.append(f"\nconfigs ({scope}): {', '.join(keys) or 'none'}")
    timing = (f"CUDA graphs of {args.iters} calls, median of {GRAPH_REPLAYS} replays interleaved over the columns, "
              "warm caches"
              if args.timing == "graph" else
              f"events around {args.iters} calls" + (", L2 flushed before each" if args.flush_l2 else ", warm caches"))
    triton = "off" if args.no_triton else "Inductor max-autotune with TRITON as its only GEMM backend"
    lines.append(f"\nper shape: float64 check{' (off)' if args.no_check else ''}, then timed ({timing}, "
                 f"{args.warmup} warm-up calls): every config via {args.via}, ATen torch.mm, Triton: {triton}")
    return "\n".join(lines)


def measure(shapes, args) -> tuple[list, list]:
    """Every ``(number, (M, N, K))`` of ``shapes`` on the current GPU: (rows, config rows)."""
    flush = torch.empty(FLUSH_BYTES, dtype=torch.uint8, device="cuda") if args.flush_l2 else None
    rows: list[dict] = []
    config_rows: list[dict] = []
    dev = torch.device("cuda", torch.cuda.current_device())
    side = torch.cuda.Stream(dev)  # graph capture needs a non-default stream; events use it too
    with torch.cuda.stream(side):
        for _, (m, n, k) in shapes:
            print(f"{m}x{n}x{k} ...", file=sys.stderr, flush=True)
            rows.append(bench_shape(m, n, k, args, flush, config_rows, dev))
            torch.cuda.empty_cache()
    return rows, config_rows


def run(args, shapes) -> int:
    from torch_flydsl.runtime.probe import flydsl_info

    info = flydsl_info()
    if not info.usable:
        print(f"dense_gemm_device_bench: gfx950 found but flydsl is unusable: {info.reason}")
        return 1
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    rows, config_rows = measure(shapes, args)
    print(f"{torch.cuda.get_device_name(0)}, torch {torch.__version__} (HIP {torch.version.hip}), "
          f"FlyDSL via {args.via}, timing {args.timing}, "
          f"{'L2 flushed' if args.flush_l2 else 'warm caches'}")
    print(table([[r.get(c) for c in PRINTED] for r in rows], PRINTED))
    print("\n".join(summary(rows)))
    write_csv(out_dir / "dense_gemm_bench.csv", rows, COLUMNS)
    write_csv(out_dir / "dense_gemm_bench_configs.csv", config_rows, CONFIG_COLUMNS)
    png = out_dir / "dense_gemm_bench.png"
    print(f"wrote {out_dir}/dense_gemm_bench.csv, dense_gemm_bench_configs.csv"
          + (f", {png.name}" if plot(png, rows) else " (matplotlib is not installed: no plot)"))
    return 0


def parse_args(argv=None):
    p = argparse.ArgumentParser(description="FlyDSL dense BF16 GEMM vs torch.mm and Triton on gfx950")
    p.add_argument("--shapes", default=None, type=lambda s: [int(x) for x in s.split(",")],
                   help=f"comma-separated suite numbers 1..{len(SUITE)} (default: all)")
    p.add_argument("--breadth", default="curated", choices=["baseline", "curated", "exhaustive"])
    p.add_argument("--via", default="launcher", choices=["launcher", "op"])
    p.add_argument("--timing", default="graph", choices=["graph", "events"])
    p.add_argument("--no-triton", action="store_true", help="skip the Triton (Inductor) column")
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--iters", type=int, default=50)
    p.add_argument("--flush-l2", action="store_true", help="zero 512 MiB before each timed call (events only)")
    p.add_argument("--no-check", action="store_true", help="skip the float64 correctness check")
    p.add_argument("--out", default="dense_gemm_bench", help="directory for the CSVs and the plot")
    p.add_argument("--dry-run", action="store_true", help="print the plan; no GPU needed")
    args = p.parse_args(argv)
    if args.shapes and not all(1 <= i <= len(SUITE) for i in args.shapes):
        p.error(f"--shapes takes suite numbers 1..{len(SUITE)}")
    if args.flush_l2 and args.timing == "graph":
        p.error("--flush-l2 needs --timing events (a graph replays its calls back to back)")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    shapes = [(i, SUITE[i - 1]) for i in (args.shapes or range(1, len(SUITE) + 1))]
    if args.dry_run:
        print(plan(shapes, args))
        return 0
    why = device_gate()
    if why:
        print(f"dense_gemm_device_bench: no ROCm gfx950 GPU here ({why}); nothing timed. The plan:\n")
        print(plan(shapes, args))
        return 0
    return run(args, shapes)


if __name__ == "__main__":
    sys.exit(main())


# -- python -m torch_flydsl bench mm ------------------------------------------------------------


def _record_plan(rec: dict, args):
    return plan_keys(problem_for(rec["M"], rec["N"], rec["K"]), lambda p: candidates(p, args.breadth))


def _from_spec(shapes: list):
    """The bf16 ``x @ W.T`` shapes (mm, layout nt; bias or not) of a precompile shapes spec, and a
    line for each kind of mm shape it holds that the suite does not time."""
    keys: list = []
    skipped: dict = {}
    for s in shapes:
        if s.op != BENCH.op:
            continue
        if s.dtype == "bfloat16" and s.layout == LAYOUT:
            keys.append((s.m, s.n, s.k))
            continue
        why = (f"{s.dtype}: bench mm times bfloat16 only (its operands, float64 check and baselines are bf16); "
               "the dense family serves it, so write its entries by hand (explain mm M N K --dtype float16) or "
               "from Inductor's autotuning (TORCH_FLYDSL_RECORD_WINNERS)" if s.dtype != "bfloat16" else
               f"layout {s.layout}: bench mm times x @ W.T (layout {LAYOUT}, what vLLM's linear layers call) only")
        skipped.setdefault(why, {})[(s.m, s.n, s.k)] = None
    keys = list(dict.fromkeys(keys))
    lines = [f"{len(got)} recorded mm shape(s) not timed ({', '.join('x'.join(map(str, k)) for k in got)}): {why}"
             for why, got in skipped.items()]
    if not keys:
        return "holds no bf16 x @ W.T (mm, layout nt) shape, which is what bench mm times" + (
            f" ({'; '.join(lines)})" if lines else "")
    return SpecRecords([{"M": m, "N": n, "K": k} for m, n, k in keys], lines)


def _vllm_plan(rec: dict, args) -> str:
    kernel = vllm_columns.expected_dense(rec["M"], rec["N"], rec["K"])
    return f"vLLM (expected: {kernel})"


BENCH = Suite(
    op="mm",
    intree_op="mm",
    title="torch.mm: bf16 NT GEMM (x[M,K] @ W[N,K].T, bf16 out)",
    fields=(Field("M"), Field("N"), Field("K")),
    seed=lambda: [{"M": m, "N": n, "K": k} for m, n, k in SUITE],
    label=lambda r: f"{r['M']}x{r['N']}x{r['K']}",
    plan=_record_plan,
    options=lambda argv: parse_args(argv),
    measure=lambda recs, args: measure([(i, (r["M"], r["N"], r["K"])) for i, r in enumerate(recs, 1)], args),
    aten=Baseline("aten", "ATen", "aten_ms"),
    columns=tuple(COLUMNS),
    config_columns=tuple(CONFIG_COLUMNS),
    from_spec=_from_spec,
    table_picks=lambda rows, opts: table_picks(rows, opts),
    vllm_plan=_vllm_plan,
)


def table_picks(rows: list, opts=None) -> list:
    """One ``picks.Pick`` per result row (``bench mm --table``): an entry where FlyDSL's best
    config beats the kernel the table hit replaces (``bench.picks``: with vLLM, vLLM's own
    ``rocm_unquantized_gemm``, also never losing to ATen; without, the fastest of ATen, Triton
    and in-tree) by more than the tie band, inside the roofline. The suite times bf16 ``x @ W.T``
    without bias; each win is written for the bias-free and the bias (``F.linear`` with bias)
    call alike, the bias entry carrying the bias-free time (a bias adds one vector read to the
    epilogue, not a different tile choice)."""
    from . import picks as pk

    vllm = bool(getattr(opts, "vllm", False))
    warm = not getattr(opts, "flush_l2", False)
    out = []
    for r in rows:
        m, n, k = int(r["M"]), int(r["N"]), int(r["K"])
        verdict = _verdict(r, vllm, warm)
        entries = pk.entries_for(BENCH.op, "bfloat16", m, n, k, r["flydsl_config"], r["flydsl_ms"] * 1e3) \
            if verdict.win else ()
        out.append(pk.Pick((r,), BENCH.label(r), verdict, entries, (BENCH.op, "bfloat16", LAYOUT, n, k, 0), m,
                           r.get("vllm_kernel") if vllm else None))
    return out


def _verdict(r: dict, vllm: bool, warm: bool):
    from . import picks as pk

    if not r.get("flydsl_ms") or not r.get("flydsl_config"):
        return pk.undecided(f"FlyDSL has no time ({r.get('note') or 'no config was timed'})")
    ours = pk.Timed(f"FlyDSL {r['flydsl_config']}", r["flydsl_ms"])
    aten = pk.Timed("ATen", r["aten_ms"]) if r.get("aten_ms") else None
    if vllm:
        if not r.get("vllm_ms"):
            return pk.undecided(f"vLLM's column has no time ({r.get('note') or 'not timed'})")
        kernel = r.get("vllm_kernel")
        base = pk.Timed(f"vLLM ({kernel}, expected)" if kernel else "vLLM", r["vllm_ms"])
    else:
        found = pk.fastest(r, (("aten_ms", "ATen"), ("triton_ms", "Triton"), ("intree_ms", "in-tree FlyDSL")))
        if found is None and r.get("x_best"):  # a row holding only the speedup over the faster of the two
            found = pk.Timed("the faster of ATen and Triton", r["x_best"] * r["flydsl_ms"])
        if found is None:
            return pk.undecided("no baseline column has a time")
        base = found
    return pk.judge(ours, base, aten, work=pk.dense_work(int(r["M"]), int(r["N"]), int(r["K"])), warm=warm)
