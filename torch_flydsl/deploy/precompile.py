"""``python -m torch_flydsl precompile --spec FILE [--cache-dir DIR] [--jobs N] [--rocm-path ROOT]``

Builds, compile-only (any machine: a CPU box included), every gfx950 kernel the spec needs into
a deployment cache directory that a process on an MI350 loads without compiling:

- ``DIR/flydsl/``: FlyDSL's disk cache (the binaries, under FlyDSL's own keys);
- ``DIR/manifest.json``: which kernels are there (``deploy.manifest``), read by run-only mode;
- ``DIR/dispatch_table.json``: the spec's table, merged, when the spec is a dispatch table;
- ``DIR/native/``: each GEMM kernel's gfx950 code object and ``index.tsv``, for the C++ launcher
  (``torch_flydsl.native``; cut from the module FlyDSL just built, no second compile), named in
  the manifest's ``native`` fields. Then, where a C++ compiler and ninja are present, the
  launcher itself is built against this torch (a failed build is a warning, never a failed
  precompile). ``--no-native``: neither.

A kernel is one binary per variant (dense: config, dtype, layout, bias, K tail; MX: config,
formats, output dtype, bias; grouped: config, dtype, B's major): shapes that share one are built
once. Ops: ``mm`` (and addmm), MX ``scaled_mm``/``scaled_mm_v2``, ``grouped_mm`` (MoE forward).
A kernel the manifest already lists (binary intact: size and SHA-256 as recorded, same
toolchain) is skipped, so a second run compiles nothing; a damaged manifest, table or binary is
named in a warning and rebuilt. Each finished kernel is recorded in the manifest at once (under
its lock, merged with what concurrent runs wrote), so an interrupted run loses nothing it built.
FlyDSL keys binaries by the ROCm device bitcode too: on a machine without the deployment's ROCm,
pass ``--rocm-path`` (its root, or a copy of its ``amdgcn/``).

Exit status: 0 when every kernel the spec needs is in the cache; 1 when nothing could be built,
or a kernel failed or a table entry's config does not fit its shape (``--allow-partial``
accepts those two when something was built); 2 for a bad spec, an unusable cache directory or
FlyDSL unusable.
"""

from __future__ import annotations

import errno
import logging
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

from .cache_dir import Permissions
from .spec import Spec


@dataclass
class Unit:
    id: str
    family: str  # the op the family is found by
    cfg: object
    problem: object
    has_bias: Optional[bool]  # None: the problem says
    shapes: list = field(default_factory=list)
    status: str = "pending"  # compiled | cached | failed
    seconds: float = 0.0
    error: str = ""
    native: str = ""  # "" (not asked) | exported | cached | why it has no native code object
    native_only: bool = False  # in the cache already, built again (a disk-cache load) for its code object


def plan_units(spec: Spec) -> tuple[dict, list]:
    """``({unit id: Unit}, [(shape label, config or None, reason)])`` for the spec's work."""
    from ..registry import require_family

    units: dict = {}
    declined = []
    for w in spec.work:
        op = w.shape.aten_op
        family = require_family(op)
        for cfg, d in w.declined:
            declined.append((w.shape.label(), cfg, str(d)))
        for cfg in w.configs:
            has_bias = w.shape.get("bias")
            uid = family.compiled_unit(cfg, w.problem, has_bias).id
            unit = units.setdefault(uid, Unit(uid, op, cfg, w.problem, has_bias))
            unit.shapes.append(w.shape.label())
    return units, declined


class _Warnings(logging.Handler):
    """FlyDSL's log warnings during one build: it logs (and swallows) a failed disk-cache write."""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages: list = []

    def emit(self, record) -> None:
        self.messages.append(record.getMessage())


