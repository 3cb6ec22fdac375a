"""``python -m torch_flydsl native {build,status,export}``: the native launcher's commands."""

from __future__ import annotations

import sys


def _build(args) -> int:
    from . import build

    try:
        lib = build.build(verbose=args.verbose)
    except build.BuildError as e:
        print(f"native launcher not built: {e}; the Python path serves the GEMM ops", file=sys.stderr)
        return 1
    print(f"native launcher built: {lib}")
    return 0


def _status(args) -> int:
    from . import build, loader

    why = build.why_not_buildable()
    print(f"buildable here: {'yes' if why is None else 'no: ' + why}")
    loader.load_built()
    print(loader.status())
    return 0


def _export(args) -> int:
    from pathlib import Path

    from ..deploy.spec import SpecError, load
    from ..runtime.cache import deployment_dir
    from .export import export

    try:
        spec = load(args.spec, args.breadth)
    except SpecError as e:
        print(f"native export: {e}", file=sys.stderr)
        return 2
    cache_dir = Path(args.cache_dir).expanduser() if args.cache_dir else deployment_dir()
    done, failed = export(spec, cache_dir, progress=None if args.quiet else lambda uid: print(f"  {uid}"))
    for uid, why in failed:
        print(f"native export: {uid}: {why}", file=sys.stderr)
    print(f"native export: {len(done)} code object(s) in {cache_dir / 'native'}, {len(failed)} not exported")
    return 0 if done and not failed else 1


def add_parser(sub) -> None:
    p = sub.add_parser("native", help="the C++ launcher for the GEMM ops: build it, say its state, export code objects")
    cmds = p.add_subparsers(dest="native_command", required=True)
    b = cmds.add_parser("build", help="build it against this torch (C++ compiler and ninja; cached)")
    b.add_argument("--verbose", action="store_true", help="show the compiler's command lines")
    b.set_defaults(fn=_build)
    cmds.add_parser("status", help="built, loaded, HIP library, index").set_defaults(fn=_status)
    e = cmds.add_parser("export", help="write a spec's gfx950 code objects and native/index.tsv into a deployment cache")
    e.add_argument("--spec", required=True, help="a dispatch table or shapes file, as precompile takes")
    e.add_argument("--cache-dir", default=None, help="deployment cache (default: TORCH_FLYDSL_CACHE_DIR, else under "
                                                     "Inductor's cache dir)")
    e.add_argument("--breadth", choices=["baseline", "curated", "exhaustive"], default=None,
                   help="configs per shape of a shapes file (default: the file's own, else curated)")
    e.add_argument("--quiet", action="store_true", help="no per-unit lines")
    e.set_defaults(fn=_export)
