"""``python -m torch_flydsl bench {mm,scaled_mm,grouped_mm,rms_norm,topk,all}``: the device
benchmark suites from an installed package.

On an MI350 (a ROCm build of torch and a gfx950 GPU) each op's suite times FlyDSL against ATen,
Inductor's Triton, where torch ships it torch's in-tree FlyDSL backend and, for the ops vLLM's
layers call (mm, scaled_mm's mxfp8, grouped_mm) where vLLM imports, what vLLM itself runs
(``bench.vllm_columns``; every column checked against a float64 or exact reference first), and
writes into ``--out``:

    <op>.csv           every row the suite measured (its own columns, see the suite's module)
    <op>_configs.csv   every FlyDSL config timed (GEMM suites, which time each fitting config)
    <op>.md            per-shape times, speedups, geomean speedups and win/tie/loss counts
    <op>.png           FlyDSL's speedup per shape against each baseline (needs matplotlib)
    summary.md         with ``all``: one line per op

With ``--table FILE`` it merges dispatch-table entries for the shapes FlyDSL wins into FILE, and
prints (and writes to the CSV's ``table`` column) why every other shape gets none
(``bench.picks``).

Anywhere else it prints the plan (ops, shapes, the FlyDSL configs each shape would time, the
baselines with the vLLM column per shape, how ``--table`` would pick, the files it would write)
and exits 0 without launching anything.

This module is imported when the CLI's parser is built, so it imports neither torch nor the
suites at module level.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import time
from pathlib import Path
from typing import Optional



def bench_ops() -> list:
    """Every user op (``torch_flydsl.registry``) whose family names a bench suite."""
    from ..registry import user_ops

    return [u.name for _, u in user_ops() if u.bench]

SHAPES_HELP = """\
--shapes FILE: the shapes of one op, as JSON (a list of objects, or of value lists in field
order; also {"shapes": [...]}) or CSV (a header row of field names, one shape per row; lines
starting with # are skipped). Field names match case-insensitively; fields with a default may
be left out. Fields per op:

  mm          M, N, K                            bf16, x[M,K] @ W[N,K].T
  scaled_mm   format (mxfp8|mxfp8-e5m2|mxfp4|w4a8, default mxfp8), M, N, K
  grouped_mm  model (label, default custom), G (experts), top_k, H (hidden), I (expert
              intermediate), proj (gate_up|down, default gate_up), tokens,
              routing (balanced|zipf|empty, default balanced)
  rms_norm    dtype (bf16|fp16, default bf16), rows, n
  topk        dtype (fp32|bf16|fp16, default fp32), rows, N, k, deterministic (true|false,
              default false: torch.use_deterministic_algorithms for both columns)

e.g. mm.json: [{"M": 1, "N": 4096, "K": 4096}, [8192, 8192, 8192]]
     rms.csv: dtype,rows,n / bf16,64,4097
A malformed file is an error naming the entry (exit code 2)."""


def add_parser(sub) -> None:
    b = sub.add_parser(
        "bench", help="time FlyDSL vs ATen vs Triton (vs in-tree FlyDSL) per op on an MI350; elsewhere: the plan",
        description=__doc__.split("\n\n")[0].replace("``", "") + " Without a ROCm gfx950 GPU: the plan, exit 0.",
        epilog=SHAPES_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    b.add_argument("op", choices=[*bench_ops(), "all"], help="the op whose suite runs (all: every one, and summary.md)")
    b.add_argument("--shapes", default="seed", metavar="seed|FILE",
                   help="seed: the suite's built-in shapes (default); FILE: a JSON or CSV file of shapes for the op")
    b.add_argument("--out", default=None, metavar="DIR", help="output directory (default ./torch_flydsl_bench/<timestamp>)")
    b.add_argument("--warmup", type=int, default=None, help="warm-up calls per column (default: the suite's, 10)")
    b.add_argument("--iters", type=int, default=None, help="timed calls per column (default: the suite's)")
    b.add_argument("--breadth", choices=["baseline", "curated", "exhaustive"], default=None,
                   help="GEMM suites: which FlyDSL configs to time per shape (default curated); the eager ops "
                        "time the config their override picks")
    b.add_argument("--no-triton", action="store_true", help="skip the Triton (Inductor) column")
    b.add_argument("--no-check", action="store_true", help="GEMM suites: skip the float64 correctness check")
    b.add_argument("--flush-l2", action="store_true",
                   help="zero 512 MiB before each timed call (mm then times with events, not CUDA graphs; "
                        "topk: not supported)")
    b.add_argument("--table", default=None, metavar="FILE",
                   help="mm, scaled_mm, grouped_mm: merge into FILE (what TORCH_FLYDSL_DISPATCH_TABLE / the vLLM "
                        "re-routes read) an entry for every shape where FlyDSL beats the kernel the entry would "
                        "replace (with vLLM importable: vLLM's own path, and never losing to ATen) by more than "
                        "1%%, inside the MI355X roofline; neighbouring winning M merge into M ranges; every other "
                        "shape is printed with its reason (and in the CSV's table column)")
    b.add_argument("--no-vllm", action="store_true",
                   help="mm, scaled_mm, grouped_mm: no vLLM column even where vLLM imports (then --table judges "
                        "against the fastest of ATen, Triton and in-tree)")
    b.set_defaults(fn=run)


class BenchError(Exception):
    """A usage error the CLI reports in one line with exit code 2."""


def load_suite(op: str):
    """``(suite, None)``, or ``(None, why it is skipped)`` when its family is not registered or
    its suite does not import."""
    from ..registry import user_op

    found = user_op(op)
    if found is None or not found[1].bench:
        return None, "no registered kernel family names a bench suite for it"
    try:
        suite = importlib.import_module(found[1].bench).BENCH
    except Exception as e:  # a suite (or the family code it imports) missing from this install
        return None, f"its suite does not import ({type(e).__name__}: {e})"
    return suite, None


def shapes_for(suite, spec: str) -> list:
    if spec == "seed":
        return suite.seed()
    from .shapes import load

    recorded = _recorded_shapes(suite, Path(spec))
    return recorded if recorded is not None else load(spec, suite.fields)


def _recorded_shapes(suite, path: Path):
    """The suite's shape records for a precompile shapes spec (``Suite.from_spec``), None when
    ``path`` is not one."""
    import json

    from ..deploy.spec import SHAPES_FORMAT, SpecError, load

    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(doc, dict) or doc.get("format") != SHAPES_FORMAT:
        return None
    if suite.from_spec is None:
        raise BenchError(f"{path} is a precompile shapes spec; bench {suite.op} does not read those")
    try:
        shapes = [w.shape for w in load(path).work]
    except SpecError as e:
        raise BenchError(str(e)) from None
    records = suite.from_spec(shapes)
    if isinstance(records, str):
        raise BenchError(f"{path} {records}")
    return records


def vllm_status(suite, args) -> Optional[str]:
    """Why ``suite`` gets no vLLM column in this run (None: it gets one)."""
    if suite.vllm_plan is None:
        return None
    if getattr(args, "no_vllm", False):
        return "--no-vllm"
    from . import vllm_columns

    return vllm_columns.status(suite.op)


def options_for(suite, args, intree: bool, vllm: bool = False):
    """The suite's own options (its script's defaults) with the CLI's pass-through flags
    (``vllm``: the suite times its vLLM column)."""
    ns = suite.options([])
    ns.vllm = vllm
    for name in ("warmup", "iters", "breadth"):
        value = getattr(args, name)
        if value is not None and hasattr(ns, name):
            setattr(ns, name, value)
    ns.no_triton = args.no_triton
    ns.intree = intree
    if args.no_check and hasattr(ns, "no_check"):
        ns.no_check = True
    if args.flush_l2:
        if hasattr(ns, "flush_l2"):
            ns.flush_l2 = True
            if hasattr(ns, "timing"):
                ns.timing = "events"  # a graph replays its calls back to back
        elif hasattr(ns, "flush"):
            ns.flush = True
    return ns


def output_files(suite, out_dir: Path) -> list[Path]:
    names = [f"{suite.op}.csv", *([f"{suite.op}_configs.csv"] if suite.config_columns else []), f"{suite.op}.md",
             f"{suite.op}.png"]
    return [out_dir / n for n in names]


def _numbers(indices: list[int]) -> str:
    """``[1, 2, 3, 5]`` -> ``#1-3, #5``."""
    spans, start = [], None
    for i, x in enumerate(indices):
        if start is None:
            start = x
        if i + 1 == len(indices) or indices[i + 1] != x + 1:
            spans.append(f"#{start}" if start == x else f"#{start}-{x}")
            start = None
    return ", ".join(spans)


