"""Compile a FlyDSL kernel for gfx950 without launching it, on any machine.

Works across the supported FlyDSL releases:
- 0.4+: ``flyc.compile(fn, *args)`` with placeholder (CPU) tensors returns a ``CompiledFunction``
  without launching; the artifact is its ``_keepalive``.
- 0.3.x: ``flyc.compile`` launches unless ``COMPILE_ONLY=1``; then it returns None and the
  artifact is ``fn._last_compiled[1]``.

FlyDSL reads its configuration from environment variables at compile time, so compiles are
serialised under one lock while we set ``ARCH``/``FLYDSL_GPU_ARCH``/``ROCM_PATH``.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Optional

from .artifact import KernelResources, parse_kernel_resources
from .probe import find_lld, flydsl_has_cpu_safe_compile, flydsl_info

_ENV_LOCK = threading.RLock()


class CompileError(RuntimeError):
    """A FlyDSL compile failed; the message says why (the caller drops just that config)."""


@dataclass
class CompiledKernel:
    """What one compile-only run produced."""

    arch: str
    source_ir: str  # traced module before the lowering pipeline
    ir: str  # final module: gpu.binary with kernel metadata, host launch code
    kernels: list[KernelResources]
    seconds: float
    artifact: Any = field(default=None, repr=False)  # flydsl's CompiledArtifact (private API)

    @property
    def spills(self) -> int:
        return sum(k.spills for k in self.kernels)

    @property
    def lds_bytes(self) -> int:
        return max((k.lds_bytes for k in self.kernels), default=0)


def _rocm_path_with_lld() -> Optional[str]:
    """A ROCM_PATH whose llvm/bin/ld.lld exists, making a private one around a system lld."""
    cur = os.environ.get("ROCM_PATH")
    if cur and (Path(cur) / "llvm" / "bin" / "ld.lld").exists():
        return cur
    lld = find_lld()
    if lld is None:
        return None
    if lld.parent.name == "bin" and lld.parent.parent.name == "llvm" and lld.name == "ld.lld":
        return str(lld.parent.parent.parent)
    from .cache import private_dir, plugin_cache_root

    fake = private_dir(plugin_cache_root() / "rocm_lld") / "llvm" / "bin"
    fake.mkdir(parents=True, exist_ok=True)
    link = fake / "ld.lld"
    if not link.exists() or link.resolve() != lld.resolve():  # absent, dangling or stale
        tmp = fake / f"ld.lld.{os.getpid()}"
        tmp.unlink(missing_ok=True)
        tmp.symlink_to(lld)
        os.replace(tmp, link)  # atomic: concurrent compiles never see a missing linker
    return str(fake.parent.parent)


@contextlib.contextmanager
def patched_env(values: dict[str, Optional[str]]) -> Iterator[None]:
    """Set (or, with None, unset) environment variables for the duration of the block."""
    saved = {k: os.environ.get(k) for k in values}
    try:
        for k, v in values.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@contextlib.contextmanager
def compile_only_env(arch: str = "gfx950") -> Iterator[None]:
    """Environment under which FlyDSL targets ``arch`` and cannot launch anything.

    FlyDSL's disk cache is off here: an artifact it loads from disk carries no traced source
    IR (the emulator needs it), and compile-only builds are checks, not a hot path.
    """
    rocm = _rocm_path_with_lld()
    if rocm is None:
        raise CompileError("no ld.lld found: install lld (e.g. apt-get install lld-19) or set ROCM_PATH")
    with _ENV_LOCK, patched_env(
        {
            "ARCH": arch,
            "FLYDSL_GPU_ARCH": arch,
            "ROCM_PATH": rocm,
            # 0.3.x only stops launching with this; 0.4+ ignores it for flyc.compile.
            "COMPILE_ONLY": "1",
            "FLYDSL_RUNTIME_ENABLE_CACHE": "0",
        }
    ):
        yield


_cache_warned: set = set()


def _usable_cache_dir() -> Optional[str]:
    """FlyDSL's disk cache dir if it is (or can be made) a writable directory, else None with
    one warning: compiling without the disk cache is slower, failing to compile is worse."""
    from .cache import flydsl_cache_dir

    try:
        path = flydsl_cache_dir()
        path.mkdir(parents=True, exist_ok=True)
        if not os.access(path, os.W_OK | os.X_OK):
            raise PermissionError(f"{path} is not writable")
        _refuse_unvouched(path)
        return str(path)
    except OSError as e:
        deploy = os.environ.get("TORCH_FLYDSL_CACHE_DIR")
        where = (f"{deploy}/flydsl (TORCH_FLYDSL_CACHE_DIR)" if deploy else
                 os.environ.get("FLYDSL_RUNTIME_CACHE_DIR") or "<inductor cache>/torch_flydsl/flydsl_cache")
        if where not in _cache_warned:
            _cache_warned.add(where)
            from .._log import log

            log.warning("FlyDSL's disk cache is off: its directory %s is unusable (%s: %s); kernels "
                        "compile in memory for this process only (its compile workers hand them over through a private "
                        "temporary directory)", where, type(e).__name__, e)
        return None


_handoff: Optional[str] = None


def _handoff_dir() -> str:
    """A directory private to this process for FlyDSL's disk cache when the configured one is
    unusable: compile workers hand binaries over through it (removed at exit)."""
    global _handoff
    if _handoff is None or not os.path.isdir(_handoff):
        import atexit
        import shutil
        import tempfile

        _handoff = tempfile.mkdtemp(prefix="torch_flydsl_kernels_")
        atexit.register(shutil.rmtree, _handoff, True)
    return _handoff


def device_cache_dir() -> str:
    """FlyDSL's disk cache for kernels this process compiles and loads: the configured one when
    usable, else a private per-process directory (see ``_usable_cache_dir``)."""
    return _usable_cache_dir() or _handoff_dir()


@dataclass(frozen=True)
class DeviceCompile:
    """What ``device_compile_env`` set up: where binaries go, and whether compiling is allowed."""

    arch: str
    cache_dir: str
    run_only: bool


def _refuse_unvouched(path: Path) -> None:
    """``PermissionError`` when FlyDSL must not load pickles from ``path``: someone other than
    this user or root could have written them, or (for the deployment cache) a binary is not the
    one its manifest lists. Checked at each first use of a kernel; hashes once per file version."""
    from .trust import refuse_untrusted, vouched_binaries_problem

    refuse_untrusted(path)
    deploy = os.environ.get("TORCH_FLYDSL_CACHE_DIR")
    if deploy and Path(deploy).expanduser().resolve() / "flydsl" == path.resolve():
        why = vouched_binaries_problem(Path(deploy).expanduser())
        if why:
            raise PermissionError(f"not trusted: {why}")


@contextlib.contextmanager
def device_compile_env(arch: str) -> Iterator[DeviceCompile]:
    """Environment for compiling (and launching) on a real GPU of ``arch``.

    The arch is pinned because FlyDSL's own detection falls back to gfx942 where
    ``rocm_agent_enumerator`` fails (seen in Inductor's worker processes); FlyDSL's disk cache
    goes to the user's ``FLYDSL_RUNTIME_CACHE_DIR`` or under Inductor's cache dir. When that
    directory cannot be used (with a warning), binaries live in a directory private to this
    process: compiles run in worker processes (``runtime.isolated``), and the disk cache is how
    their binaries reach this one.
    """
    from .. import config

    cache_dir = device_cache_dir()
    env = {"ARCH": arch, "FLYDSL_GPU_ARCH": arch, "COMPILE_ONLY": None, "FLYDSL_RUNTIME_CACHE_DIR": cache_dir,
           "FLYDSL_RUNTIME_ENABLE_CACHE": "1"}
    run_only = config.run_only()
    if run_only:
        # TORCH_FLYDSL_RUN_ONLY: FlyDSL traces, looks the binary up in its disk cache and raises
        # instead of lowering on a miss; the op then keeps PyTorch's path with that reason.
        env["FLYDSL_RUNTIME_RUN_ONLY"] = "1"
    with _ENV_LOCK, patched_env(env):
        yield DeviceCompile(arch, cache_dir, run_only)


def rocm_root_for(bitcode_root: Optional[str]) -> Optional[str]:
    """A ROCm root for compile-only builds whose device bitcode is ``bitcode_root``'s (a ROCm
    install, or a copy of its ``amdgcn/bitcode``) and whose ``llvm/bin/ld.lld`` links.

    FlyDSL keys its disk cache by the bitcode under the ROCm root (ROCDL links ocml/ockl from
    it), so binaries built here load on a machine only when both roots hold the same bitcode.
    None (no ``bitcode_root``): the plain compile-only root (no bitcode unless ROCM_PATH has it).
    """
    if bitcode_root is None:
        return _rocm_path_with_lld()
    root = Path(bitcode_root).expanduser().resolve()
    if not (root / "amdgcn" / "bitcode").is_dir():
        raise CompileError(f"{root} has no amdgcn/bitcode directory (point --rocm-path at the deployment's ROCm, "
                           "e.g. /opt/rocm, or a copy of its amdgcn/ tree)")
    if (root / "llvm" / "bin" / "ld.lld").exists():
        return str(root)
    lld_root = _rocm_path_with_lld()
    if lld_root is None:
        raise CompileError("no ld.lld found: install lld (e.g. apt-get install lld-19) or set ROCM_PATH")
    import hashlib

    from .cache import plugin_cache_root, private_dir

    combo = private_dir(plugin_cache_root() / "rocm_roots" / hashlib.sha256(str(root).encode()).hexdigest()[:16])
    for name, target in (("llvm", Path(lld_root) / "llvm"), ("amdgcn", root / "amdgcn")):
        link = combo / name
        if not link.exists() or link.resolve() != target.resolve():
            tmp = combo / f"{name}.{os.getpid()}"
            tmp.unlink(missing_ok=True)
            tmp.symlink_to(target)
            os.replace(tmp, link)
    return str(combo)


@contextlib.contextmanager
def cache_filling_env(cache_dir: str, arch: str = "gfx950", rocm_root: Optional[str] = None) -> Iterator[None]:
    """``compile_only_env`` with FlyDSL's disk cache on, at ``cache_dir``: what ``precompile``
    builds under (``rocm_root`` from ``rocm_root_for``)."""
    with compile_only_env(arch), patched_env({
        "FLYDSL_RUNTIME_ENABLE_CACHE": "1",
        "FLYDSL_RUNTIME_CACHE_DIR": cache_dir,
        "FLYDSL_RUNTIME_RUN_ONLY": None,
        **({"ROCM_PATH": rocm_root} if rocm_root else {}),
    }):
        yield


def toolchain_key() -> Optional[str]:
    """FlyDSL's toolchain fingerprint in the current environment (its sources, native
    libraries and the ROCm root's device bitcode), hashed: part of every disk-cache key it
    writes. None where this FlyDSL does not expose it (private API)."""
    try:
        from flydsl.compiler.jit_function import _flydsl_key
    except Exception:
        return None
    try:
        import hashlib

        return hashlib.sha256(_flydsl_key().encode()).hexdigest()
    except Exception:
        return None


def disk_cache_file(jit_fn, cache_dir: str) -> Optional[Path]:
    """The file FlyDSL's disk cache holds for ``jit_fn``'s last compile (None: unknown)."""
    try:
        from flydsl.compiler.jit_function import _disk_cache_key
    except Exception:
        return None
    last = getattr(jit_fn, "_last_compiled", None)
    func = getattr(jit_fn, "func", None)
    if not last or func is None:
        return None
    return Path(cache_dir) / func.__name__ / f"{_disk_cache_key(last[0])}.pkl"


def compile_gfx950(jit_fn, *args, arch: str = "gfx950", **kwargs) -> CompiledKernel:
    """Trace, lower and link ``jit_fn(*args)`` for ``arch``; never launches.

    ``args`` are what the launcher passes (CPU or meta torch tensors stand in for device ones).
    """
    info = flydsl_info()
    if not info.usable:
        raise CompileError(info.reason or "flydsl unusable")
    import flydsl.compiler as flyc

    t0 = time.perf_counter()
    with compile_only_env(arch):
        try:
            cf = flyc.compile(jit_fn, *args, **kwargs)
        except Exception as e:  # FlyDSL raises many types (DSLCompileError, ValueError, ...)
            raise CompileError(f"{type(e).__name__}: {e}") from e
        if flydsl_has_cpu_safe_compile() and cf is not None:
            artifact = cf._keepalive
        else:
            last = getattr(jit_fn, "_last_compiled", None)
            artifact = last[1] if last else None
    if artifact is None:
        raise CompileError("flydsl produced no compiled artifact")
    ir_text = str(artifact.ir)
    return CompiledKernel(
        arch=arch,
        source_ir=str(getattr(artifact, "source_ir", "")),
        ir=ir_text,
        kernels=parse_kernel_resources(ir_text),
        seconds=time.perf_counter() - t0,
        artifact=artifact,
    )
