"""``python -m torch_flydsl precompile --spec FILE [--cache-dir DIR] [--jobs N] [--rocm-path ROOT]``

Builds, compile-only (any machine: a CPU box included), every gfx950 kernel the spec needs into
a deployment cache directory that a process on an MI350 loads without compiling:

- ``DIR/flydsl/``: FlyDSL's disk cache (the binaries, under FlyDSL's own keys);
- ``DIR/manifest.json``: which kernels are there (``deploy.manifest``), read by run-only mode;
- ``DIR/dispatch_table.json``: the spec's table, merged, when the spec is a dispatch table.

A kernel is one binary per variant (dense: config, dtype, layout, bias, K tail; MX: config,
formats, output dtype, bias; grouped: config, dtype, B's major): shapes that share one are built
once. Ops: ``mm`` (and addmm), MX ``scaled_mm``/``scaled_mm_v2``, ``grouped_mm`` (MoE forward). A kernel the manifest already lists (binary present, same toolchain) is skipped, so
a second run compiles nothing. FlyDSL keys binaries by the ROCm device bitcode too: on a machine
without the deployment's ROCm, pass ``--rocm-path`` (its root, or a copy of its ``amdgcn/``).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from .spec import Spec


@dataclass
class Unit:
    id: str
    family: str  # the op the family is found by
    cfg: object
    problem: object
    has_bias: bool
    shapes: list = field(default_factory=list)
    status: str = "pending"  # compiled | cached | failed
    seconds: float = 0.0
    error: str = ""


def plan_units(spec: Spec) -> tuple[dict, list]:
    """``({unit id: Unit}, [(shape label, config or None, reason)])`` for the spec's work."""
    from ..registry import family_for

    units: dict = {}
    declined = []
    for w in spec.work:
        op = w.shape.aten_op
        impl = family_for(op).impl()
        for cfg, d in w.declined:
            declined.append((w.shape.label(), cfg, str(d)))
        for cfg in w.configs:
            uid = impl.variant_id(cfg, w.problem, w.shape.bias)
            unit = units.setdefault(uid, Unit(uid, op, cfg, w.problem, w.shape.bias))
            unit.shapes.append(w.shape.label())
    return units, declined


def _build(job: tuple) -> dict:
    """Compile one kernel into FlyDSL's disk cache (runs in a worker process with --jobs > 1)."""
    op, cfg_key, problem, has_bias, flydsl_dir, rocm_root = job
    from ..registry import family_for
    from ..runtime.compile import cache_filling_env, disk_cache_file, toolchain_key

    impl = family_for(op).impl()
    cfg = type(impl.curated()[0]).from_key(cfg_key)
    t0 = time.perf_counter()
    try:
        import flydsl.compiler as flyc

        jit_fn, args = impl.placeholder_call(cfg, problem, has_bias)
        with cache_filling_env(flydsl_dir, rocm_root=rocm_root):
            flyc.compile(jit_fn, *args)
            path = disk_cache_file(jit_fn, flydsl_dir)
            key = toolchain_key()
    except Exception as e:  # FlyDSL raises many types; the summary shows it
        return {"error": f"{type(e).__name__}: {e}", "seconds": time.perf_counter() - t0}
    if path is None or not path.is_file():
        return {"error": f"FlyDSL left no binary in {flydsl_dir} (its disk cache may be off)",
                "seconds": time.perf_counter() - t0}
    return {"file": str(path), "toolchain": key, "seconds": time.perf_counter() - t0}


def precompile(spec: Spec, cache_dir: Path, jobs: int = 1, rocm_path: Optional[str] = None,
               progress: bool = True) -> tuple[dict, list, Path]:
    """Build what ``spec`` needs into ``cache_dir``; ``(units, declined, manifest path)``."""
    from .. import _version
    from ..runtime.compile import CompileError, cache_filling_env, rocm_root_for, toolchain_key
    from ..runtime.probe import flydsl_info
    from . import manifest as mf

    info = flydsl_info()
    if not info.usable:
        raise CompileError(info.reason or "flydsl unusable")
    try:
        from flydsl.compiler.jit_function import _disk_cache_key  # noqa: F401
    except ImportError:
        raise CompileError(f"flydsl {info.version} does not expose its disk-cache keys "
                           "(flydsl.compiler.jit_function._disk_cache_key), so precompile cannot tell which binary "
                           "a kernel is; it needs flydsl 0.5 (the release it is tested with)") from None
    cache_dir = Path(cache_dir).expanduser().resolve()
    cache_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    flydsl_dir = cache_dir / "flydsl"
    flydsl_dir.mkdir(exist_ok=True, mode=0o700)
    rocm_root = rocm_root_for(rocm_path)
    with cache_filling_env(str(flydsl_dir), rocm_root=rocm_root):
        here = toolchain_key()
    man = mf.read(cache_dir)
    if man.toolchain and here and man.toolchain != here:
        man.kernels = {}  # built by another toolchain: FlyDSL would not load them; start over
    man.toolchain, man.flydsl, man.plugin = here, info.version, _version.__version__

    units, declined = plan_units(spec)
    todo = []
    for unit in units.values():
        if man.holds(unit.id):
            unit.status = "cached"
        else:
            todo.append(unit)
    jobs_args = [(u.family, u.cfg.key(), u.problem, u.has_bias, str(flydsl_dir), rocm_root) for u in todo]
    results = _run(jobs_args, jobs, progress)
    for unit, res in zip(todo, results):
        unit.seconds = res["seconds"]
        if "error" in res:
            unit.status, unit.error = "failed", res["error"]
            continue
        unit.status = "compiled"
        man.kernels[unit.id] = {"file": os.path.relpath(res["file"], cache_dir), "seconds": round(res["seconds"], 2),
                                "shapes": sorted(set(man.kernels.get(unit.id, {}).get("shapes", []) + unit.shapes))}
    for unit in units.values():
        if unit.status == "cached":
            entry = man.kernels[unit.id]
            entry["shapes"] = sorted(set(entry.get("shapes", []) + unit.shapes))
    path = man.save()
    if spec.table is not None and len(spec.table):
        from .. import dispatch_table as dt

        target = cache_dir / dt.FILE_NAME
        old = dt.load(target) if target.is_file() else dt.DispatchTable()
        old.merged(spec.table.entries).save(target)
    return units, declined, path


