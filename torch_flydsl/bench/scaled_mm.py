"""Time the MX scaled GEMM family on an MI350 (gfx950): FlyDSL's best curated config against
PyTorch's ``torch._scaled_mm`` on the same operands, per shape and MX format.

    python benchmarks/scaled_gemm_device_bench.py [--formats mxfp8,mxfp4] [--out scaled_gemm_bench]
        [--via launcher|op] [--aten v1|v2] [--warmup 10] [--iters 50] [--flush-l2] [--no-check]
    python benchmarks/scaled_gemm_device_bench.py --dry-run     # the suite and its configs; any machine
    python -m torch_flydsl bench scaled_mm [--shapes seed|FILE] [--out DIR]   # the installed command

(this module holds the suite; ``benchmarks/scaled_gemm_device_bench.py`` is its script entry
point. Through ``python -m torch_flydsl bench`` each shape also gets a Triton column (Inductor
max-autotune, Triton its only GEMM backend; empty with a note where Inductor has no Triton code
for it) and, where torch ships its in-tree FlyDSL backend, an in-tree column (``_scaled_mm_v2``
compiled with FLYDSL its only GEMM backend, the plugin deferring) and, for mxfp8 where vLLM
imports, vLLM's native MXFP8 linear kernel on bf16 activations with its quantizer timed alone
(``bench.vllm_columns``), the baseline ``--table`` judges mxfp8 entries against: ``table_picks``.)

The suite: 17 NT GEMMs, ``y = x @ W.T`` with x ``[M, K]`` and W ``[N, K]`` both row-major (B =
W.T is ``[K, N]`` column-major: ``torch._scaled_mm``'s TN layout), Llama-style projections:

    (N, K) = (4096, 4096)    M = 1, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384
    (N, K) = (14336, 4096)   M = 4096          MLP gate/up (8B-class)
    (N, K) = (4096, 14336)   M = 32, 4096      MLP down: long K, decode and prefill
    (N, K) = (28672, 4096)   M = 2048          fused gate+up
    (N, K) = (8192, 8192)    M = 8192          attention projection (70B-class)

Operands: random MX values, random E8M0 scales (2^-7 .. 2^7), unswizzled row-major
``[round_up(M, 128), K/32]`` / ``[round_up(N, 128), K/32]`` (the padded rows ROCm's
``torch._scaled_mm`` asks for; FlyDSL never reads them), bfloat16 output, no bias. ATen:
``torch._scaled_mm`` with those scales (``--aten v2``: ``torch._scaled_mm_v2``, BlockWise1x32,
NO_SWIZZLE). FlyDSL: every curated config that fits the shape (``family.configs_for``) through
the launcher with the compiled kernel and its packed arguments reused (``--via op``:
``torch.ops.torch_flydsl.scaled_mm_out`` under ``ops.strict()``, what Inductor's generated code
calls, with its per-call Python checks); the fastest correct one is reported.

Timing: ``torch.cuda.Event`` around ``--iters`` back-to-back calls after ``--warmup``; with
``--flush-l2``, a 512 MiB buffer (beyond MI355X's 256 MiB Infinity Cache) is zeroed before each
call and the median single-call time is taken. Small-M times include launch overhead where
the host is slower than the kernel. Correctness (unless ``--no-check``): each config and ATen
against the float64 product on the device; a config whose max error exceeds 2^-7 max|ref| is
reported and never picked (ATen's error is shown too: a large one means this build reads the
scales in another layout).

Prints a table, writes ``scaled_gemm_bench.csv`` (one row per shape and format),
``scaled_gemm_bench_configs.csv`` (every config timed) and, with matplotlib installed,
``scaled_gemm_bench.png`` into ``--out``. Without a ROCm gfx950 GPU it says so and exits 0.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Callable, Optional

import torch

from ..registry import family_for
from ..templates.scaled_gemm.family import DTYPES
from . import baselines, vllm_columns
from .plots import plot_speedups, present
from .report import Baseline, geomean
from .shapes import Field
from .suite import Suite, plan_keys
from .tables import table, write_csv
from .timing import FLUSH_BYTES, baseline_column, device_gate, rel_error, short_error, tflops, time_ms

SUITE = (
    *((m, 4096, 4096) for m in (1, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)),
    (4096, 14336, 4096),
    (32, 14336, 4096),  # a wide decode (issue 20's side-by-side shapes, benchmarks/isa_shapes.py)
    (32, 4096, 14336),
    (4096, 4096, 14336),
    (2048, 28672, 4096),
    (8192, 8192, 8192),
)
FORMATS = ("mxfp8", "mxfp4")  # the family's explain_problem names; mxfp8-e5m2 and w4a8 work too
ERROR_LIMIT = 2.0**-7  # max |out - ref| / max |ref| for a config to count
SCALE_CODES = (120, 135)  # E8M0 codes drawn: 2^-7 .. 2^7


def _family():
    return family_for("scaled_mm")


def problem_for(fmt: str, m: int, n: int, k: int):
    """The family's problem (or Decline) for one suite entry."""
    return _family().explain_problem("scaled_mm", m, n, k, fmt)


