"""Capture the IR stage the emulator executes, plus the host ABI of a FlyDSL jit function.

The emulator runs the module right after FlyDSL's ``convert-fly-to-rocdl`` + ``canonicalize``:
layouts are lowered to plain integer arithmetic, memory ops are ``llvm``/``rocdl`` ops, but
``scf`` control flow is still structured (so divergence can be handled with lane masks) and
the kernel is still a ``gpu.func`` next to the host ``func.func`` that computes the launch
grid. We get there by compiling once through ``flyc.compile`` (CPU-safe on flydsl >= 0.4:
nothing is launched) and replaying the prefix of the same pass pipeline on the traced IR.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass, field
from typing import List, Optional

from .errors import EmulatorError

#: The last pass we run: the canonicalize that follows this fragment.
_LOWERING_PASS = "convert-fly-to-rocdl"



@dataclass
class HostSlot:
    """One C-ABI slot of the host entry: which jit argument filled it and its raw bytes."""

    arg_index: int
    raw: bytes
    is_pointer: bool
    value: Optional[int]  # pointer value (address) for pointer slots


@dataclass
class CapturedKernel:
    """The lowered module text plus what is needed to bind arguments to its host function."""

    module_asm: str  # stage after convert-fly-to-rocdl + canonicalize, with locations
    host_func: str  # name of the host func.func
    slots: List[HostSlot] = field(default_factory=list)
    final_ir: Optional[str] = None  # fully compiled module (gpu.binary), for resources


def _pipeline_prefix(compile_hints: dict) -> List[str]:
    from flydsl.compiler.backends import get_backend

    frags = list(get_backend().pipeline_fragments(compile_hints=compile_hints))
    names = [f.strip().split("{")[0] for f in frags]
    if _LOWERING_PASS not in names:
        raise EmulatorError(f"flydsl pipeline has no {_LOWERING_PASS!r} pass; cannot pick the emulated stage: {names}")
    i = names.index(_LOWERING_PASS)
    prefix = frags[: i + 1]
    if i + 1 < len(frags) and names[i + 1] == "canonicalize":
        prefix.append(frags[i + 1])
    return prefix


_LOWERED: "dict[str, str]" = {}


def lower_source_ir(source_ir: str, compile_hints: Optional[dict] = None) -> str:
    """Run FlyDSL's pipeline on traced IR up to the stage the emulator executes (memoized)."""
    import hashlib

    key = hashlib.sha256((repr(sorted((compile_hints or {}).items())) + source_ir).encode()).hexdigest()
    hit = _LOWERED.get(key)
    if hit is not None:
        return hit
    asm = _lower(source_ir, compile_hints)
    if len(_LOWERED) > 32:
        _LOWERED.pop(next(iter(_LOWERED)))
    _LOWERED[key] = asm
    return asm


def _lower(source_ir: str, compile_hints: Optional[dict]) -> str:
    from flydsl._mlir import ir
    from flydsl._mlir.passmanager import PassManager
    from flydsl.compiler.jit_function import _create_mlir_context

    prefix = _pipeline_prefix(compile_hints or {})
    with _create_mlir_context() as _ctx, ir.Location.unknown():
        module = ir.Module.parse(source_ir)
        pm = PassManager.parse(f"builtin.module({','.join(prefix)})")
        pm.run(module.operation)
        return module.operation.get_asm(enable_debug_info=True)


def _host_slots(jf, args: tuple, kwargs: dict) -> List[HostSlot]:
    """Pack the jit arguments exactly as FlyDSL's host dispatch would, without launching."""
    from flydsl.compiler.jit_function import _build_call_spec

    jf._ensure_sig()
    bound = jf._sig.bind(*args, **kwargs)
    bound.apply_defaults()
    jf._resolve_arguments(bound.arguments)
    values = tuple(bound.arguments.values())
    spec = _build_call_spec(jf._sig, values)
    slots = []
    for arg_index, ctype, fill in spec:
        inst = ctype()
        if fill is not None:
            fill(values[arg_index], inst)
        is_ptr = ctype is ctypes.c_void_p
        slots.append(
            HostSlot(
                arg_index=arg_index,
                raw=bytes(inst) if not is_ptr else (inst.value or 0).to_bytes(8, "little"),
                is_pointer=is_ptr,
                value=(inst.value or 0) if is_ptr else None,
            )
        )
    return slots


def capture(jit_fn, *args, **kwargs) -> CapturedKernel:
    """Compile ``jit_fn(*args)`` for gfx950 (no launch) and return the emulated IR stage.

    A family's kernel (one with a recipe, see ``runtime.recipe``) compiles in a worker process
    (``runtime.isolated``): an LLVM abort there is a ``CompileError``, not this process's end.
    """
    from flydsl.compiler.jit_function import _unwrap_jit_function

    from ..runtime import isolated
    from ..runtime.compile import CompileError, compile_gfx950, compile_only_env

    jf, bound_self = _unwrap_jit_function(jit_fn)
    if jf is None:
        raise EmulatorError(f"expected a @flyc.jit function, got {type(jit_fn).__name__}")
    if bound_self is not None:
        args = (bound_self, *args)
    try:
        staged = None if kwargs or bound_self is not None else isolated.emulator_stage(jit_fn, args)
    except CompileError as e:
        raise EmulatorError(f"compiling for gfx950 failed: {e}") from e
    if staged is not None:
        asm, final_ir = staged
    else:
        try:
            artifact = compile_gfx950(jf, *args, **kwargs).artifact
        except CompileError as e:
            raise EmulatorError(f"compiling for gfx950 failed: {e}") from e
        if artifact is None or not getattr(artifact, "source_ir", None):
            raise EmulatorError("FlyDSL produced no traced source IR to emulate")
        with compile_only_env():  # the pass pipeline FlyDSL builds depends on the target arch
            asm = lower_source_ir(artifact.source_ir, jf._effective_compile_hints())
        final_ir = getattr(artifact, "_ir_text", None)
    return CapturedKernel(module_asm=asm, host_func=jf.func.__name__, slots=_host_slots(jf, args, kwargs),
                          final_ir=final_ir)