def plan_text(suite, records: list, opts, out_dir: Path, source: str, table_file: Optional[str] = None,
              vllm_why: Optional[str] = None) -> str:
    """What ``bench`` would run for one op: its shapes, the FlyDSL configs each would time and
    the baselines (the vLLM column per shape, what it times), the files it would write, and with
    ``table_file`` how the dispatch-table entries would be picked. ``vllm_why``: why the suite has
    no vLLM column (with ``opts.vllm`` off)."""
    from .tables import table

    names = [b.label for b in suite.baselines(opts.intree)]
    if opts.no_triton:
        names.remove("Triton (Inductor)")
    vllm = bool(getattr(opts, "vllm", False)) and suite.vllm_plan is not None
    rows: list[tuple] = []
    sets: dict[tuple, list[int]] = {}
    for i, rec in enumerate(records, 1):
        got = suite.plan(rec, opts)
        if isinstance(got, str):
            rows.append((i, suite.label(rec), got, "-"))
            continue
        column = suite.vllm_plan(rec, opts) if vllm else None
        rows.append((i, suite.label(rec), len(got), ", ".join([f"FlyDSL x{len(got)}", *names,
                                                               *([column] if column else [])])))
        sets.setdefault(got, []).append(i)
    timing = f"{opts.warmup} warm-up + {opts.iters} timed calls per column"
    if hasattr(opts, "timing"):
        timing += f", {'CUDA graph replays' if opts.timing == 'graph' else 'CUDA events'}"
    if getattr(opts, "flush_l2", False) or getattr(opts, "flush", False):
        timing += ", L2 flushed before each call"
    breadth = f"{opts.breadth} " if hasattr(opts, "breadth") and suite.config_columns else ""
    lines = [f"== {suite.op}: {suite.title}",
             f"{len(records)} shapes ({source}); each column checked first, then timed ({timing})",
             *vllm_lines(suite, vllm, vllm_why),
             table(rows, ["#", "shape", f"FlyDSL {breadth}configs", "candidates (timed columns)"], floatfmt="g")]
    for keys, where in sets.items():
        scope = "every shape" if len(where) == len(records) else _numbers(where)
        lines.append(f"FlyDSL configs ({scope}): {', '.join(keys) or 'none'}")
    if table_file and suite.table_picks is not None:
        lines.append(table_rule(suite, vllm, opts, table_file))
    lines.append("would write: " + ", ".join(str(p) for p in output_files(suite, out_dir)))
    return "\n".join(lines)


