"""``python -m torch_flydsl {doctor,explain,demo}``."""

from __future__ import annotations

import argparse
import sys


def _cmd_doctor(args) -> int:
    from .doctor import report

    print(report())
    return 0


def _cmd_explain(args) -> int:
    import json

    from tabulate import tabulate

    from .explain import explain_mm

    ex = explain_mm(args.m, args.n, args.k, dtype=args.dtype, layout=args.layout, bias=args.bias, breadth=args.breadth)
    if args.json:
        print(json.dumps(ex.to_json(), indent=2))
        return 0
    print(f"{ex.op} M={args.m} N={args.n} K={args.k} dtype={args.dtype} layout={args.layout}, as if on gfx950 "
          f"(search space: {ex.breadth})")
    print(f"served by: {ex.serving.served_by} ({ex.serving.reason})")
    whole = [d for c, d in ex.declined if c is None]
    for d in whole:
        print(f"declined: {d}")
    if whole:
        return 0
    print(f"offered: {len(ex.offered)} config(s)")
    if ex.offered:
        print(tabulate([(c.key(), c.threads, c.lds_bytes) for c in ex.offered],
                       headers=["config", "threads", "LDS bytes"]))
    if ex.declined:
        print(f"declined: {len(ex.declined)} config(s)")
        print(tabulate([(c.key(), str(d)) for c, d in ex.declined], headers=["config", "reason"],
                       maxcolwidths=[None, 90]))
    return 0


def _cmd_demo(args) -> int:
    from .demo import run

    return run(quick=args.quick)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m torch_flydsl", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("doctor", help="versions, hardware, linker, entry point, caches").set_defaults(fn=_cmd_doctor)
    e = sub.add_parser("explain", help="which FlyDSL configs a GEMM would get on gfx950, and why not others")
    e.add_argument("op", choices=["mm"], help="operation (mm; --bias makes it addmm)")
    e.add_argument("m", type=int)
    e.add_argument("n", type=int)
    e.add_argument("k", type=int)
    e.add_argument("--dtype", default="bf16", choices=["bf16", "fp16", "fp32"])
    e.add_argument("--layout", default="nt", choices=["nn", "nt", "tn", "tt"],
                   help="n = row-major, t = column-major, for A then B (nt = x @ W.T)")
    e.add_argument("--bias", action="store_true", help="addmm with a per-column bias")
    e.add_argument("--breadth", choices=["baseline", "curated", "exhaustive"], default=None,
                   help="search space (default: from TORCH_FLYDSL_AUTOTUNE)")
    e.add_argument("--json", action="store_true",
                   help="one JSON object: served_by, reason, offered (config keys), declined ({config, category, reason})")
    e.set_defaults(fn=_cmd_explain)
    d = sub.add_parser("demo", help="compile a small model with FLYDSL candidates; on a CPU: compile-only + emulator")
    d.add_argument("--quick", action="store_true", help="smaller model (CI smoke test)")
    d.set_defaults(fn=_cmd_demo)
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
