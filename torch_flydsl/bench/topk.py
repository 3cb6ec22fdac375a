"""FlyDSL TopK vs torch.topk on an MI350 (gfx950): a seed-like sweep of rows x N x k.

    python benchmarks/topk_device_bench.py [--dtypes fp32,bf16] [--smallest] [--out DIR]
    python benchmarks/topk_device_bench.py --dry-run      # the plan; no GPU needed
    python -m torch_flydsl bench topk [--shapes seed|FILE] [--out DIR]   # the installed command

Per shape: the FlyDSL kernel through its launcher (the config the eager override picks) and
``torch.topk`` (inside ``torch_flydsl.disabled()``: PyTorch's own kernel), both checked against
the exact reference first (values bit-equal, indices pointing at them), then timed with events.
Prints a table and the geometric-mean speedup, writes a CSV and, with matplotlib, a plot.
Without a ROCm gfx950 GPU it prints why and exits 0.

``torch.topk``'s column is PyTorch's kernel: where torch's in-tree FlyDSL override registered
topk, it is stepped aside too. Through ``python -m torch_flydsl bench topk`` each shape also
gets a Triton column (``torch.compile`` of the same ``torch.topk``; empty with a note where
Inductor runs no Triton kernel for it) and, where torch ships its in-tree FlyDSL eager
overrides, an in-tree column. (This module holds the suite; ``benchmarks/topk_device_bench.py``
is its script entry point.)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

from ..templates.base import Decline
from . import baselines
from .plots import plot_speedups, present
from .report import Baseline, geomean
from .shapes import Field
from .suite import Suite, plan_keys
from .tables import table, write_csv
from .timing import device_gate, short_error, time_ms

ROWS = (1, 64, 256, 4096, 16384)
NS = (1024, 4096, 32768)
KS = (1, 8, 64, 256, 1024)
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
COLUMNS = ["dtype", "rows", "N", "k", "config", "flydsl_ms", "torch_ms", "speedup", "check"]


def suite():
    return [(r, n, k) for r in ROWS for n in NS for k in KS if k <= n]


def config_for(name: str, rows: int, n: int, k: int, largest: bool):
    """The config the eager override would pick (sorted output), or the family's Decline."""
    from ..templates.topk.config import baseline_for
    from ..templates.topk.family import FAMILY

    p = FAMILY.explain_problem(rows, n, k, DTYPES[name], largest, True)
    return p if isinstance(p, Decline) else baseline_for(p)


def plan(dtypes, largest: bool):
    """``[(dtype, rows, n, k, config key or the decline)]``: what would run, from the family gate."""
    out = []
    for name in dtypes:
        for rows, n, k in suite():
            c = config_for(name, rows, n, k, largest)
            out.append((name, rows, n, k, str(c) if isinstance(c, Decline) else c.key()))
    return out


def dry_run(dtypes, largest: bool) -> int:
    rows = plan(dtypes, largest)
    print(f"topk_device_bench plan: {len(rows)} shapes ({'largest' if largest else 'smallest'}, sorted), "
          "FlyDSL vs torch.topk")
    print(table([list(r) for r in rows], ["dtype", "rows", "N", "k", "config"]))
    return 0


def check(x, k, largest, v, i) -> str:
    from ..templates.topk.reference import reference

    rv, _ = reference(x.cpu(), k, -1, largest, True)
    vb, rb = v.cpu().contiguous(), rv.contiguous()
    same = torch.equal(vb.view(torch.int16 if vb.itemsize == 2 else torch.int32),
                       rb.view(torch.int16 if rb.itemsize == 2 else torch.int32))
    points = torch.equal(torch.gather(x, -1, i).cpu().view(vb.dtype), vb)
    return "ok" if same and points else "MISMATCH"


def _other_column(row: dict, key: str, make, x, k: int, largest: bool, args) -> None:
    """Triton's or the in-tree backend's column: ``<key>_ms`` and ``<key>_check``, or a note."""
    try:
        fn = make()
        v, i = fn()
        row[f"{key}_check"] = check(x, k, largest, v, i)
        row[f"{key}_ms"] = time_ms(fn, args.warmup, args.iters)
    except Exception as e:  # no Triton code / no in-tree override here, or a compile failure
        row["note"] = "; ".join(filter(None, [row.get("note"), f"{key}: {short_error(e)}"]))


