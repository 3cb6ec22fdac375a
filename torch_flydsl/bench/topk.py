"""FlyDSL TopK vs torch.topk on an MI350 (gfx950): the seeds' cases, with and without
deterministic algorithms.

    python benchmarks/topk_device_bench.py [--dtypes fp32] [--modes off,on] [--cases seeds|sweep] [--out DIR]
    python benchmarks/topk_device_bench.py --dry-run      # the plan; no GPU needed
    python -m torch_flydsl bench topk [--shapes seed|FILE] [--out DIR]   # the installed command

The seeds report TopK as a small-k figure (10 cases, k in {2, 4, 8, 16}: a 4.82x geometric
mean over ATen with deterministic algorithms off, 4.02x with them on) and large-k bands (1.40x
to 1.97x per band). They name the bands, not the shapes; the cases here follow the band
limits of the upstream PR behind those figures (register kernel: k in {2, 4, 8, 16}, N a power
of two from 1024 to 8192; radix: k 64 to 256, N 8192 to 32768; rows at least the 256 CUs):

- ``SMALL_K``: 10 (rows, N, k), every k at least twice, every N, rows 256 to 16384;
- ``LARGE_K``: one band per k in {64, 128, 256}, each N in {8192, 16384, 32768} at 256 and
  4096 rows (18 cases);

each timed with ``torch.use_deterministic_algorithms`` off and on (ATen under the same
setting), fp32 by default (the upstream kernels' dtype; ``--dtypes`` adds bf16/fp16).
``--cases sweep`` times the older rows x N x k grid instead.

Per case: ``torch.topk`` with the plugin (its eager override; the served config is read from
the plugin's own log line, so a call that fell back to PyTorch's kernel is marked, not timed
as FlyDSL's) and inside ``torch_flydsl.disabled()`` (PyTorch's kernel; where torch's in-tree
FlyDSL override registered topk, it is stepped aside too), both checked against the exact
reference (values bit-equal, indices pointing at them) first, then timed with CUDA events.
``repro``: two FlyDSL calls on a row full of ties return bit-identical indices. Prints a
table, the geometric mean per group (small-k per mode, each large-k band per mode), writes a
CSV and, with matplotlib, a plot. Without a ROCm gfx950 GPU it prints why and exits 0.

Through ``python -m torch_flydsl bench topk`` each case also gets a Triton column
(``torch.compile`` of the same ``torch.topk``; empty with a note where Inductor runs no Triton
kernel for it) and, where torch ships its in-tree FlyDSL eager overrides, an in-tree column.
(This module holds the suite; ``benchmarks/topk_device_bench.py`` is its script entry point.)
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path
from typing import Optional

import torch

from . import baselines
from .plots import plot_speedups, present
from .report import Baseline, geomean, speedup_text
from .served import flydsl_config, served_by
from .shapes import Field
from .suite import Suite
from .tables import table, write_csv
from . import timing
from .timing import device_gate, short_error

SMALL_K = ((256, 1024, 2), (256, 8192, 16), (1024, 2048, 4), (1024, 4096, 8), (4096, 1024, 8),
           (4096, 2048, 16), (4096, 4096, 2), (4096, 8192, 4), (16384, 1024, 16), (16384, 4096, 8))
LARGE_K_BANDS = (64, 128, 256)
LARGE_K = tuple((r, n, k) for k in LARGE_K_BANDS for n in (8192, 16384, 32768) for r in (256, 4096))
# --cases sweep: the rows x N x k grid of earlier versions of this bench
SWEEP = tuple((r, n, k) for r in (1, 64, 256, 4096, 16384) for n in (1024, 4096, 32768) for k in (1, 8, 64, 256, 1024)
              if k <= n)
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
MODES = {"off": False, "on": True}
COLUMNS = ["group", "deterministic", "dtype", "rows", "N", "k", "algorithm", "config", "flydsl_ms", "torch_ms",
           "speedup", "check", "repro"]


def group_of(rows: int, n: int, k: int) -> str:
    """``small-k``, ``large-k k=<band>`` or ``sweep``: where a case's geomean is reported."""
    if (rows, n, k) in SMALL_K:
        return "small-k"
    if (rows, n, k) in LARGE_K:
        return f"large-k k={k}"
    return "sweep"


def cases(which: str = "seeds") -> tuple:
    return SMALL_K + LARGE_K if which == "seeds" else SWEEP


def records(dtypes=("fp32",), modes=("off", "on"), which: str = "seeds") -> list[dict]:
    """The shape records (the suite's fields) of ``cases(which)`` for each dtype and mode."""
    return [{"dtype": d, "rows": r, "N": n, "k": k, "deterministic": MODES[m]}
            for d in dtypes for m in modes for r, n, k in cases(which)]