def candidates(problem, breadth: str = "curated") -> list:
    return _family().configs_for(problem, breadth)[0]


def _round_up(x: int, to: int) -> int:
    return -(-x // to) * to


def _mx_rows(rows: int, k: int, fmt_name: str, device) -> torch.Tensor:
    from torch_flydsl.templates.scaled_gemm.problem import DTYPE_OF_FORMAT

    dtype = DTYPE_OF_FORMAT[fmt_name]
    if fmt_name == "e2m1":  # every 4-bit code is a finite E2M1 value
        return torch.randint(0, 256, (rows, k // 2), dtype=torch.uint8, device=device).view(dtype)
    return torch.randn(rows, k, device=device).to(dtype)


def _scales(rows: int, k: int, device) -> torch.Tensor:
    from torch_flydsl.templates.scaled_gemm.problem import SCALE_BLOCK, SCALE_DTYPE

    lo, hi = SCALE_CODES
    codes = torch.randint(lo, hi, (_round_up(rows, 128), k // SCALE_BLOCK), dtype=torch.uint8, device=device)
    return codes.view(SCALE_DTYPE)


def operands(problem, device="cpu") -> tuple:
    """``(a, b, scale_a, scale_b, out)`` for ``problem`` as ``torch._scaled_mm`` takes them."""
    m, n, k = problem.m, problem.n, problem.k
    a = _mx_rows(m, k, problem.a_format, device)
    b = _mx_rows(n, k, problem.b_format, device).t()
    out = torch.empty(m, n, dtype=problem.out_dtype, device=device)
    return a, b, _scales(m, k, device), _scales(n, k, device), out


def aten_fn(version: str, a, b, sa, sb, out) -> Callable[[], torch.Tensor]:
    if version == "v2":
        v2 = _v2_args(a, b, sa, sb, out)
        return lambda: torch._scaled_mm_v2(*v2)
    return lambda: torch._scaled_mm(a, b, sa, sb, out_dtype=out.dtype)


def _v2_args(a, b, sa, sb, out) -> tuple:
    m, n = out.shape
    blockwise_1x32, no_swizzle = 3, 0  # F.ScalingType.BlockWise1x32, F.SwizzleType.NO_SWIZZLE
    return (a, b, [sa[:m]], [blockwise_1x32], [no_swizzle], [sb[:n]], [blockwise_1x32], [no_swizzle], None, out.dtype)


def triton_fn(version: str, a, b, sa, sb, out) -> Callable[[], torch.Tensor]:
    """Inductor's max-autotune, Triton its only GEMM backend, on the ATen call ``version`` makes;
    raises ``baselines.TritonUnavailable`` where no Triton kernel runs."""
    if version == "v2":
        return baselines.triton_fn(lambda *xs: torch._scaled_mm_v2(*xs), *_v2_args(a, b, sa, sb, out),
                                   what="_scaled_mm_v2")
    dtype = out.dtype
    return baselines.triton_fn(lambda a, b, sa, sb: torch._scaled_mm(a, b, sa, sb, out_dtype=dtype), a, b, sa, sb,
                               what="_scaled_mm")


def intree_fn(a, b, sa, sb, out) -> Callable[[], torch.Tensor]:
    """torch's in-tree FlyDSL backend on ``_scaled_mm_v2`` (the scaled GEMM it serves)."""
    return baselines.intree_compiled_fn(lambda *xs: torch._scaled_mm_v2(*xs), *_v2_args(a, b, sa, sb, out),
                                        what="_scaled_mm_v2")


def flydsl_fn(via: str, cfg, problem, a, b, sa, sb, out) -> Callable[[], torch.Tensor]:
    """One FlyDSL call into ``out`` (compiles on first use)."""
    if via == "op":
        from torch_flydsl import ops

        ops.register()
        op, key = ops.op("scaled_mm_out"), cfg.key()

        def call():
            with ops.strict():  # a fallback to PyTorch raises instead of being timed as FlyDSL
                op(a, b, sa, sb, None, cfg=key, out=out)
            return out

        return call
    from torch_flydsl.runtime import kernel_cache
    from torch_flydsl.templates.scaled_gemm.launcher import compile_args

    jit_fn, args = compile_args(cfg, a, b, sa, sb, out, None, torch.cuda.current_stream(a.device), problem=problem)
    compiled = kernel_cache.compiled_for(jit_fn, args, a.device)
    return lambda: (compiled(*args), out)[1]


def dry_run(formats, breadth: str) -> int:
    from torch_flydsl.templates.base import Decline

    counts: dict[str, list[int | str]] = {f: [] for f in formats}
    sets: dict[str, dict[tuple[str, ...], list[tuple[int, int, int]]]] = {f: {} for f in formats}
    for m, n, k in SUITE:
        for f in formats:
            p = problem_for(f, m, n, k)
            keys = () if isinstance(p, Decline) else tuple(c.key() for c in candidates(p, breadth))
            counts[f].append(f"declined: {p}" if isinstance(p, Decline) else len(keys))
            sets[f].setdefault(keys, []).append((m, n, k))
    rows = [(i + 1, m, n, k, round(2 * m * n * k / 1e9, 3), *(counts[f][i] for f in formats))
            for i, (m, n, k) in enumerate(SUITE)]
    print(f"{len(SUITE)} shapes (NT: x[M,K] @ W[N,K].T), {breadth} configs that fit each:")
    print(table(rows, ["#", "M", "N", "K", "GFLOP", *(f"{f} configs" for f in formats)], floatfmt="g"))
    for f in formats:
        for keys, shapes in sets[f].items():
            where = "every shape" if len(shapes) == len(SUITE) else ", ".join("x".join(map(str, s)) for s in shapes)
            print(f"\n{f} ({where}): {', '.join(keys) or 'none'}")
    return 0


def bench_shape(fmt, m, n, k, args, flush, config_rows, dev: torch.device) -> dict:
    """One suite entry: ATen's time, every fitting config's time and error (appended to
    ``config_rows``), and the fastest correct config."""
    from torch_flydsl.templates.base import Decline
    from torch_flydsl.templates.scaled_gemm import reference

    row = {"format": fmt, "M": m, "N": n, "K": k}
    problem = problem_for(fmt, m, n, k)
    if isinstance(problem, Decline):
        return {**row, "note": f"declined: {problem}"}
    a, b, sa, sb, out = operands(problem, dev)
    ref = None if args.no_check else reference(a, b, sa, sb, device=dev)
    notes, wrong = [], 0
    try:
        aten = aten_fn(args.aten, a, b, sa, sb, out)
        row["aten_err"] = rel_error(aten(), ref)
        row["aten_ms"] = time_ms(aten, args.warmup, args.iters, flush)
    except Exception as e:  # a shape or format this build's ATen does not take
        notes.append(f"ATen: {short_error(e)}")
    best = None
    for cfg in candidates(problem, args.breadth):
        entry = {"format": fmt, "M": m, "N": n, "K": k, "config": cfg.key()}
        try:
            out.fill_(float("nan"))
            fly = flydsl_fn(args.via, cfg, problem, a, b, sa, sb, out)
            entry["err"] = rel_error(fly(), ref)
            entry["ms"] = time_ms(fly, args.warmup, args.iters, flush)
        except Exception as e:  # compile or launch failure: report it, try the next config
            entry["error"] = short_error(e)
            print(f"  {fmt} {m}x{n}x{k} {cfg.key()}: {entry['error']}", file=sys.stderr)
        config_rows.append(entry)
        if entry.get("err", 0) > ERROR_LIMIT:  # NaN (no check) compares False
            wrong += 1
        elif "ms" in entry and (best is None or entry["ms"] < best["ms"]):
            best = entry
    if wrong:
        notes.append(f"{wrong} config(s) above the error limit")
    if best:
        row.update(flydsl_config=best["config"], flydsl_ms=best["ms"], flydsl_err=best["err"])
    if not getattr(args, "no_triton", True):  # the script has no Triton column; the bench CLI does
        baseline_column(row, notes, "triton", "Triton", lambda: triton_fn(args.aten, a, b, sa, sb, out), ref, args,
                        flush, ERROR_LIMIT, time_ms)
    if getattr(args, "intree", False):
        baseline_column(row, notes, "intree", "in-tree", lambda: intree_fn(a, b, sa, sb, out), ref, args, flush,
                        ERROR_LIMIT, time_ms)
    if getattr(args, "vllm", False) and fmt in VLLM_KERNELS:
        vllm_columns_for(row, notes, b, sb, args, flush, dev)
    row["flydsl_tflops"] = tflops(2 * m * n * k, row.get("flydsl_ms"))
    row["aten_tflops"] = tflops(2 * m * n * k, row.get("aten_ms"))
    if row.get("flydsl_ms") and row.get("aten_ms"):
        row["speedup"] = row["aten_ms"] / row["flydsl_ms"]
    row["note"] = "; ".join(notes)
    return row


# The MX formats a vLLM re-route serves, with what its column is called in the verdicts.
VLLM_KERNELS = {"mxfp8": "vLLM's MXFP8 linear kernel", "mxfp4": "vLLM's MXFP4 (W4A4) linear kernel"}


def vllm_column_status(fmt: str) -> "Optional[str]":
    """Why a row of ``fmt`` has no vLLM column (None: it has one)."""
    if fmt not in VLLM_KERNELS:
        return f"no vLLM re-route serves {fmt}"
    return vllm_columns.status("scaled_mm" if fmt == "mxfp8" else f"scaled_mm:{fmt}")


def vllm_columns_for(row: dict, notes: list, b, sb, args, flush, dev) -> None:
    """The vLLM columns of an ``mxfp8`` or ``mxfp4`` row (``bench.vllm_columns``): ``vllm_ms``,
    vLLM's own MX linear kernel on bf16 activations and this row's weight (its quantizer and its
    GEMM); ``vllm_quant_ms``, the quantizer the re-route runs on a hit, alone (vLLM's, for both
    formats); ``flydsl_hit_ms``, what a table hit runs instead (that quantizer, then FlyDSL's
    GEMM). vLLM's result is checked against the float64 product of that quantization of the
    activations."""
    from torch_flydsl.templates.scaled_gemm import reference

    fmt = row["format"]
    m, n, k = row["M"], row["N"], row["K"]
    x = torch.randn(m, k, device=dev).to(torch.bfloat16)
    element = torch.float8_e4m3fn if fmt == "mxfp8" else torch.float4_e2m1fn_x2
    try:
        quantize = vllm_columns.mxfp8_quantize() if fmt == "mxfp8" else vllm_columns.mxfp4_quantize()
        x_q, x_s = quantize(x)
        ref = None if args.no_check else reference(x_q.view(element), b, x_s.view(torch.float8_e8m0fnu), sb,
                                                   device=dev)
    except Exception as e:  # vLLM's quantizer needs its GPU kernels
        notes.append(f"vLLM: quantizer: {short_error(e)}")
        return
    weight, weight_scale = b.t(), sb[:n].view(torch.uint8)
    build = vllm_columns.mxfp8_fn if fmt == "mxfp8" else vllm_columns.mxfp4_fn
    if fmt == "mxfp4":
        weight = weight.view(torch.uint8)
    baseline_column(row, notes, "vllm", "vLLM", lambda: build(x, weight, weight_scale), ref, args,
                    flush, ERROR_LIMIT, time_ms)
    try:
        row["vllm_quant_ms"] = time_ms(lambda: quantize(x), args.warmup, args.iters, flush)
    except Exception as e:
        notes.append(f"vLLM quantizer: {short_error(e)}")
    if row.get("flydsl_ms") and row.get("vllm_quant_ms"):
        row["flydsl_hit_ms"] = row["flydsl_ms"] + row["vllm_quant_ms"]


COLUMNS = ["format", "M", "N", "K", "flydsl_config", "flydsl_ms", "flydsl_tflops", "aten_ms", "aten_tflops",
           "speedup", "flydsl_err", "aten_err", "note"]


def plot(path: Path, rows: list, formats) -> bool:
    """FlyDSL's speedups per shape of ``formats`` (``plots.plot_speedups``) against each column timed."""
    rows = [r for fmt in formats for r in rows if r["format"] == fmt]
    return plot_speedups(path, BENCH.title, rows, present(rows, BENCH.baselines(True, True)), BENCH.label)


def measure(shapes, args) -> tuple[list, list]:
    """Every ``(format, M, N, K)`` of ``shapes`` on the current GPU: (rows, config rows)."""
    flush = torch.empty(FLUSH_BYTES, dtype=torch.uint8, device="cuda") if args.flush_l2 else None
    rows: list[dict] = []
    config_rows: list[dict] = []
    dev = torch.device("cuda", torch.cuda.current_device())
    for fmt, m, n, k in shapes:
        print(f"{fmt} {m}x{n}x{k} ...", file=sys.stderr, flush=True)
        rows.append(bench_shape(fmt, m, n, k, args, flush, config_rows, dev))
    return rows, config_rows


def run(args) -> int:
    from torch_flydsl.runtime.probe import flydsl_info

    info = flydsl_info()
    if not info.usable:
        print(f"scaled_gemm_device_bench: gfx950 found but flydsl is unusable: {info.reason}")
        return 1
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    rows, config_rows = measure([(fmt, m, n, k) for fmt in args.formats for m, n, k in SUITE], args)
    print(f"{torch.cuda.get_device_name(0)}, torch {torch.__version__} (HIP {torch.version.hip}), "
          f"FlyDSL via {args.via}, ATen {args.aten}, {'L2 flushed' if args.flush_l2 else 'warm L2'}")
    print(table([[r.get(c) for c in COLUMNS] for r in rows], COLUMNS))
    for fmt in args.formats:
        g = geomean(r.get("speedup") for r in rows if r["format"] == fmt)
        print(f"{fmt}: geometric-mean speedup over torch._scaled_mm: " + (f"{g:.3f}x" if g else "n/a"))
    write_csv(out_dir / "scaled_gemm_bench.csv", rows, COLUMNS)
    write_csv(out_dir / "scaled_gemm_bench_configs.csv", config_rows, CONFIG_COLUMNS)
    png = out_dir / "scaled_gemm_bench.png"
    print(f"wrote {out_dir}/scaled_gemm_bench.csv, scaled_gemm_bench_configs.csv"
          + (f", {png.name}" if plot(png, rows, args.formats) else " (matplotlib is not installed: no plot)"))
    return 0


def parse_args(argv=None):
    p = argparse.ArgumentParser(description="FlyDSL MX scaled GEMM vs torch._scaled_mm on gfx950")
    p.add_argument("--formats", default=",".join(FORMATS), type=lambda s: s.split(","),
                   help="comma-separated: mxfp8, mxfp8-e5m2, mxfp4, w4a8")
    p.add_argument("--breadth", default="curated", choices=["baseline", "curated", "exhaustive"])
    p.add_argument("--via", default="launcher", choices=["launcher", "op"])
    p.add_argument("--aten", default="v1", choices=["v1", "v2"], help="torch._scaled_mm or torch._scaled_mm_v2")
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--iters", type=int, default=50)
    p.add_argument("--flush-l2", action="store_true", help="zero 512 MiB before each timed call")
    p.add_argument("--no-check", action="store_true", help="skip the float64 correctness check")
    p.add_argument("--out", default="scaled_gemm_bench", help="directory for the CSVs and the plot")
    p.add_argument("--dry-run", action="store_true", help="list the shapes and configs; no GPU needed")
    args = p.parse_args(argv)
    unknown = [f for f in args.formats if f not in DTYPES]
    if unknown:
        p.error(f"unknown format(s) {unknown}: choose from {', '.join(DTYPES)}")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.dry_run:
        return dry_run(args.formats, args.breadth)
    why = device_gate()
    if why:
        print(f"scaled_gemm_device_bench: no ROCm gfx950 GPU here ({why}); nothing timed "
              "(--dry-run lists the suite)")
        return 0
    return run(args)


if __name__ == "__main__":
    sys.exit(main())


# -- python -m torch_flydsl bench scaled_mm -----------------------------------------------------


def _record_plan(rec: dict, args):
    return plan_keys(problem_for(rec["format"], rec["M"], rec["N"], rec["K"]), lambda p: candidates(p, args.breadth))


CONFIG_COLUMNS = ["format", "M", "N", "K", "config", "ms", "err", "error"]


def _from_spec(shapes: list):
    """The MX ``scaled_mm`` shapes of a precompile shapes spec (format, M, N, K)."""
    keys = list(dict.fromkeys((s.dtype, s.m, s.n, s.k) for s in shapes if s.op == BENCH.op))
    if not keys:
        return "holds no MX scaled_mm shape, which is what bench scaled_mm times"
    return [{"format": f, "M": m, "N": n, "K": k} for f, m, n, k in keys]


def _vllm_plan(rec: dict, args) -> Optional[str]:
    fmt = rec["format"]
    if fmt not in VLLM_KERNELS or (fmt != "mxfp8" and vllm_column_status(fmt) is not None):
        return None
    return ("vLLM MXFP8 linear (quantizer + dot_scaled)" if fmt == "mxfp8" else
            "vLLM MXFP4 W4A4 linear (AITER's where installed, else its emulation)")


BENCH = Suite(
    op="scaled_mm",
    intree_op="scaled_mm_v2",
    title="torch._scaled_mm: MX NT GEMM (x[M,K] @ W[N,K].T, unswizzled E8M0 scales, bf16 out)",
    fields=(Field("format", str, "mxfp8", tuple(DTYPES)), Field("M"), Field("N"), Field("K")),
    seed=lambda: [{"format": f, "M": m, "N": n, "K": k} for f in FORMATS for m, n, k in SUITE],
    label=lambda r: f"{r['format']} {r['M']}x{r['N']}x{r['K']}",
    plan=_record_plan,
    options=lambda argv: parse_args(argv),
    measure=lambda recs, args: measure([(r["format"], r["M"], r["N"], r["K"]) for r in recs], args),
    aten=Baseline("aten", "ATen", "aten_ms"),
    columns=tuple(COLUMNS),
    config_columns=tuple(CONFIG_COLUMNS),
    from_spec=_from_spec,
    table_picks=lambda rows, opts: table_picks(rows, opts),
    vllm_plan=_vllm_plan,
    vllm=Baseline("vllm", "vLLM", "vllm_ms", ours="flydsl_hit_ms"),
)


def table_picks(rows: list, opts=None) -> list:
    """One ``picks.Pick`` per result row (``bench scaled_mm --table``, op ``scaled_mm``): an entry
    where FlyDSL beats the kernel a table hit replaces by more than the tie band, inside the
    roofline (``bench.picks``). For ``mxfp8`` with vLLM in the run that is vLLM's MXFP8 linear
    kernel, against vLLM's quantizer plus FlyDSL's GEMM (what the hit runs), and FlyDSL's GEMM
    must not lose to ATen's ``torch._scaled_mm``; a K the re-route does not serve gets none.
    Other formats, or no vLLM: the fastest other timed column (ATen, Triton, in-tree). Written for
    the bias-free and the bias call alike, as the mm suite does."""
    from . import picks as pk

    vllm = bool(getattr(opts, "vllm", False))
    warm = not getattr(opts, "flush_l2", False)
    out = []
    for r in rows:
        fmt, m, n, k = r["format"], int(r["M"]), int(r["N"]), int(r["K"])
        verdict, notes = _verdict(r, vllm, warm)
        entries = pk.entries_for(BENCH.op, fmt, m, n, k, r["flydsl_config"], r["flydsl_ms"] * 1e3) \
            if verdict.win and fmt in DTYPES else ()
        out.append(pk.Pick((r,), BENCH.label(r), verdict, entries, (BENCH.op, fmt, "nt", n, k, 0), m, None, notes))
    return out


def _verdict(r: dict, vllm: bool, warm: bool) -> tuple:
    from . import picks as pk

    fmt = r["format"]
    if not r.get("flydsl_ms") or not r.get("flydsl_config"):
        return pk.undecided(f"FlyDSL has no time ({r.get('note') or 'no config was timed'})"), ()
    gemm = pk.Timed(f"FlyDSL {r['flydsl_config']}", r["flydsl_ms"])
    aten = pk.Timed("ATen", r["aten_ms"]) if r.get("aten_ms") else None
    work = pk.dense_work(int(r["M"]), int(r["N"]), int(r["K"]), fmt)
    if vllm and fmt in VLLM_KERNELS:
        from ..integrations.vllm import mx_linear

        if int(r["K"]) % mx_linear.K_ALIGN:
            return pk.undecided(f"K={r['K']} is not a multiple of {mx_linear.K_ALIGN}: the {fmt.upper()} re-route keeps "
                                "such layers on vLLM's kernel, so no entry would be read"), ()
        if not r.get("vllm_ms") or not r.get("flydsl_hit_ms"):
            return pk.undecided(f"vLLM's columns have no time ({r.get('note') or 'not timed'})"), ()
        ours = pk.Timed("vLLM's quantizer + FlyDSL", r["flydsl_hit_ms"])
        base = pk.Timed(VLLM_KERNELS[fmt], r["vllm_ms"])
        return pk.judge(ours, base, aten, gemm, work, warm), ()
    found = pk.fastest(r, (("aten_ms", "ATen"), ("triton_ms", "Triton"), ("intree_ms", "in-tree FlyDSL")))
    if found is None:
        return pk.undecided("no baseline column has a time"), ()
    base = found
    notes = (f"no vLLM column for {fmt} ({vllm_column_status(fmt)}): judged against the fastest timed column",) \
        if vllm else ()
    return pk.judge(gemm, base, aten, work=work, warm=warm), notes