def _no_binary_reason(flydsl_dir: str, said: list) -> str:
    full = os.strerror(errno.ENOSPC)  # "No space left on device"
    for msg in said:
        if full in msg or "Errno 28" in msg:
            return f"no space left on device: FlyDSL could not write the binary into {flydsl_dir} ({msg})"
    if said:
        return f"FlyDSL left no binary in {flydsl_dir}: {said[-1]}"
    return f"FlyDSL left no binary in {flydsl_dir} (its disk cache may be off)"


def _build(job: tuple) -> dict:
    """Compile one kernel into FlyDSL's disk cache (runs in a compile worker process)."""
    op, cfg_key, problem, has_bias, flydsl_dir, rocm_root, native = job
    from ..registry import require_family

    family = require_family(op)
    cfg = family.config_from_key(cfg_key)
    t0 = time.perf_counter()
    said = _Warnings()
    flydsl_log = logging.getLogger("flydsl")
    flydsl_log.addHandler(said)
    try:
        from ..runtime import isolated
        from ..runtime.recipe import recipe_of

        jit_fn, args = family.placeholder_call(cfg, problem, has_bias)
        built = isolated.fill_disk_cache(recipe_of(jit_fn), tuple(args), flydsl_dir, "gfx950", rocm_root)
        path, key = (Path(built["file"]) if built["file"] else None), built["toolchain"]
    except Exception as e:  # FlyDSL raises many types; the summary shows it
        why = f"{type(e).__name__}: {e}"
        if isinstance(e, OSError) and e.errno == errno.ENOSPC:
            from .files import describe

            why = describe(e, flydsl_dir)
        return {"error": why, "seconds": time.perf_counter() - t0}
    finally:
        flydsl_log.removeHandler(said)
    if path is None or not path.is_file():
        return {"error": _no_binary_reason(flydsl_dir, said.messages), "seconds": time.perf_counter() - t0}
    done = {"file": str(path), "toolchain": key, "seconds": time.perf_counter() - t0}
    if native:
        done.update(_native_unit(family, cfg, problem, has_bias, jit_fn))
    return done


def _native_unit(family, cfg, problem, has_bias, jit_fn) -> dict:
    """``{"native": NativeUnit}`` for the kernel just built, or ``{"native_error": why}``."""
    from . import native_index as export

    if family.name not in export.SERVED:
        return {"native_error": f"the native launcher does not serve {family.name}"}
    try:
        return {"native": export.from_compiled(family, family.compiled_unit(cfg, problem, has_bias).id, cfg, jit_fn)}
    except Exception as e:  # the code object could not be cut out: that kernel stays on the Python path
        return {"native_error": f"{type(e).__name__}: {e}"}


def _warn(message: str) -> None:
    print(f"precompile: warning: {message}", file=sys.stderr, flush=True)


def _read_manifest(cache_dir: Path, warn: Callable[[str], None]):
    from . import manifest as mf

    try:
        return mf.read(cache_dir)
    except mf.ManifestError as e:
        warn(f"{e}; it is replaced, and every kernel of the spec is built again")
        return mf.Manifest(cache_dir)


def _discard(path: Path, why: str, warn: Callable[[str], None]) -> None:
    """Remove a binary that is not the one recorded before rebuilding it: FlyDSL would otherwise
    load it (unpickle it) instead of compiling."""
    warn(f"{why}; rebuilding it")
    try:
        path.unlink()
    except FileNotFoundError:
        pass