@contextlib.contextmanager
def deterministic(on: bool):
    """``torch.use_deterministic_algorithms(on)`` for the block (warn-only: timing, not auditing
    other ops), restored after."""
    before, warn = torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()
    torch.use_deterministic_algorithms(on, warn_only=True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(before, warn_only=warn)


def plan_entry(rec: dict, largest: bool = True) -> dict:
    """What the family would do with a record (``explain topk``, as if on gfx950, in the
    record's deterministic mode): ``served_by``, ``config`` (or the reason), ``algorithm``."""
    from ..explain import explain

    with deterministic(rec.get("deterministic", False)):
        e = explain("topk", rec["rows"], rec["N"], rec["k"], dtype=rec["dtype"], largest=largest,
                    breadth="baseline").to_json()
    config = e["offered"][0] if e["offered"] else f"declined: {e['reason']}"
    return {"served_by": e["served_by"], "config": config, "algorithm": e.get("algorithm", "")}


def plan(recs: list, largest: bool = True) -> list[list]:
    """One row per record: group, mode, dtype, rows, N, k, algorithm, config (or the decline)."""
    out = []
    for rec in recs:
        p = plan_entry(rec, largest)
        out.append([group_of(rec["rows"], rec["N"], rec["k"]), "on" if rec.get("deterministic") else "off", rec["dtype"],
                    rec["rows"], rec["N"], rec["k"], p["algorithm"], p["config"]])
    return out


def dry_run(recs: list, largest: bool) -> int:
    rows = plan(recs, largest)
    print(f"topk_device_bench plan: {len(rows)} cases ({'largest' if largest else 'smallest'}, sorted), "
          "FlyDSL (torch.topk through the plugin) vs torch.topk (PyTorch's kernel), same deterministic setting")
    print(table(rows, ["group", "deterministic", "dtype", "rows", "N", "k", "algorithm", "config"]))
    return 0


def check(x, k, largest, v, i) -> str:
    from ..templates.topk.reference import reference

    rv, _ = reference(x.cpu(), k, -1, largest, True)
    vb, rb = v.cpu().contiguous(), rv.contiguous()
    same = torch.equal(vb.view(torch.int16 if vb.itemsize == 2 else torch.int32),
                       rb.view(torch.int16 if rb.itemsize == 2 else torch.int32))
    points = torch.equal(torch.gather(x, -1, i).cpu().view(vb.dtype), vb)
    return "ok" if same and points else "MISMATCH"


def reproducible(fn, tied) -> bool:
    """Two calls of ``fn`` on ``tied`` (rows full of equal values) give bit-identical indices."""
    a, b = fn(tied)[1], fn(tied)[1]
    return bool(torch.equal(a, b))


def _other_column(row: dict, key: str, make, x, k: int, largest: bool, args) -> None:
    """Triton's or the in-tree backend's column: ``<key>_ms`` and ``<key>_check``, or a note."""
    try:
        fn = make()
        v, i = fn()
        row[f"{key}_check"] = check(x, k, largest, v, i)
        row[f"{key}_ms"] = timing.time_ms(fn, args.warmup, args.iters)
    except Exception as e:  # no Triton code / no in-tree override here, or a compile failure
        row["note"] = "; ".join(filter(None, [row.get("note"), f"{key}: {short_error(e)}"]))


def bench_case(rec: dict, largest: bool, args) -> dict:
    name, rows, n, k, det = rec["dtype"], rec["rows"], rec["N"], rec["k"], rec.get("deterministic", False)
    row = {"group": group_of(rows, n, k), "deterministic": "on" if det else "off", "dtype": name, "rows": rows,
           "N": n, "k": k, "algorithm": plan_entry(rec, largest)["algorithm"]}
    device = getattr(args, "device", "cuda")  # plumbing tests run it on CPU tensors
    x = torch.randn(rows, n, device=device).to(DTYPES[name])
    tied = torch.randint(0, 8, (rows, n), device=device).to(DTYPES[name])

    def ours():
        return torch.topk(x, k, largest=largest)

    theirs = baselines.eager_pytorch_fn(ours, "topk")
    with deterministic(det):
        (v, i), served = served_by(ours, "topk")
        row["config"] = flydsl_config(served) or served
        row["check"] = check(x, k, largest, v, i)
        row["repro"] = "yes" if reproducible(lambda t: torch.topk(t, k, largest=largest), tied) else "NO"
        if not flydsl_config(served):
            row["note"] = f"FlyDSL did not serve: {served}"
            row["torch_ms"] = timing.time_ms(theirs, args.warmup, args.iters)
            return row
        row["flydsl_ms"] = timing.time_ms(ours, args.warmup, args.iters)
        row["torch_ms"] = timing.time_ms(theirs, args.warmup, args.iters)
        row["speedup"] = row["torch_ms"] / row["flydsl_ms"]
        if not getattr(args, "no_triton", True):  # the script has no Triton column; the bench CLI does
            _other_column(row, "triton", lambda: baselines.triton_fn(lambda x: torch.topk(x, k, largest=largest), x,
                                                                     gemm=False, what="topk"), x, k, largest, args)
        if getattr(args, "intree", False):
            _other_column(row, "intree", lambda: baselines.eager_intree_fn(ours, "topk"), x, k, largest, args)
    return row


def plot(path: Path, rows: list) -> bool:
    """FlyDSL's speedups per case (``plots.plot_speedups``) against each column timed."""
    return plot_speedups(path, BENCH.title, rows, present(rows, BENCH.baselines(True, True)), BENCH.label)


def group_geomeans(rows: list) -> list[tuple[str, str, int, Optional[float]]]:
    """(group, deterministic, cases with a speedup, geomean) per group and mode, in case order."""
    keys: list = []
    for r in rows:
        if (r["group"], r["deterministic"]) not in keys:
            keys.append((r["group"], r["deterministic"]))
    out = []
    for g, d in keys:
        s = [r["speedup"] for r in rows if (r["group"], r["deterministic"]) == (g, d) and r.get("speedup")]
        out.append((g, d, len(s), geomean(s)))
    return out


def measure(recs: list, args) -> tuple[list, list]:
    """Every record on the current GPU: (rows, no config rows)."""
    rows = []
    for rec in recs:
        print(f"{rec['dtype']} {rec['rows']}x{rec['N']} k={rec['k']} deterministic={rec.get('deterministic', False)} ...",
              file=sys.stderr, flush=True)
        rows.append(bench_case(rec, not args.smallest, args))
    return rows, []


def run(args) -> int:
    from torch_flydsl.runtime.probe import flydsl_info

    info = flydsl_info()
    if not info.usable:
        print(f"topk_device_bench: gfx950 found but flydsl is unusable: {info.reason}")
        return 1
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    rows, _ = measure(records(args.dtypes, args.modes, args.cases), args)
    print(f"{torch.cuda.get_device_name(0)}, torch {torch.__version__} (HIP {torch.version.hip})")
    print(table([[r.get(c) for c in COLUMNS] for r in rows], COLUMNS))
    for g, d, count, gm in group_geomeans(rows):
        print(f"{g}, deterministic {d}: geomean speedup over torch.topk {speedup_text(gm)} ({count} cases)")
    write_csv(out_dir / "topk_bench.csv", rows, COLUMNS + ["note"])
    png = out_dir / "topk_bench.png"
    print(f"wrote {out_dir}/topk_bench.csv" + (f", {png.name}" if plot(png, rows) else " (no matplotlib: no plot)"))
    return 0


def _list(choices):
    def parse(s: str) -> list:
        got = s.split(",")
        bad = [v for v in got if v not in choices]
        if bad:
            raise argparse.ArgumentTypeError(f"unknown {bad}: choose from {', '.join(choices)}")
        return got
    return parse


def parse_args(argv=None):
    p = argparse.ArgumentParser(description="FlyDSL TopK vs torch.topk on gfx950 (the seeds' cases)")
    p.add_argument("--dtypes", default=["fp32"], type=_list(DTYPES), help="comma-separated: fp32, bf16, fp16")
    p.add_argument("--modes", default=["off", "on"], type=_list(MODES),
                   help="torch.use_deterministic_algorithms settings to time: off, on (comma-separated)")
    p.add_argument("--cases", default="seeds", choices=("seeds", "sweep"),
                   help="seeds: 10 small-k cases and 3 large-k bands; sweep: the rows x N x k grid")
    p.add_argument("--smallest", action="store_true", help="largest=False")
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--iters", type=int, default=100)
    p.add_argument("--out", default="topk_bench", help="directory for the CSV and the plot")
    p.add_argument("--dry-run", action="store_true", help="print the plan; no GPU needed")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.dry_run:
        return dry_run(records(args.dtypes, args.modes, args.cases), not args.smallest)
    why = device_gate()
    if why:
        print(f"topk_device_bench: no ROCm gfx950 GPU here ({why}); nothing timed (--dry-run prints the plan)")
        return 0
    return run(args)


if __name__ == "__main__":
    sys.exit(main())


# -- python -m torch_flydsl bench topk ----------------------------------------------------------


def _record_plan(rec: dict, args):
    config = plan_entry(rec, not args.smallest)["config"]
    return config if config.startswith("declined: ") else (config,)


def _label(r: dict) -> str:
    det = " det" if r.get("deterministic") in (True, "on") else ""
    return f"{r['dtype']} {r['rows']}x{r['N']} k{r['k']}{det}"


BENCH = Suite(
    op="topk",
    intree_op="topk",
    title="torch.topk (eager, last dim of a contiguous [rows, N] tensor, sorted; det: deterministic algorithms)",
    # A shapes file's record may leave deterministic out (timed with deterministic algorithms off).
    fields=(Field("dtype", str, "fp32", tuple(DTYPES)), Field("rows"), Field("N"), Field("k"),
            Field("deterministic", bool, False)),
    seed=lambda: records(),
    label=_label,
    plan=_record_plan,
    options=lambda argv: parse_args(argv),
    measure=lambda recs, args: measure(list(recs), args),
    aten=Baseline("aten", "ATen", "torch_ms"),
    columns=tuple(COLUMNS),
)