def bench_shape(name, rows, n, k, largest, args) -> dict:
    from ..templates.topk.config import baseline_for
    from ..templates.topk.launcher import allocate, checked_problem, launch

    row = {"dtype": name, "rows": rows, "N": n, "k": k}
    x = torch.randn(rows, n, device="cuda").to(DTYPES[name])
    problem = checked_problem(x, k, -1, largest, True)
    cfg = baseline_for(problem)
    v, i = allocate(x, problem)
    row["config"] = cfg.key()
    run_ours = lambda: launch(cfg, problem, x, v, i)  # noqa: E731
    run_ours()
    torch.cuda.synchronize()
    row["check"] = check(x, k, largest, v, i)

    def topk():
        return torch.topk(x, k, largest=largest)

    row["flydsl_ms"] = time_ms(run_ours, args.warmup, args.iters)
    row["torch_ms"] = time_ms(baselines.eager_pytorch_fn(topk, "topk"), args.warmup, args.iters)
    row["speedup"] = row["torch_ms"] / row["flydsl_ms"]
    if not getattr(args, "no_triton", True):  # the script has no Triton column; the bench CLI does
        _other_column(row, "triton", lambda: baselines.triton_fn(lambda x: torch.topk(x, k, largest=largest), x,
                                                                 gemm=False, what="topk"), x, k, largest, args)
    if getattr(args, "intree", False):
        _other_column(row, "intree", lambda: baselines.eager_intree_fn(topk, "topk"), x, k, largest, args)
    return row


def plot(path: Path, rows: list) -> bool:
    """FlyDSL's speedups per shape (``plots.plot_speedups``) against each column timed."""
    return plot_speedups(path, BENCH.title, rows, present(rows, BENCH.baselines(True, True)), BENCH.label)


def measure(shapes, args) -> tuple[list, list]:
    """Every ``(dtype, rows, N, k)`` of ``shapes`` on the current GPU: (rows, no config rows)."""
    rows = []
    for name, r, n, k in shapes:
        print(f"{name} {r}x{n} k={k} ...", file=sys.stderr, flush=True)
        rows.append(bench_shape(name, r, n, k, not args.smallest, args))
    return rows, []


def run(args) -> int:
    from torch_flydsl.runtime.probe import flydsl_info

    info = flydsl_info()
    if not info.usable:
        print(f"topk_device_bench: gfx950 found but flydsl is unusable: {info.reason}")
        return 1
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    rows, _ = measure([(name, r, n, k) for name in args.dtypes for r, n, k in suite()], args)
    print(f"{torch.cuda.get_device_name(0)}, torch {torch.__version__} (HIP {torch.version.hip})")
    print(table([[r.get(c) for c in COLUMNS] for r in rows], COLUMNS))
    g = geomean(r.get("speedup") for r in rows)
    print("geometric-mean speedup over torch.topk: " + (f"{g:.3f}x" if g else "n/a"))
    write_csv(out_dir / "topk_bench.csv", rows, COLUMNS)
    png = out_dir / "topk_bench.png"
    print(f"wrote {out_dir}/topk_bench.csv" + (f", {png.name}" if plot(png, rows) else " (no matplotlib: no plot)"))
    return 0


def parse_args(argv=None):
    p = argparse.ArgumentParser(description="FlyDSL TopK vs torch.topk on gfx950")
    p.add_argument("--dtypes", default="fp32,bf16", type=lambda s: s.split(","), help="comma-separated: fp32, bf16, fp16")
    p.add_argument("--smallest", action="store_true", help="largest=False")
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--iters", type=int, default=50)
    p.add_argument("--out", default="topk_bench", help="directory for the CSV and the plot")
    p.add_argument("--dry-run", action="store_true", help="print the plan; no GPU needed")
    args = p.parse_args(argv)
    unknown = [d for d in args.dtypes if d not in DTYPES]
    if unknown:
        p.error(f"unknown dtype(s) {unknown}: choose from {', '.join(DTYPES)}")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.dry_run:
        return dry_run(args.dtypes, not args.smallest)
    why = device_gate()
    if why:
        print(f"topk_device_bench: no ROCm gfx950 GPU here ({why}); nothing timed (--dry-run prints the plan)")
        return 0
    return run(args)


if __name__ == "__main__":
    sys.exit(main())


# -- python -m torch_flydsl bench topk ----------------------------------------------------------


def _record_plan(rec: dict, args):
    return plan_keys(config_for(rec["dtype"], rec["rows"], rec["N"], rec["k"], not args.smallest))


BENCH = Suite(
    op="topk",
    intree_op="topk",
    title="torch.topk (eager, last dim of a contiguous [rows, N] tensor, sorted)",
    fields=(Field("dtype", str, "fp32", tuple(DTYPES)), Field("rows"), Field("N"), Field("k")),
    seed=lambda: [{"dtype": d, "rows": r, "N": n, "k": k} for d in ("fp32", "bf16") for r, n, k in suite()],
    label=lambda r: f"{r['dtype']} {r['rows']}x{r['N']} k{r['k']}",
    plan=_record_plan,
    options=lambda argv: parse_args(argv),
    measure=lambda recs, args: measure([(r["dtype"], r["rows"], r["N"], r["k"]) for r in recs], args),
    aten=Baseline("aten", "ATen", "torch_ms"),
    columns=tuple(COLUMNS),
)