class _NoBar:
    def set_postfix_str(self, *a, **k) -> None:
        pass

    def update(self, *a, **k) -> None:
        pass

    def close(self) -> None:
        pass


def _run(jobs_args: list, jobs: int, progress: bool) -> list:
    if progress and jobs_args:
        from tqdm import tqdm

        bar = tqdm(total=len(jobs_args), desc="precompile", unit="kernel")
    else:
        bar = _NoBar()
    results: list = [None] * len(jobs_args)
    try:
        if jobs <= 1 or len(jobs_args) <= 1:
            for i, job in enumerate(jobs_args):
                bar.set_postfix_str(job[1], refresh=False)
                results[i] = _build(job)
                bar.update()
            return results
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor, as_completed

        # spawn: a forked child would inherit FlyDSL/MLIR state and the env lock mid-use.
        with ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
            futures = {pool.submit(_build, job): i for i, job in enumerate(jobs_args)}
            for fut in as_completed(futures):
                i = futures[fut]
                try:
                    results[i] = fut.result()
                except Exception as e:  # a worker that died (out of memory, ...)
                    results[i] = {"error": f"worker failed: {type(e).__name__}: {e}", "seconds": 0.0}
                bar.set_postfix_str(jobs_args[i][1], refresh=False)
                bar.update()
        return results
    finally:
        bar.close()


def summary(units: dict, declined: list, manifest_path: Path, seconds: float, verbose: bool = False) -> str:
    from tabulate import tabulate

    rows = []
    for u in sorted(units.values(), key=lambda u: u.id):
        rows.append((u.cfg.key(), "/".join(u.id.split("/")[2:]), len(u.shapes), u.status,
                     f"{u.seconds:.1f}" if u.status != "cached" else "-"))
    lines = [tabulate(rows, headers=["config", "kernel variant", "shapes", "status", "seconds"])]
    unfit = [(label, why) for label, cfg, why in declined if cfg is not None]
    for label, cfg, why in declined:
        if cfg is None:  # the whole shape: always said
            lines.append(f"not built: {label}: {why}")
    if unfit and verbose:
        lines.extend(f"not built: {label}: {why}" for label, why in unfit)
    elif unfit:
        lines.append(f"{len(unfit)} (shape, config) pair(s) of the spec's breadth do not fit and were not built "
                     "(--verbose lists them; `explain mm M N K` says why for one shape)")
    for u in units.values():
        if u.status == "failed":
            lines.append(f"failed: {u.cfg.key()} ({u.id}): {u.error}")
    count = {s: sum(u.status == s for u in units.values()) for s in ("compiled", "cached", "failed")}
    shapes = len({s for u in units.values() for s in u.shapes})
    lines.append(f"precompile: {len(units)} kernel(s) for {shapes} shape(s): {count['compiled']} compiled, "
                 f"{count['cached']} already in the cache, {count['failed']} failed, in {seconds:.1f} s -> "
                 f"{manifest_path.parent}")
    return "\n".join(lines)


def main(args) -> int:
    from ..runtime.compile import CompileError
    from .spec import SpecError, load

    try:
        spec = load(args.spec, args.breadth)
    except SpecError as e:
        print(f"precompile: {e}")
        return 2
    if args.cache_dir:
        cache_dir = Path(args.cache_dir)
    else:
        from ..runtime.cache import deployment_dir

        cache_dir = deployment_dir()
    t0 = time.perf_counter()
    try:
        units, declined, path = precompile(spec, cache_dir, args.jobs, args.rocm_path, progress=not args.quiet)
    except CompileError as e:
        print(f"precompile: {e}")
        return 2
    print(summary(units, declined, path, time.perf_counter() - t0, args.verbose))
    if not args.cache_dir and not os.environ.get("TORCH_FLYDSL_CACHE_DIR"):
        print(f"(a run on this machine reads it from there; elsewhere set TORCH_FLYDSL_CACHE_DIR={path.parent})")
    return 1 if any(u.status == "failed" for u in units.values()) else 0


def add_parser(sub) -> None:
    p = sub.add_parser("precompile", help="build gfx950 kernels for a spec ahead of time (compile-only, any machine)")
    p.add_argument("--spec", required=True, help="a dispatch table or a shapes file (see `record`)")
    p.add_argument("--cache-dir", default=None,
                   help="deployment cache to fill (default: TORCH_FLYDSL_CACHE_DIR, else under Inductor's cache dir)")
    p.add_argument("--jobs", type=int, default=1, help="parallel compile processes (default 1)")
    p.add_argument("--breadth", choices=["baseline", "curated", "exhaustive"], default=None,
                   help="configs per shape of a shapes file (default: the file's own, else curated)")
    p.add_argument("--rocm-path", default=None,
                   help="the deployment's ROCm root (or a copy of its amdgcn/ tree): FlyDSL keys binaries by its "
                        "device bitcode, so build with the same bitcode the MI350 machine has")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--verbose", action="store_true", help="list every (shape, config) pair that does not fit")
    p.set_defaults(fn=main)