@dataclass
class _ManifestWriter:
    """Records kernels in the manifest as they finish: each save re-reads the file under its
    lock (``manifest.update``), so concurrent runs keep each other's kernels and a run that is
    killed keeps every kernel it finished."""

    cache_dir: Path
    perms: Permissions  # the manifest's mode, and with --shared the binaries' too
    shared: bool
    toolchain: Optional[str]
    flydsl: Optional[str]
    plugin: str

    def stamp(self, man) -> None:
        if man.toolchain and self.toolchain and man.toolchain != self.toolchain:
            man.kernels = {}  # built by another toolchain: FlyDSL would not load them; start over
        man.toolchain, man.flydsl, man.plugin = self.toolchain, self.flydsl, self.plugin

    def kernel_done(self, unit: Unit, res: dict) -> None:
        """``_build``'s result for ``unit``: recorded (status compiled) or failed with the reason."""
        from ..runtime.trust import sha256_of
        from . import manifest as mf
        from .files import describe

        unit.seconds = res["seconds"]
        if "error" in res:
            unit.status, unit.error = "failed", res["error"]
            return
        binary = Path(res["file"])
        try:
            if self.shared:
                from .cache_dir import chmod_owned

                chmod_owned(binary, self.perms)  # FlyDSL wrote it 0600
            entry = mf.KernelEntry(os.path.relpath(binary, self.cache_dir), binary.stat().st_size,
                                   sha256_of(binary), round(res["seconds"], 2), sorted(set(unit.shapes)),
                                   self.native_file(unit, res))

            def add(man) -> None:
                self.stamp(man)
                old = man.kernels.get(unit.id)
                if old is not None:
                    entry.shapes = sorted(set(old.shapes + entry.shapes))
                man.kernels[unit.id] = entry

            mf.update(self.cache_dir, add, self.perms.files)
        except OSError as e:
            unit.status, unit.error = "failed", f"built, but not recorded in the manifest: {describe(e)}"
            return
        unit.status = "cached" if unit.native_only else "compiled"

    def native_file(self, unit: Unit, res: dict):
        """Write the native code object ``res`` carries into ``native/``; its manifest record."""
        from . import native_index as export
        from . import manifest as mf

        if "native_error" in res:
            unit.native = res["native_error"]
        if "native" not in res:
            return None
        from .files import describe

        nu = res["native"]
        try:
            export.write(self.cache_dir, [nu], self.perms.files)
        except OSError as e:  # the FlyDSL binary is still recorded: the Python path serves it
            unit.native = f"not written: {describe(e)}"
            return None
        unit.native = "exported"
        return mf.NativeFile(f"{mf.NATIVE}/{nu.file}", len(nu.image), nu.file.removesuffix(".hsaco"))

    def add_shapes(self, cached: list) -> None:
        """Note the spec's shapes on kernels that were already there."""
        from . import manifest as mf

        def add(man) -> None:
            self.stamp(man)
            for u in cached:
                if u.id in man.kernels:
                    man.kernels[u.id].shapes = sorted(set(man.kernels[u.id].shapes + u.shapes))

        mf.update(self.cache_dir, add, self.perms.files)


def _to_build(units: dict, man, warn: Callable[[str], None], native: bool = False) -> list:
    """The units the cache lacks; marks the others cached. A listed binary that is damaged,
    replaced or untrusted is named, removed and rebuilt. ``native``: a unit the native launcher
    serves whose code object is missing or damaged is built again too (FlyDSL finds its binary
    in its disk cache, so that costs a load, not a compile)."""
    from .native_index import SERVED
    from ..registry import require_family

    todo = []
    for unit in units.values():
        why = man.why_not_held(unit.id) if unit.id in man.kernels else None
        if unit.id in man.kernels and why is None:
            if not native or require_family(unit.family).name not in SERVED or man.why_native_not_held(unit.id) is None:
                unit.status = "cached"
                unit.native = "cached" if native and man.kernels[unit.id].native is not None else ""
                continue
            unit.native_only = True
        if why:
            _discard(man.binary(unit.id), why, warn)
        todo.append(unit)
    return todo