def vllm_lines(suite, vllm: bool, why: Optional[str]) -> list[str]:
    """The vLLM column's header: the environment that steers vLLM's choice, or why there is none."""
    if suite.vllm_plan is None:
        return []
    if not vllm:
        return [f"no vLLM column: {why or 'not asked for'}"]
    from . import vllm_columns

    return [f"vLLM column: what vLLM {vllm_columns.version()} itself runs for the call a table hit would replace: "
            f"{vllm_columns.WHAT.get(suite.op, 'see bench.vllm_columns')}",
            vllm_columns.env_line()]


def table_rule(suite, vllm: bool, opts, table_file: str) -> str:
    """How ``--table`` would pick this suite's entries."""
    from .picks import PEAKS_SOURCE, ROOFLINE_TOLERANCE
    from .report import TIE_BAND

    against = ("the vLLM column (and never losing to ATen)" if vllm else
               "the fastest of ATen, Triton and in-tree (no vLLM column)")
    return (f"--table {table_file}: an entry where FlyDSL beats {against} by more than {TIE_BAND:.0%} (ties keep "
            f"the incumbent), no time under {ROOFLINE_TOLERANCE:g} x the roofline ({PEAKS_SOURCE}); neighbouring "
            "winning M with one config merge into M ranges; every other shape is printed with its reason")


