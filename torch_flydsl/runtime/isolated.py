"""Every FlyDSL compile the plugin starts runs in a worker process (``runtime.workers``).

Two kinds of job, both for a jit function that carries a ``Recipe``:

- ``device``: compile for the GPU's arch into FlyDSL's disk cache (the directory the caller's
  own compile then reads). The caller's ``flyc.compile`` traces (Python and MLIR builders),
  finds the binary under FlyDSL's own key and loads it: LLVM's code generation, where fatal
  errors abort, never runs in the user's process.
- ``emulator``: compile for gfx950 (the whole pipeline, as the device would) and lower the
  traced IR to the stage the emulator executes; the caller gets that text.

A worker that crashes, aborts or runs past ``TORCH_FLYDSL_COMPILE_TIMEOUT`` makes the job a
``CompileError`` naming the kernel, the signal and the worker's last output: that config is
declined (autotuning drops it; an eager or vLLM call keeps PyTorch's path), the process lives.

Jobs are remembered per (recipe, argument signature, target), so a config compiles once per
process, and ``prefetch`` lets Inductor start one autotuning round's candidates together:
they compile in parallel while the first is benchmarked, as Inductor's async compile does for
Triton.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import Future
from typing import Optional

from .. import config
from . import workers
from .recipe import CannotTravel, materialize, placeholders, recipe_of

JOB_MODULE = __name__
_ENV_NAMES = ("ARCH", "FLYDSL_GPU_ARCH", "COMPILE_ONLY", "ROCM_PATH", "HIP_PATH", "PATH")  # PATH: ld.lld
_ENV_PREFIXES = ("FLYDSL_", "LLVM_", "MLIR_")
_MEMO_LIMIT = 256

_jobs: dict = {}  # job key -> Future[Outcome]
_lock = threading.Lock()


def _job_env() -> dict:
    """The parent's compile-relevant variables as they are now (the worker may be older)."""
    names = set(_ENV_NAMES) | {k for k in os.environ if k.startswith(_ENV_PREFIXES)}
    return {k: os.environ.get(k) for k in sorted(names)}


def signature(args: tuple) -> tuple:
    """What FlyDSL's trace reads of the arguments: a tensor's dtype, rank and unit-stride dims,
    any other value's type (sizes, strides and pointers are runtime values of every kernel)."""
    import torch

    sig: list[tuple[str, str, int, tuple[bool, ...]] | str] = []
    for a in args:
        if isinstance(a, torch.Tensor):
            sig.append(("tensor", str(a.dtype), a.dim(), tuple(s == 1 for s in a.stride())))
        else:
            sig.append(type(a).__name__)
    return tuple(sig)


def _name(jit_fn) -> str:
    recipe = recipe_of(jit_fn)
    spec = getattr(recipe, "spec", None)
    return getattr(spec, "name", None) or getattr(getattr(jit_fn, "func", None), "__name__", None) or "kernel"