def precompile(spec: Spec, cache_dir: Path, jobs: int = 1, rocm_path: Optional[str] = None,
               progress: bool = True, shared: bool = False,
               warn: Callable[[str], None] = _warn, native: bool = True) -> tuple[dict, list, Path]:
    """Build what ``spec`` needs into ``cache_dir``; ``(units, declined, manifest path)``.
    ``cache_dir.CacheDirError`` when the directory cannot be used; ``shared``: group-readable
    files (``cache_dir.SHARED``); ``native``: export the native launcher's code objects too."""
    from .. import _version
    from ..runtime.compile import CompileError, cache_filling_env, rocm_root_for, toolchain_key
    from ..runtime.probe import flydsl_info
    from . import cache_dir as cd
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
    perms = cd.SHARED if shared else cd.PRIVATE
    flydsl_dir = cd.prepare(cache_dir, perms)
    rocm_root = rocm_root_for(rocm_path)
    with cache_filling_env(str(flydsl_dir), rocm_root=rocm_root):
        here = toolchain_key()
    writer = _ManifestWriter(cache_dir, perms, shared, here, info.version, _version.__version__)
    man = _read_manifest(cache_dir, warn)
    writer.stamp(man)  # another toolchain's kernels count as absent

    units, declined = plan_units(spec)
    todo = _to_build(units, man, warn, native)
    jobs_args = [(u.family, u.cfg.key(), u.problem, u.has_bias, str(flydsl_dir), rocm_root, native) for u in todo]
    _run(jobs_args, jobs, progress, lambda i, res: writer.kernel_done(todo[i], res))
    cached = [u for u in units.values() if u.status == "cached"]
    if any(set(u.shapes) - set(man.kernels[u.id].shapes) for u in cached):
        writer.add_shapes(cached)
    if spec.table is not None and len(spec.table):
        from .. import dispatch_table as dt

        dt.merge_into(cache_dir / dt.FILE_NAME, spec.table.entries, perms.files,
                      on_unusable=lambda e: warn(f"{e}; it is replaced by the spec's entries"))
    if shared:
        cd.chmod_tree(cache_dir, perms)  # FlyDSL's files and dirs, the manifest, the table, the locks
    return units, declined, cache_dir / mf.FILE_NAME


class _NoBar:
    def set_postfix_str(self, *a, **k) -> None:
        pass

    def update(self, *a, **k) -> None:
        pass

    def close(self) -> None:
        pass


def _run(jobs_args: list, jobs: int, progress: bool, on_done: Optional[Callable[[int, dict], None]] = None) -> list:
    """Build every job in ``jobs`` worker processes (``runtime.workers``: one build that aborts,
    crashes or passes TORCH_FLYDSL_COMPILE_TIMEOUT fails that kernel alone, and the workers end
    with this process however it ends); ``on_done(i, result)`` as each one finishes, here."""
    from concurrent.futures import as_completed

    from .. import config
    from ..runtime.workers import Pool

    done = on_done or (lambda i, res: None)
    if progress and jobs_args:
        from tqdm import tqdm

        bar = tqdm(total=len(jobs_args), desc="precompile", unit="kernel")
    else:
        bar = _NoBar()
    results: list = [None] * len(jobs_args)
    pool = Pool(max(1, min(jobs, len(jobs_args))))
    try:
        futures = {pool.submit(f"{__name__}:_build", (job,), timeout=config.compile_timeout()): i
                   for i, job in enumerate(jobs_args)}
        for fut in as_completed(futures):
            i = futures[fut]
            outcome = fut.result()
            results[i] = outcome.value if outcome.ok else {"error": f"build failed: {outcome.error}",
                                                           "seconds": outcome.seconds}
            done(i, results[i])
            bar.set_postfix_str(jobs_args[i][1], refresh=False)
            bar.update()
        return results
    finally:
        bar.close()
        pool.shutdown()


