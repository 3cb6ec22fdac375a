"""``python -m torch_flydsl {doctor,explain,demo,precompile,bench}``."""

from __future__ import annotations

import argparse
import sys

# Not an MX format: fp8 with float32 tensor- or row-wise scales. ``explain scaled_mm`` accepts
# it to say why the plugin leaves it to PyTorch.
NON_MX_FP8 = "fp8"


def _cmd_doctor(args) -> int:
    from .doctor import report

    print(report())
    return 0


def _explanation(args):
    from .explain import explain_grouped_mm, explain_mm, explain_scaled_mm

    if args.op == "mm":
        ex = explain_mm(args.m, args.n, args.k, dtype=args.dtype, layout=args.layout, bias=args.bias,
                        breadth=args.breadth)
        what = f"dtype={args.dtype} layout={args.layout}"
    elif args.op == "topk":
        from .explain import explain_topk

        ex = explain_topk(args.m, args.n, args.k, dtype=args.dtype, largest=not args.smallest,
                          sorted=not args.unsorted, breadth=args.breadth)
        what = (f"dtype={args.dtype} {'smallest' if args.smallest else 'largest'} "
                f"{'unsorted' if args.unsorted else 'sorted'} (last dim of a contiguous [ROWS, N] tensor)")
    elif args.op == "rms_norm":
        from .explain import explain_rms_norm

        ex = explain_rms_norm(args.m, args.n, dtype=args.dtype, weight=not args.no_weight, breadth=args.breadth)
        what = f"dtype={args.dtype}{'' if args.no_weight else ' with weight'} (last dim of a contiguous [ROWS, N] tensor)"
    elif args.op == "grouped_mm":
        ex = explain_grouped_mm(args.m, args.n, args.k, args.groups, dtype=args.dtype, b_major=args.b_major,
                                breadth=args.breadth)
        what = (f"groups={args.groups} dtype={args.dtype}: A [M,K] row-major x B [G,K,N] {args.b_major}-major per "
                "expert, int32 offs")
    else:
        ex = explain_scaled_mm(args.m, args.n, args.k, dtype=args.dtype, out_dtype=args.out_dtype, bias=args.bias,
                               v2=args.v2, breadth=args.breadth)
        what = f"dtype={args.dtype} out={args.out_dtype}{' bias' if args.bias else ''} layout=TN (unswizzled E8M0 scales)"
    return ex, what


def _cmd_explain(args) -> int:
    import json

    from tabulate import tabulate

    from .explain import lds_bytes, workgroups

    ex, what = _explanation(args)
    if args.json:
        print(json.dumps(ex.to_json(), indent=2))
        return 0
    if args.op == "rms_norm":
        sizes = f"ROWS={args.m} N={args.n}"
    else:
        sizes = f"ROWS={args.m} N={args.n} K={args.k}" if args.op == "topk" else f"M={args.m} N={args.n} K={args.k}"
    print(f"{ex.op} {sizes} {what}, as if on gfx950 (search space: {ex.breadth})")
    print(f"served by: {ex.serving.served_by} ({ex.serving.reason})")
    whole = [d for c, d in ex.declined if c is None]
    for d in whole:
        print(f"declined: {d}")
    if whole:
        return 0
    print(f"offered: {len(ex.offered)} config(s)")
    if ex.offered:
        rows = [(c.key(), c.threads, lds_bytes(ex.op, c, ex.problem), workgroups(ex.op, c, ex.problem))
                for c in ex.offered]
        print(tabulate(rows, headers=["config", "threads", "LDS bytes", "workgroups"], missingval="-"))
    if ex.declined:
        print(f"declined: {len(ex.declined)} config(s)")
        print(tabulate([(c.key(), str(d)) for c, d in ex.declined], headers=["config", "reason"],
                       maxcolwidths=[None, 90]))
    return 0


def _cmd_demo(args) -> int:
    from .demo import run

    return run(quick=args.quick)


def _problem_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("m", type=int)
    p.add_argument("n", type=int)
    p.add_argument("k", type=int)


def _common_explain_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--breadth", choices=["baseline", "curated", "exhaustive"], default=None,
                   help="search space (default: from TORCH_FLYDSL_AUTOTUNE)")
    p.add_argument("--json", action="store_true",
                   help="one JSON object: served_by, reason, offered (config keys), declined ({config, category, reason})")
    p.set_defaults(fn=_cmd_explain)