def csv_columns(suite, rows: list) -> list:
    """The suite's columns, then any other key a row holds (Triton's and in-tree's columns)."""
    cols = list(suite.columns)
    for r in rows:
        cols += [k for k in r if k not in cols]
    return cols


def write_outputs(suite, rows: list, config_rows: list, out_dir: Path, intree: bool, preamble=(),
                  vllm: bool = False) -> list[Path]:
    """``<op>.csv`` (and ``<op>_configs.csv``), ``<op>.md`` and, with matplotlib, ``<op>.png``."""
    from .plots import plot_speedups
    from .report import markdown
    from .tables import write_csv

    baselines = suite.baselines(intree, vllm)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    path = out_dir / f"{suite.op}.csv"
    write_csv(path, rows, csv_columns(suite, rows))
    written.append(path)
    if suite.config_columns:
        path = out_dir / f"{suite.op}_configs.csv"
        write_csv(path, config_rows, list(suite.config_columns))
        written.append(path)
    config = "flydsl_config" if "flydsl_config" in suite.columns else "config"
    path = out_dir / f"{suite.op}.md"
    path.write_text(markdown(suite.title, rows, baselines, suite.label, config, preamble))
    written.append(path)
    path = out_dir / f"{suite.op}.png"
    if plot_speedups(path, suite.title, rows, baselines, suite.label):
        written.append(path)
    return written


def summary_markdown(results: list, preamble=()) -> str:
    """``summary.md``: per op, the geomean speedup and win/tie/loss counts against each baseline."""
    from .report import TIE_BAND, compare, speedup_text

    lines = ["# torch_flydsl bench: summary", "", *preamble, *([""] if preamble else []),
             f"Geomean speedup (baseline time / FlyDSL time) and wins/ties/losses (ties within +-{TIE_BAND:.0%}) "
             "against each baseline; details in each op's report.", ""]
    keys = ["aten", "triton", "intree", *(["vllm"] if any(b.key == "vllm" for _, _, bs in results for b in bs)
                                          else [])]
    names = {"aten": "ATen", "triton": "Triton (Inductor)", "intree": "in-tree FlyDSL", "vllm": "vLLM"}
    lines += ["| op | shapes | " + " | ".join(f"vs {names[k]}" for k in keys) + " | report |",
              "|" + "---|" * (len(keys) + 3)]
    for suite, rows, baselines in results:
        cells = {}
        for b in baselines:
            c = compare(rows, b)
            cells[b.key] = f"{speedup_text(c.geomean)} ({c.tally()})" if c.shapes else "n/a"
        lines.append(f"| {suite.op} | {len(rows)} | " + " | ".join(cells.get(k, "-") for k in keys)
                     + f" | [{suite.op}.md]({suite.op}.md) |")
    return "\n".join(lines) + "\n"


def _environment() -> list[str]:
    import torch

    return [f"{torch.cuda.get_device_name(0)}, torch {torch.__version__} (HIP {torch.version.hip}), "
            f"{time.strftime('%Y-%m-%d %H:%M:%S')}"]


def table_picks(suite, rows: list, opts=None) -> list:
    """``suite``'s judged shapes (``Suite.table_picks``, ``bench.picks``), M ranges merged; each
    row's ``table`` cell says what became of it."""
    from .picks import merge_ranges

    picks = merge_ranges(suite.table_picks(rows, opts))
    for p in picks:
        for r in p.rows:
            r["table"] = p.reason
    return picks