def summary(units: dict, declined: list, manifest_path: Path, seconds: float, verbose: bool = False,
            table: bool = False, native_library: Optional[str] = None) -> str:
    """The results table and what was not built; ``table``: the spec is a dispatch table, whose
    every unfit entry is named with its config (a shapes spec's unfit pairs are counted);
    ``native_library``: what the native launcher's build said. The last line is the count."""
    from tabulate import tabulate

    rows = []
    for u in sorted(units.values(), key=lambda u: u.id):
        rows.append((u.cfg.key(), "/".join(u.id.split("/")[2:]), len(u.shapes), u.status,
                     f"{u.seconds:.1f}" if u.status != "cached" else "-"))
    lines = [tabulate(rows, headers=["config", "kernel variant", "shapes", "status", "seconds"])]
    unfit = [(label, cfg, why) for label, cfg, why in declined if cfg is not None]
    for label, cfg, why in declined:
        if cfg is None:  # the whole shape: always said
            lines.append(f"not built: {label}: {why}")
    if unfit and (verbose or table):
        lines.extend(f"not built: {label}: {why if cfg.key() in str(why) else f'config {cfg.key()}: {why}'}"
                     for label, cfg, why in unfit)
    elif unfit:
        lines.append(f"{len(unfit)} (shape, config) pair(s) of the spec's breadth do not fit and were not built "
                     "(--verbose lists them; `explain mm M N K` says why for one shape)")
    for u in units.values():
        if u.status == "failed":
            lines.append(f"failed: {u.cfg.key()} ({u.id}): {u.error}")
    lines.extend(_native_lines(units, manifest_path.parent))
    if native_library:
        lines.append(native_library)
    count = {s: sum(u.status == s for u in units.values()) for s in ("compiled", "cached", "failed")}
    shapes = len({s for u in units.values() for s in u.shapes})
    lines.append(f"precompile: {len(units)} kernel(s) for {shapes} shape(s): {count['compiled']} compiled, "
                 f"{count['cached']} already in the cache, {count['failed']} failed, in {seconds:.1f} s -> "
                 f"{manifest_path.parent}")
    return "\n".join(lines)


def _native_lines(units: dict, cache_dir: Path) -> list:
    """What the native launcher got: code objects written or already there, and why not for the others."""
    asked = [u for u in units.values() if u.native]
    if not asked:
        return []
    have = sum(u.native in ("exported", "cached") for u in asked)
    lines = [f"native: {have} of {len(units)} kernel(s) have a code object for the C++ launcher in "
             f"{cache_dir / 'native'}"]
    lines.extend(f"native: no code object for {u.id}: {u.native}" for u in asked
                 if u.native not in ("exported", "cached") and u.status != "failed")
    return lines


def build_native_library(units: dict, warn: Callable[[str], None] = _warn, progress: bool = False) -> Optional[str]:
    """Build the native launcher against this torch when the cache now holds code objects for it:
    ``python -m torch_flydsl native build`` in a child process (the library is the native layer's;
    a C++ compiler and ninja are needed, ~a minute on two cores, cached per source and torch).
    The line to print, or None with why in a warning: never an error, since the Python path
    serves the GEMM ops without it. ``TORCH_FLYDSL_NATIVE=0`` (the launcher is off): no build,
    and a line that says so (a choice, not a warning)."""
    import subprocess

    if not any(u.native in ("exported", "cached") for u in units.values()):
        return None
    if os.environ.get("TORCH_FLYDSL_NATIVE", "").strip().lower() in ("0", "off", "false", "no"):
        return "native launcher not built: TORCH_FLYDSL_NATIVE=0 (the launcher is off, by choice)"
    if progress:
        print("precompile: building the native launcher (python -m torch_flydsl native build; cached after the "
              "first time) ...", file=sys.stderr, flush=True)
    try:
        done = subprocess.run([sys.executable, "-m", "torch_flydsl", "native", "build"], capture_output=True,
                              text=True, timeout=1800)
    except (OSError, subprocess.TimeoutExpired) as e:
        why = f"{type(e).__name__}: {e}"
    else:
        if done.returncode == 0:
            return done.stdout.strip().splitlines()[-1] if done.stdout.strip() else "native launcher built"
        said = (done.stderr.strip() or done.stdout.strip()).splitlines()
        ours = [line for line in said if line.startswith("native launcher not built")]
        why = (ours or said or [f"native launcher not built: native build exited with status {done.returncode}"])[-1]
    warn(f"{why} (python -m torch_flydsl native build retries)")
    return None


