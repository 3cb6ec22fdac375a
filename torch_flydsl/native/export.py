"""``python -m torch_flydsl native export``: compile a spec's GEMM kernels (compile-only, gfx950)
and write their code objects and ``native/index.tsv`` into a deployment cache (the index's
format: ``torch_flydsl.deploy.native_index``). ``precompile`` writes the same files as it
builds, without a second compile; this command serves a cache built with ``--no-native`` or by
an older plugin.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Optional

from ..deploy.native_index import (DIRECTORY, HEADER, INDEX, SERVED, NativeUnit, index_lines,  # noqa: F401
                                   launch_params, native_unit, write)


def final_module(jit_fn, args: tuple) -> str:
    """FlyDSL's compiled module (gpu.binary + host code) for ``jit_fn(*args)``, compile-only for
    gfx950, in a compile worker when the kernel has a recipe."""
    from ..runtime import isolated
    from ..runtime.compile import compile_gfx950

    staged = isolated.emulator_stage(jit_fn, tuple(args))
    if staged is not None and staged[1]:
        return staged[1]
    return compile_gfx950(jit_fn, *args).ir


def export(spec, cache_dir: Path, progress: Optional[Callable[[str], None]] = None) -> tuple[list, list]:
    """Compile (compile-only, gfx950) every unit the spec needs that the native launcher serves
    and write its code object into ``cache_dir``'s native index: ``(written ids, [(id, why)])``."""
    from ..deploy.precompile import plan_units
    from ..registry import require_family

    units, _ = plan_units(spec)
    done, failed, entries = [], [], []
    for uid, unit in sorted(units.items()):
        family = require_family(unit.family)
        if family.name not in SERVED:
            failed.append((uid, f"the native launcher does not serve {family.name}"))
            continue
        try:
            entries.append(unit_for(family, unit.cfg, unit.problem, unit.has_bias))
            done.append(uid)
        except Exception as e:  # a compile that failed: that unit stays on the Python path
            failed.append((uid, f"{type(e).__name__}: {e}"))
        if progress:
            progress(uid)
    write(cache_dir, entries)
    return done, failed


def unit_for(family, cfg, problem, has_bias: Optional[bool] = None) -> NativeUnit:
    """The native unit of ``family.compiled_unit(cfg, problem, has_bias)``, compiled (compile-only,
    gfx950) from the family's placeholder call: the kernel precompile builds for it."""
    uid = family.compiled_unit(cfg, problem, has_bias).id
    jit_fn, args = family.placeholder_call(cfg, problem, has_bias)
    return native_unit(family, uid, cfg, final_module(jit_fn, tuple(args)))