def write_table(rows: list, path: Path, op: str, opts=None, picks: Optional[list] = None) -> str:
    """Merge the entries ``op``'s suite picks from ``rows`` (``table_picks``) into the dispatch
    table at ``path``; one line saying what was written."""
    from .picks import write_table as write

    suite, why = load_suite(op)
    if suite is None or suite.table_picks is None:
        raise BenchError(f"bench {op} writes no dispatch-table entries ({why or 'its suite names none'})")
    return write(Path(path), table_picks(suite, rows, opts) if picks is None else picks)


def run(args) -> int:
    try:
        return _run(args)
    except BenchError as e:
        print(f"python -m torch_flydsl bench: error: {e}", file=sys.stderr)
        return 2


def _run(args) -> int:
    from .shapes import ShapesFileError
    from .suite import intree_present
    from .timing import device_gate

    ops = bench_ops() if args.op == "all" else [args.op]
    if args.shapes != "seed" and len(ops) > 1:
        raise BenchError("--shapes FILE holds the shapes of one op: name the op, not all")
    out_dir = Path(args.out) if args.out else Path("torch_flydsl_bench") / time.strftime("%Y%m%d-%H%M%S")
    work, skipped = [], []
    for op in ops:
        suite, why = load_suite(op)
        if suite is None:
            print(f"bench: skipping {op}: {why}")
            skipped.append(op)
            continue
        try:
            records = shapes_for(suite, args.shapes)
        except ShapesFileError as e:
            raise BenchError(str(e)) from None
        for line in getattr(records, "skipped", ()):
            print(f"bench {op}: {line}")
        intree = intree_present(suite.intree_op)
        no_vllm = vllm_status(suite, args)
        opts = options_for(suite, args, intree, suite.vllm_plan is not None and no_vllm is None)
        opts.vllm_why = no_vllm
        work.append((suite, records, opts, intree))
    if not work:
        return 1
    source = "seed" if args.shapes == "seed" else args.shapes
    why = device_gate()
    if why:
        print(f"bench: no ROCm gfx950 GPU here ({why}); nothing launched. The plan:\n")
        for suite, records, opts, _ in work:
            print(plan_text(suite, records, opts, out_dir, source, args.table, opts.vllm_why) + "\n")
        if len(ops) > 1:
            print(f"would write: {out_dir / 'summary.md'}")
        return 0
    from ..runtime.probe import flydsl_info

    info = flydsl_info()
    if not info.usable:
        print(f"bench: gfx950 found but flydsl is unusable: {info.reason}")
        return 1
    preamble = _environment()
    results, failed = [], []
    for suite, records, opts, intree in work:
        print(f"bench {suite.op}: {len(records)} shapes ...", file=sys.stderr, flush=True)
        try:
            rows, config_rows = suite.measure(records, opts)
        except Exception as e:  # one suite failing leaves the others to run
            print(f"bench: {suite.op} failed: {type(e).__name__}: {e}")
            failed.append(suite.op)
            continue
        header = vllm_lines(suite, opts.vllm, opts.vllm_why)
        for line in header:
            print(f"{suite.op}: {line}")
        picks = table_picks(suite, rows, opts) if args.table and suite.table_picks is not None else None
        written = write_outputs(suite, rows, config_rows, out_dir, intree, [*preamble, *header], opts.vllm)
        results.append((suite, rows, suite.baselines(intree, opts.vllm)))
        from .report import compare

        for b in suite.baselines(intree, opts.vllm):
            print(f"{suite.op}: {compare(rows, b).line()}")
        if picks is not None:
            for p in picks:
                print(f"{suite.op}: {p.label}: {p.reason}")
            print(f"{suite.op}: {write_table(rows, Path(args.table), suite.op, opts, picks)}")
        print(f"{suite.op}: wrote " + ", ".join(str(p) for p in written))
    if len(ops) > 1 and results:
        path = out_dir / "summary.md"
        path.write_text(summary_markdown(results, preamble))
        print(f"wrote {path}")
    return 1 if failed else 0