def exit_status(spec: Spec, units: dict, declined: list, allow_partial: bool) -> tuple[int, str]:
    """``(status, why)``: 1 when nothing is in the cache for the spec, or (unless
    ``allow_partial``) a kernel failed or a table entry's config does not fit."""
    if not any(u.status in ("compiled", "cached") for u in units.values()):
        return 1, f"nothing was built for {spec.path}: every kernel it needs failed or does not fit (see above)"
    failed = sum(u.status == "failed" for u in units.values())
    unfit = sum(cfg is not None for _, cfg, _ in declined) if spec.table is not None else 0
    if (failed or unfit) and not allow_partial:
        what = ", ".join(x for x in (f"{failed} kernel(s) failed" if failed else "",
                                     f"{unfit} table {'entry names' if unfit == 1 else 'entries name'} a config that does not fit" if unfit else "") if x)
        return 1, f"{what} (--allow-partial accepts a partial cache)"
    return 0, ""


def main(args) -> int:
    from ..runtime.compile import CompileError
    from .cache_dir import CacheDirError
    from .files import describe
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
        units, declined, path = precompile(spec, cache_dir, args.jobs, args.rocm_path, progress=not args.quiet,
                                           shared=args.shared, native=not args.no_native)
    except (CompileError, CacheDirError) as e:
        print(f"precompile: {e}")
        return 2
    except OSError as e:  # a write of ours (the manifest, the table) on a disk that filled meanwhile
        print(f"precompile: cannot write the cache: {describe(e)}")
        return 2
    built = None if args.no_native else build_native_library(units, progress=not args.quiet)
    print(summary(units, declined, path, time.perf_counter() - t0, args.verbose, spec.table is not None, built))
    if not args.cache_dir and not os.environ.get("TORCH_FLYDSL_CACHE_DIR"):
        print(f"(a run on this machine reads it from there; elsewhere set TORCH_FLYDSL_CACHE_DIR={path.parent})")
    status, why = exit_status(spec, units, declined, args.allow_partial)
    if why:
        print(f"precompile: {why}")
    return status


def add_parser(sub) -> None:
    p = sub.add_parser("precompile", help="build gfx950 kernels for a spec ahead of time (compile-only, any machine)")
    p.add_argument("--spec", required=True,
                   help="a dispatch table, or a shapes file (torch_flydsl.deploy.record.record_shapes() or "
                        "TORCH_FLYDSL_RECORD_SHAPES=FILE writes one)")
    p.add_argument("--cache-dir", default=None,
                   help="deployment cache to fill (default: TORCH_FLYDSL_CACHE_DIR, else under Inductor's cache dir)")
    p.add_argument("--jobs", type=int, default=1, help="parallel compile processes (default 1)")
    p.add_argument("--breadth", choices=["baseline", "curated", "exhaustive"], default=None,
                   help="configs per shape of a shapes file (default: the file's own, else curated)")
    p.add_argument("--rocm-path", default=None,
                   help="the deployment's ROCm root (or a copy of its amdgcn/ tree): FlyDSL keys binaries by its "
                        "device bitcode, so build with the same bitcode the MI350 machine has")
    p.add_argument("--shared", action="store_true",
                   help="group-readable cache (directories 0750, files 0640) for a serving user other than the "
                        "builder (default: 0700/0600, this user only)")
    p.add_argument("--allow-partial", action="store_true",
                   help="exit 0 even when some kernels failed or table entries do not fit (something must be built)")
    p.add_argument("--no-native", action="store_true",
                   help="no code objects for the C++ launcher (native/), and no build of it")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--verbose", action="store_true", help="list every (shape, config) pair that does not fit")
    p.set_defaults(fn=main)