def _add_explain(sub) -> None:
    from .templates.scaled_gemm.family import DTYPES as MX_DTYPES

    e = sub.add_parser("explain", help="which FlyDSL configs a GEMM would get on gfx950, and why not others")
    ops = e.add_subparsers(dest="op", required=True, metavar="{mm,scaled_mm,grouped_mm,topk,rms_norm}")
    mm = ops.add_parser("mm", help="torch.mm / addmm (--bias): bf16/fp16 GEMM")
    _problem_args(mm)
    mm.add_argument("--dtype", default="bf16", choices=["bf16", "fp16", "fp32"])
    mm.add_argument("--layout", default="nt", choices=["nn", "nt", "tn", "tt"],
                    help="n = row-major, t = column-major, for A then B (nt = x @ W.T)")
    mm.add_argument("--bias", action="store_true", help="addmm with a per-column bias")
    _common_explain_args(mm)
    s = ops.add_parser("scaled_mm", help="MX torch._scaled_mm (--v2: F.scaled_mm), A [M,K] row-major, B [K,N] "
                                         "column-major, unswizzled E8M0 scales [rows,K/32] as PyTorch's op takes them")
    _problem_args(s)
    s.add_argument("--dtype", default="mxfp8", choices=[*MX_DTYPES, NON_MX_FP8],
                   help="mxfp8 (e4m3), mxfp8-e5m2, mxfp4 (e2m1), w4a8 (A e4m3 x B e2m1); "
                        "fp8: float32 tensor/row-wise scales (not MX: declined)")
    s.add_argument("--out-dtype", default="bf16", choices=["bf16", "fp16"])
    s.add_argument("--bias", action="store_true", help="a bias[N] of the output dtype")
    s.add_argument("--v2", action="store_true", help="F.scaled_mm / torch._scaled_mm_v2 instead of torch._scaled_mm")
    _common_explain_args(s)
    g = ops.add_parser("grouped_mm", help="torch._grouped_mm MoE forward: A [M,K] row-major (M: the tokens of all "
                                          "experts) x B [G,K,N], int32 offs [G] on the device, no bias")
    _problem_args(g)
    g.add_argument("--groups", type=int, required=True, help="G: experts (groups)")
    g.add_argument("--dtype", default="bf16", choices=["bf16", "fp16"])
    g.add_argument("--b-major", default="col", choices=["col", "row"],
                   help="each expert's [K,N] matrix: col = stored [G,N,K] (K contiguous, the usual weight layout), "
                        "row = N contiguous")
    _common_explain_args(g)
    t = ops.add_parser("topk", help="eager torch.topk along the last dim of a contiguous [ROWS, N] tensor, k values")
    t.add_argument("m", type=int, metavar="ROWS")
    t.add_argument("n", type=int, metavar="N")
    t.add_argument("k", type=int, metavar="K")
    t.add_argument("--dtype", default="fp32", choices=["fp32", "fp16", "bf16"])
    t.add_argument("--smallest", action="store_true", help="largest=False")
    t.add_argument("--unsorted", action="store_true", help="sorted=False")
    _common_explain_args(t)
    r = ops.add_parser("rms_norm", help="eager F.rms_norm over the last dim of a contiguous [ROWS, N] tensor")
    r.add_argument("m", type=int, metavar="ROWS")
    r.add_argument("n", type=int, metavar="N")
    r.add_argument("--dtype", default="bf16", choices=["bf16", "fp16", "fp32"])
    r.add_argument("--no-weight", action="store_true", help="weight=None")
    _common_explain_args(r)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m torch_flydsl", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("doctor", help="versions, hardware, linker, entry point, caches").set_defaults(fn=_cmd_doctor)
    _add_explain(sub)
    d = sub.add_parser("demo", help="compile a small model with FLYDSL candidates; on a CPU: compile-only + emulator")
    d.add_argument("--quick", action="store_true", help="smaller model (CI smoke test)")
    d.set_defaults(fn=_cmd_demo)
    from .deploy.precompile import add_parser as add_precompile

    add_precompile(sub)
    from .bench.cli import add_parser as add_bench

    add_bench(sub)
    return p


def _survive_a_broken_entry_point() -> None:
    """A stale editable install makes ``import torch`` fail before any command could say why:
    say it first, and let this process import torch without backend entry points."""
    import os

    from .entry_point import broken

    try:
        stale = broken()
    except Exception:  # a metadata oddity must not stop the CLI
        return
    for state in stale:
        print(f"torch_flydsl: torch.backends entry point {state.line()}", file=sys.stderr)
    if stale and "TORCH_DEVICE_BACKEND_AUTOLOAD" not in os.environ and "torch" not in sys.modules:
        os.environ["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"


def main(argv=None) -> int:
    _survive_a_broken_entry_point()  # building the parser imports torch already
    args = build_parser().parse_args(argv)
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
