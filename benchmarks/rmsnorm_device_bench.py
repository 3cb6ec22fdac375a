"""Eager RMSNorm on an MI350 (gfx950): FlyDSL vs PyTorch's own kernel, seed-like sweep.

Hidden sizes 4096/4097/8192/8193/16384/... (aligned and one-over, where PyTorch's vectorized
path stops applying) x row counts, bf16 and fp16, with weight. Each case: ``F.rms_norm`` with
the plugin (its ``_fused_rms_norm`` override) and inside ``torch_flydsl.disabled()`` (PyTorch's
kernel), outputs checked against each other and the float64 reference first, then timed with
CUDA events (L2/Infinity Cache flushed per call with ``--flush``). Prints a table, writes a CSV
and, with matplotlib, a plot of the speedups.

Without a ROCm gfx950 GPU it prints its plan (cases, the config each would get) and exits 0.

    python benchmarks/rmsnorm_device_bench.py [--dry-run] [--out DIR] [--flush] [--iters N]
"""

from __future__ import annotations

import argparse
import itertools
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402

from _device_bench_common import device_gate, geomean, matplotlib_pyplot, rel_error, table, time_ms, write_csv  # noqa: E402

HIDDEN = (2048, 4096, 4097, 5120, 8192, 8193, 16384, 16385, 32768)
ROWS = (1, 64, 1024, 8192, 32768)
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
SUITE = [(d, r, n) for d, r, n in itertools.product(DTYPES, ROWS, HIDDEN)]
COLUMNS = ["dtype", "rows", "n", "config", "flydsl_ms", "pytorch_ms", "speedup", "gbps_flydsl", "err_flydsl",
           "err_pytorch"]


def plan_row(dtype: str, rows: int, n: int) -> tuple:
    from torch_flydsl.templates.rmsnorm.family import explain_problem
    from torch_flydsl.templates.base import Decline
    from torch_flydsl.templates.rmsnorm import baseline_for

    p = explain_problem(rows, n, dtype, True)
    return (dtype, rows, n, str(p) if isinstance(p, Decline) else baseline_for(p).key())


def bench_case(dtype: str, rows: int, n: int, iters: int, flush) -> dict:
    import torch.nn.functional as F

    import torch_flydsl
    from torch_flydsl.templates.rmsnorm import reference

    dt = DTYPES[dtype]
    x = torch.randn(rows, n, device="cuda", dtype=dt)
    w = torch.randn(n, device="cuda", dtype=dt)
    ref = reference(x.cpu(), w.cpu(), 1e-6)[0]
    ours = F.rms_norm(x, (n,), w, 1e-6)
    with torch_flydsl.disabled():
        theirs = F.rms_norm(x, (n,), w, 1e-6)
    t_ours = time_ms(lambda: F.rms_norm(x, (n,), w, 1e-6), 10, iters, flush)

    def pytorch():
        with torch_flydsl.disabled():
            F.rms_norm(x, (n,), w, 1e-6)

    t_theirs = time_ms(pytorch, 10, iters, flush)
    moved = 2 * rows * n * x.element_size() + n * x.element_size() + rows * 4
    return {"dtype": dtype, "rows": rows, "n": n, "config": plan_row(dtype, rows, n)[3], "flydsl_ms": t_ours,
            "pytorch_ms": t_theirs, "speedup": t_theirs / t_ours, "gbps_flydsl": moved / (t_ours * 1e-3) / 1e9,
            "err_flydsl": rel_error(ours.cpu(), ref), "err_pytorch": rel_error(theirs.cpu(), ref)}


def plot(results: list, path: Path) -> bool:
    plt = matplotlib_pyplot()
    if plt is None or not results:
        return False
    fig, ax = plt.subplots(figsize=(10, 4))
    labels = [f"{r['dtype']} {r['rows']}x{r['n']}" for r in results]
    ax.bar(range(len(results)), [r["speedup"] for r in results])
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_xticks(range(len(results)), labels, rotation=90, fontsize=6)
    ax.set_ylabel("PyTorch time / FlyDSL time")
    fig.tight_layout()
    fig.savefig(path)
    return True


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dry-run", action="store_true", help="print the plan and exit")
    ap.add_argument("--out", type=Path, default=Path("rmsnorm_bench"))
    ap.add_argument("--iters", type=int, default=100)
    ap.add_argument("--flush", action="store_true", help="flush caches before each timed call")
    args = ap.parse_args(argv)
    print(f"plan: {len(SUITE)} cases (dtype x rows x hidden), F.rms_norm with weight, eps=1e-6")
    print(table([plan_row(*c) for c in SUITE], ["dtype", "rows", "n", "FlyDSL config (or decline)"]))
    why = None if args.dry_run else device_gate()
    if args.dry_run or why:
        print(f"not timing: {'--dry-run' if args.dry_run else why}")
        return 0
    from _device_bench_common import FLUSH_BYTES

    flush = torch.empty(FLUSH_BYTES, dtype=torch.uint8, device="cuda") if args.flush else None
    results = [bench_case(*c, args.iters, flush) for c in SUITE]
    print(table([[r[c] for c in COLUMNS] for r in results], COLUMNS))
    print(f"geomean speedup: {geomean(r['speedup'] for r in results):.3f}")
    args.out.mkdir(parents=True, exist_ok=True)
    write_csv(args.out / "rmsnorm.csv", results, COLUMNS)
    if plot(results, args.out / "rmsnorm_speedup.png"):
        print(f"plot: {args.out / 'rmsnorm_speedup.png'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