def _submit(key, job: str, job_args) -> Future:
    """The job for ``key``, found or started; ``job_args()`` builds its arguments only when it
    must be started (a kernel asked for again costs one dict probe)."""
    with _lock:
        fut = _jobs.get(key)
        if fut is not None:
            return fut
        if len(_jobs) >= _MEMO_LIMIT:
            for old in [k for k, f in _jobs.items() if f.done()][: _MEMO_LIMIT // 4]:
                del _jobs[old]
        fut = workers.shared().submit(f"{JOB_MODULE}:{job}", job_args(), _job_env(), config.compile_timeout())
        _jobs[key] = fut
        return fut


def _result(fut: Future, jit_fn):
    """The job's value; or the error the compile raised, as the caller would have met it
    compiling in its own process (its type when it is a builtin exception or a ``CompileError``,
    the same message); a worker that died is a ``CompileError`` saying how."""
    from .compile import CompileError

    outcome = fut.result()
    if outcome.ok:
        return outcome.value
    # Remembered like a success: a kernel whose compile aborts would abort again, and a warm
    # graph must not restart a worker on every call before falling back.
    if outcome.raised is None:
        raise CompileError(f"compiling {_name(jit_fn)} in a worker process failed: {outcome.error}")
    module, name, message = outcome.raised
    if module == CompileError.__module__ and name == CompileError.__qualname__:
        raise CompileError(message)
    builtin = getattr(__import__("builtins"), name, None) if module == "builtins" else None
    if isinstance(builtin, type) and issubclass(builtin, Exception):
        raise builtin(message)
    raise CompileError(outcome.error)


def _job(jit_fn, args: tuple, job: str, target: tuple) -> Optional[Future]:
    """The job ``job(recipe, placeholders, *target)`` for ``jit_fn(*args)``, started or found;
    None when ``jit_fn`` cannot be rebuilt elsewhere (no recipe, or an argument that cannot travel)."""
    recipe = recipe_of(jit_fn)
    if recipe is None:
        return None
    try:
        return _submit((job, recipe, signature(args)) + target, job, lambda: (recipe, placeholders(args)) + target)
    except CannotTravel:
        return None


def _device_job(jit_fn, args: tuple, cache_dir: str, arch: str) -> Optional[Future]:
    return _job(jit_fn, args, "fill_disk_cache", (cache_dir, arch, None))


def build_for_device(jit_fn, args: tuple, cache_dir: str, arch: str) -> bool:
    """Compile ``jit_fn(*args)`` for ``arch`` into ``cache_dir`` (FlyDSL's disk cache) in a
    worker. False: it has no recipe, so the caller compiles it itself. Raises ``CompileError``."""
    job = _device_job(jit_fn, args, cache_dir, arch)
    if job is None:
        return False
    _result(job, jit_fn)
    return True


def emulator_stage(jit_fn, args: tuple) -> Optional[tuple]:
    """``(emulated module text, final IR text)`` for ``jit_fn(*args)`` from a worker, or None
    when it has no recipe (the caller compiles it itself). Raises ``CompileError``."""
    job = _emulator_job(jit_fn, args)
    return None if job is None else _result(job, jit_fn)


def _emulator_job(jit_fn, args: tuple) -> Optional[Future]:
    return _job(jit_fn, args, "emulated_module", ())


def prefetch(jit_fn, args: tuple) -> None:
    """Start compiling ``jit_fn(*args)`` for this process's executor without waiting (one
    autotuning round's candidates compile side by side); failures surface at first use."""
    executor = config.executor()
    if executor == "emulator":
        _emulator_job(jit_fn, args)
    elif executor == "device" and not config.run_only():
        from .compile import device_cache_dir

        _device_job(jit_fn, args, device_cache_dir(), os.environ.get("FLYDSL_GPU_ARCH") or "gfx950")


def forget() -> None:
    """Drop every remembered job (tests; a toolchain change in a long-lived process)."""
    with _lock:
        _jobs.clear()


# -- in the worker -------------------------------------------------------------------------


def warm_up() -> str:
    """Worker job: import what every compile needs (torch, FlyDSL); its version."""
    import flydsl
    import torch  # noqa: F401

    return getattr(flydsl, "__version__", "?")


def fill_disk_cache(recipe, args: tuple, cache_dir: str, arch: str, rocm_root: Optional[str]) -> dict:
    """Worker job: compile into FlyDSL's disk cache at ``cache_dir``; the file and the toolchain key."""
    import flydsl.compiler as flyc

    from .compile import cache_filling_env, disk_cache_file, toolchain_key

    jit_fn = recipe.build()
    # FlyDSL writes its disk cache only when it lowers; a kernel this worker already holds in
    # memory (an earlier job for another directory or the emulator) would leave none here.
    memory = getattr(jit_fn, "_mem_cache", None)
    if isinstance(memory, dict):
        memory.clear()
    with cache_filling_env(cache_dir, arch, rocm_root=rocm_root):
        flyc.compile(jit_fn, *materialize(args))
        path = disk_cache_file(jit_fn, cache_dir)
        key = toolchain_key()
    return {"file": None if path is None else str(path), "toolchain": key}


def emulated_module(recipe, args: tuple) -> tuple:
    """Worker job: the emulated IR stage and the final IR of ``recipe``'s kernel."""
    from ..emulator.capture import lower_source_ir
    from .compile import compile_gfx950, compile_only_env

    jit_fn = recipe.build()
    artifact = compile_gfx950(jit_fn, *materialize(args)).artifact
    source_ir = getattr(artifact, "source_ir", None)
    if not source_ir:
        raise RuntimeError("FlyDSL produced no traced source IR to emulate")
    with compile_only_env():  # the pass pipeline FlyDSL builds depends on the target arch
        asm = lower_source_ir(source_ir, jit_fn._effective_compile_hints())
    return asm, getattr(artifact, "_ir_text", None)
