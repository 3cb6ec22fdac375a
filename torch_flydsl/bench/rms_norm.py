"""Eager RMSNorm on an MI350 (gfx950): FlyDSL vs PyTorch's own kernel, seed-like sweep.

Hidden sizes 4096/4097/8192/8193/16384/... (aligned and one-over, where PyTorch's vectorized
path stops applying) x row counts, bf16 and fp16, with weight. Each case: ``F.rms_norm`` with
the plugin (its ``_fused_rms_norm`` override) and inside ``torch_flydsl.disabled()`` (PyTorch's
kernel; where torch's in-tree FlyDSL override registered ``_fused_rms_norm``, that one is
stepped aside too), outputs checked against the float64 reference first, then timed with
CUDA events (L2/Infinity Cache flushed per call with ``--flush``). Prints a table, writes a CSV
and, with matplotlib, a plot of the speedups.

Through ``python -m torch_flydsl bench rms_norm`` each case also gets a Triton column
(``torch.compile`` of the same ``F.rms_norm``: Inductor's own Triton reduction) and, where
torch ships its in-tree FlyDSL eager overrides, an in-tree column.

Without a ROCm gfx950 GPU it prints its plan (cases, the config each would get) and exits 0.

    python benchmarks/rmsnorm_device_bench.py [--dry-run] [--out DIR] [--flush] [--iters N]
    python -m torch_flydsl bench rms_norm [--shapes seed|FILE] [--out DIR]   # the installed command
"""

from __future__ import annotations

import argparse
import itertools
from pathlib import Path
from typing import Iterable

import torch

from ..templates.base import Decline
from . import baselines
from .plots import plot_speedups, present
from .report import Baseline, geomean
from .shapes import Field
from .suite import Suite, plan_keys
from .tables import table, write_csv
from .timing import FLUSH_BYTES, device_gate, rel_error, short_error, time_ms

HIDDEN = (2048, 4096, 4097, 5120, 8192, 8193, 16384, 16385, 32768)
ROWS = (1, 64, 1024, 8192, 32768)
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
SUITE = [(d, r, n) for d, r, n in itertools.product(DTYPES, ROWS, HIDDEN)]
COLUMNS = ["dtype", "rows", "n", "config", "flydsl_ms", "pytorch_ms", "speedup", "gbps_flydsl", "err_flydsl",
           "err_pytorch"]
EPS = 1e-6


def _config(dtype: str, rows: int, n: int):
    """The config the eager override would pick, or the family's Decline."""
    from ..templates.rmsnorm import baseline_for
    from ..templates.rmsnorm.family import FAMILY

    p = FAMILY.explain_problem(rows, n, dtype, True)
    return p if isinstance(p, Decline) else baseline_for(p)


def plan_row(dtype: str, rows: int, n: int) -> tuple:
    c = _config(dtype, rows, n)
    return (dtype, rows, n, str(c) if isinstance(c, Decline) else c.key())


def _other_column(row: dict, key: str, make, ref, iters: int, flush, warmup: int) -> None:
    """Triton's or the in-tree backend's column: ``<key>_ms`` and ``err_<key>``, or a note."""
    try:
        fn = make()
        row[f"err_{key}"] = rel_error(fn().cpu(), ref)
        row[f"{key}_ms"] = time_ms(fn, warmup, iters, flush)
    except Exception as e:  # no Triton code / no in-tree override here, or a compile failure
        row["note"] = "; ".join(filter(None, [row.get("note"), f"{key}: {short_error(e)}"]))


