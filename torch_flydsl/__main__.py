"""``python -m torch_flydsl {doctor,explain,demo,precompile,bench,native}``."""

from __future__ import annotations

import argparse
import sys

def _cmd_doctor(args) -> int:
    if args.json:
        import json

        from .doctor import as_json

        print(json.dumps(as_json(), indent=2))
        return 0
    from .doctor import report

    print(report())
    return 0


def _explanation(args):
    """``(explanation, its field values)`` for the parsed ``explain OP ...`` command line."""
    from .explain import explain_values, read_values

    given = {name: getattr(args, name) for name in args.fields}
    family, user, values = read_values(args.op, (), given)
    return explain_values(family, user, values, args.breadth), family, user, values


def _cmd_explain(args) -> int:
    import json

    from tabulate import tabulate

    from .explain import lds_bytes, workgroups

    ex, family, user, values = _explanation(args)
    if args.json:
        print(json.dumps(ex.to_json(), indent=2))
        return 0
    sizes = " ".join(f"{f.name.upper()}={values[f.name]}" for f in user.sizes)
    print(f"{ex.op} {sizes} {family.describe(user.name, values)}, as if on gfx950 (search space: {ex.breadth})")
    print(f"served by: {ex.serving.served_by} ({ex.serving.reason})")
    for name, value in ex.extra.items():  # a family's own answer fields (topk: algorithm, its reason, ties)
        print(f"{name.replace('_', ' ')}: {value}")
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


def _common_explain_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--breadth", choices=["baseline", "curated", "exhaustive"], default=None,
                   help="search space (default: from TORCH_FLYDSL_AUTOTUNE)")
    p.add_argument("--json", action="store_true",
                   help="one JSON object: served_by, reason, offered (config keys), declined ({config, category, reason})")
    p.set_defaults(fn=_cmd_explain)


def _add_field(p: argparse.ArgumentParser, f) -> None:
    """One field of a user op as a command-line option (its sizes are positional)."""
    flag = f.flag or "--" + f.name.replace("_", "-")
    if f.kind is bool:
        p.add_argument(flag, dest=f.name, action="store_false" if f.invert else "store_true", help=f.help or None)
        return
    choices = None
    if f.choices:
        choices = list(dict.fromkeys([*f.choices, *f.explain_only, *f.aliases]))
    p.add_argument(flag, dest=f.name, type=f.kind, choices=choices, required=f.required,
                   default=None if f.required else f.default, help=f.help or None)


def _add_explain(sub) -> None:
    from .registry import user_ops
    from .templates.vocabulary import EXPLAIN

    e = sub.add_parser("explain", help="which FlyDSL configs an op would get on gfx950, and why not others")
    ops = e.add_subparsers(dest="op", required=True, metavar="{" + ",".join(u.name for _, u in user_ops()) + "}")
    for _, user in user_ops():
        p = ops.add_parser(user.name, help=user.help)
        for f in user.sizes:
            p.add_argument(f.name, type=int, metavar=f.name.upper(), help=f.help or None)
        fields = [f for f in user.fields if EXPLAIN in f.formats]
        for f in fields:
            _add_field(p, f)
        p.set_defaults(fields=[f.name for f in user.sizes + tuple(fields)])
        _common_explain_args(p)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m torch_flydsl", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)
    doc = sub.add_parser("doctor", help="versions, hardware, linker, entry point, caches, families, the vLLM route")
    doc.add_argument("--json", action="store_true",
                     help="one JSON object: checks, families, serving (who serves each op), vllm")
    doc.set_defaults(fn=_cmd_doctor)
    _add_explain(sub)
    d = sub.add_parser("demo", help="compile a small model with FLYDSL candidates; on a CPU: compile-only + emulator")
    d.add_argument("--quick", action="store_true", help="smaller model (CI smoke test)")
    d.set_defaults(fn=_cmd_demo)
    from .deploy.precompile import add_parser as add_precompile

    add_precompile(sub)
    from .bench.cli import add_parser as add_bench

    add_bench(sub)
    from .native.cli import add_parser as add_native

    add_native(sub)
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
