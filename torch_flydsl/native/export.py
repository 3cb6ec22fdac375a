"""Write the native launcher's code objects and index into a deployment cache directory.

``DIR/native/index.tsv`` (read by ``csrc/units.cpp``)::

    # torch-flydsl native index v1
    <unit id>\\t<family>/<config key>\\t<file>\\t<size>\\t<kernel name>\\t<k=v,...>

One line per compiled unit, keyed by the id ``DIR/manifest.json`` lists the unit's FlyDSL
binary under (``KernelFamily.compiled_unit``); the file is that unit's gfx950 code object
(``<sha256>.hsaco``, content-addressed), cut out of FlyDSL's compiled module; ``k=v`` are the
config numbers the C++ launch needs (tile sizes, threads, split-K, persistent-grid limits).
Files are written owner-only (the C++ side refuses group/other-writable ones, as ``ssh`` does).
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Optional

HEADER = "# torch-flydsl native index v1"
DIRECTORY = "native"
INDEX = "index.tsv"


@dataclass
class NativeUnit:
    id: str
    family: str
    cfg_key: str
    kernel: str
    image: bytes = field(repr=False)
    params: dict = field(default_factory=dict)

    @property
    def file(self) -> str:
        return hashlib.sha256(self.image).hexdigest() + ".hsaco"

    def line(self) -> str:
        params = ",".join(f"{k}={int(v)}" for k, v in sorted(self.params.items()))
        return "\t".join((self.id, f"{self.family}/{self.cfg_key}", self.file, str(len(self.image)), self.kernel, params))


def launch_params(family_name: str, cfg) -> dict:
    """The config numbers ``csrc/gemm_ops.cpp`` reads for ``family_name``'s launch."""
    from ..templates.gemm.limits import LDS_LIMIT_BYTES, NUM_CUS

    common = {"block_m": cfg.block_m, "block_n": cfg.block_n, "block_k": cfg.block_k, "threads": cfg.threads}
    if family_name == "dense_gemm":
        from ..templates.dense_gemm.config import SPLIT_K_COUNTERS

        return {**common, "split_k": cfg.split_k, "stages": cfg.stages, "counters": SPLIT_K_COUNTERS,
                "num_cus": NUM_CUS}
    if family_name == "grouped_gemm":
        from ..templates.gemm.persistent import MAX_RESIDENT

        return {**common, "lds": cfg.lds_bytes, "max_resident": MAX_RESIDENT, "lds_limit": LDS_LIMIT_BYTES,
                "num_cus": NUM_CUS}
    if family_name == "scaled_gemm":
        return common
    raise ValueError(f"the native launcher does not serve the {family_name} family")


def final_module(jit_fn, args: tuple) -> str:
    """FlyDSL's compiled module (gpu.binary + host code) for ``jit_fn(*args)``, compile-only for
    gfx950, in a compile worker when the kernel has a recipe."""
    from ..runtime import isolated
    from ..runtime.compile import compile_gfx950

    staged = isolated.emulator_stage(jit_fn, tuple(args))
    if staged is not None and staged[1]:
        return staged[1]
    return compile_gfx950(jit_fn, *args).ir


def native_unit(family, unit_id: str, cfg, final_ir: str) -> NativeUnit:
    """The index entry for one compiled unit whose module text is ``final_ir``."""
    from ..runtime.artifact import parse_kernel_resources
    from .code_object import code_object

    kernels = parse_kernel_resources(final_ir)
    if len(kernels) != 1:
        raise ValueError(f"{unit_id}: {len(kernels)} kernels in one module; the native launcher launches one")
    return NativeUnit(unit_id, family.name, cfg.key(), kernels[0].name, code_object(final_ir),
                      launch_params(family.name, cfg))


def write(directory: Path, units: Iterable[NativeUnit]) -> Path:
    """Add ``units`` to ``directory``'s native index (replacing lines of the same ids); its path."""
    native = Path(directory) / DIRECTORY
    native.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(native, 0o700)
    index = native / INDEX
    lines = {}
    if index.is_file():
        for line in index.read_text().splitlines()[1:]:
            if line and not line.startswith("#"):
                lines[line.split("\t", 1)[0]] = line
    for u in units:
        target = native / u.file
        if not target.is_file() or target.read_bytes() != u.image:
            tmp = native / f".{u.file}.{os.getpid()}"
            tmp.write_bytes(u.image)
            os.chmod(tmp, 0o600)
            os.replace(tmp, target)
        lines[u.id] = u.line()
    tmp = native / f".{INDEX}.{os.getpid()}"
    tmp.write_text("\n".join([HEADER, *(lines[k] for k in sorted(lines))]) + "\n")
    os.chmod(tmp, 0o600)
    os.replace(tmp, index)
    return index


def export(spec, cache_dir: Path, progress: Optional[Callable[[str], None]] = None) -> tuple[list, list]:
    """Compile (compile-only, gfx950) every unit the spec needs that the native launcher serves
    and write its code object into ``cache_dir``'s native index: ``(written ids, [(id, why)])``."""
    from ..deploy.precompile import plan_units
    from ..registry import require_family

    units, _ = plan_units(spec)
    done, failed, entries = [], [], []
    for uid, unit in sorted(units.items()):
        family = require_family(unit.family)
        if family.name not in ("dense_gemm", "scaled_gemm", "grouped_gemm"):
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