def bench_case(dtype: str, rows: int, n: int, iters: int, flush, warmup: int = 10, triton: bool = False,
               intree: bool = False) -> dict:
    import torch.nn.functional as F

    from ..templates.rmsnorm import reference

    dt = DTYPES[dtype]
    x = torch.randn(rows, n, device="cuda", dtype=dt)
    w = torch.randn(n, device="cuda", dtype=dt)
    ref = reference(x.cpu(), w.cpu(), EPS)[0]

    def ours():
        return F.rms_norm(x, (n,), w, EPS)

    pytorch = baselines.eager_pytorch_fn(ours, "rms_norm")
    out, theirs = ours(), pytorch()
    t_ours = time_ms(ours, warmup, iters, flush)
    t_theirs = time_ms(pytorch, warmup, iters, flush)
    moved = 2 * rows * n * x.element_size() + n * x.element_size() + rows * 4
    row = {"dtype": dtype, "rows": rows, "n": n, "config": plan_row(dtype, rows, n)[3], "flydsl_ms": t_ours,
           "pytorch_ms": t_theirs, "speedup": t_theirs / t_ours, "gbps_flydsl": moved / (t_ours * 1e-3) / 1e9,
           "err_flydsl": rel_error(out.cpu(), ref), "err_pytorch": rel_error(theirs.cpu(), ref)}
    if triton:
        _other_column(row, "triton", lambda: baselines.triton_fn(lambda x, w: F.rms_norm(x, (n,), w, EPS), x, w,
                                                                 gemm=False, what="rms_norm"),
                      ref, iters, flush, warmup)
    if intree:
        _other_column(row, "intree", lambda: baselines.eager_intree_fn(ours, "rms_norm"), ref, iters, flush, warmup)
    return row


def plot(results: list, path: Path) -> bool:
    """FlyDSL's speedups per case (``plots.plot_speedups``) against each column timed."""
    return plot_speedups(path, BENCH.title, results, present(results, BENCH.baselines(True, True)), BENCH.label)


def measure(cases: Iterable[tuple[str, int, int]], args) -> tuple[list, list]:
    """Every ``(dtype, rows, n)`` of ``cases`` on the current GPU: (rows, no config rows)."""
    flush = torch.empty(FLUSH_BYTES, dtype=torch.uint8, device="cuda") if args.flush else None
    results = [bench_case(dtype, rows, n, args.iters, flush, args.warmup, triton=not getattr(args, "no_triton", True),
                          intree=getattr(args, "intree", False)) for dtype, rows, n in cases]
    return results, []


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dry-run", action="store_true", help="print the plan and exit")
    ap.add_argument("--out", type=Path, default=Path("rmsnorm_bench"))
    ap.add_argument("--iters", type=int, default=100)
    ap.add_argument("--flush", action="store_true", help="flush caches before each timed call")
    args = ap.parse_args(argv)
    args.warmup = 10
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    print(f"plan: {len(SUITE)} cases (dtype x rows x hidden), F.rms_norm with weight, eps=1e-6")
    print(table([plan_row(*c) for c in SUITE], ["dtype", "rows", "n", "FlyDSL config (or decline)"]))
    why = None if args.dry_run else device_gate()
    if args.dry_run or why:
        print(f"not timing: {'--dry-run' if args.dry_run else why}")
        return 0
    results, _ = measure(SUITE, args)
    print(table([[r[c] for c in COLUMNS] for r in results], COLUMNS))
    print(f"geomean speedup: {geomean(r['speedup'] for r in results):.3f}")
    args.out.mkdir(parents=True, exist_ok=True)
    write_csv(args.out / "rmsnorm.csv", results, COLUMNS)
    if plot(results, args.out / "rmsnorm_speedup.png"):
        print(f"plot: {args.out / 'rmsnorm_speedup.png'}")
    return 0


# -- python -m torch_flydsl bench rms_norm ------------------------------------------------------


def _record_plan(rec: dict, args):
    return plan_keys(_config(rec["dtype"], rec["rows"], rec["n"]))


BENCH = Suite(
    op="rms_norm",
    intree_op="rms_norm",
    title="F.rms_norm (eager, last dim, with weight, eps=1e-6)",
    fields=(Field("dtype", str, "bf16", tuple(DTYPES)), Field("rows"), Field("n")),
    seed=lambda: [{"dtype": d, "rows": r, "n": n} for d, r, n in SUITE],
    label=lambda r: f"{r['dtype']} {r['rows']}x{r['n']}",
    plan=_record_plan,
    options=lambda argv: parse_args(argv),
    measure=lambda recs, args: measure([(r["dtype"], r["rows"], r["n"]) for r in recs], args),
    aten=Baseline("aten", "ATen", "pytorch_ms"),
    columns=tuple(COLUMNS),
)
