"""The native launcher's deployment files: ``DIR/native/index.tsv`` and the gfx950 code objects it
names, written by precompile (and ``python -m torch_flydsl native export``), read by
``csrc/units.cpp``::

    # torch-flydsl native index v1
    <unit id>\t<family>/<config key>\t<file>\t<size>\t<kernel name>\t<k=v,...>

One line per compiled unit, keyed by the id ``DIR/manifest.json`` lists the unit's FlyDSL
binary under (``KernelFamily.compiled_unit``); the file is that unit's gfx950 code object
(``<sha256>.hsaco``, content-addressed: the C++ side checks the hash before loading it), cut out
of FlyDSL's compiled module; ``k=v`` are the config numbers the C++ launch needs (tile sizes,
threads, split-K, persistent-grid limits). Files are never group- or other-writable (the C++
side refuses those, as ``ssh`` does).
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

HEADER = "# torch-flydsl native index v1"
#: The families whose kernels the native launcher serves (``build.SERVED_FAMILIES``).
SERVED = ("dense_gemm", "scaled_gemm", "grouped_gemm")
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


def native_unit(family, unit_id: str, cfg, final_ir: str) -> NativeUnit:
    """The index entry for one compiled unit whose module text is ``final_ir``."""
    from ..runtime.artifact import parse_kernel_resources
    from .code_object import code_object

    kernels = parse_kernel_resources(final_ir)
    if len(kernels) != 1:
        raise ValueError(f"{unit_id}: {len(kernels)} kernels in one module; the native launcher launches one")
    return NativeUnit(unit_id, family.name, cfg.key(), kernels[0].name, code_object(final_ir),
                      launch_params(family.name, cfg))


def index_lines(directory: Path) -> dict:
    """``{unit id: index line}`` of ``directory``'s native index (empty when there is none)."""
    index = Path(directory) / DIRECTORY / INDEX
    lines = {}
    if index.is_file():
        for line in index.read_text().splitlines()[1:]:
            if line and not line.startswith("#"):
                lines[line.split("\t", 1)[0]] = line
    return lines


def write(directory: Path, units: Iterable[NativeUnit], mode: int = 0o600) -> Path:
    """Add ``units`` to ``directory``'s native index (replacing lines of the same ids); its path.
    The index is rewritten under its lock, re-read first, so concurrent writers (precompile
    runs, ``native export``) keep each other's lines. ``mode``: the files' (never group- or
    other-writable: the C++ side refuses those)."""
    from ..deploy.files import update

    native = Path(directory) / DIRECTORY
    native.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(native, 0o700 | (0o050 if mode & 0o040 else 0))
    units = list(units)
    for u in units:
        target = native / u.file
        if not target.is_file() or target.read_bytes() != u.image:
            tmp = native / f".{u.file}.{os.getpid()}"
            tmp.write_bytes(u.image)
            os.chmod(tmp, mode)
            os.replace(tmp, target)

    def rewrite() -> str:
        lines = index_lines(directory)
        lines.update((u.id, u.line()) for u in units)
        return "\n".join([HEADER, *(lines[k] for k in sorted(lines))]) + "\n"

    return update(native / INDEX, rewrite, mode)


def from_compiled(family, unit_id: str, cfg, jit_fn) -> NativeUnit:
    """The native unit of a kernel this process just compiled for gfx950 (or found in FlyDSL's
    disk cache): its final module is the artifact FlyDSL keeps as ``jit_fn``'s last compile, so
    precompile exports code objects without compiling twice."""
    from .code_object import CodeObjectError

    last = getattr(jit_fn, "_last_compiled", None)
    text = getattr(last[1], "_ir_text", None) if last else None
    if not text:
        raise CodeObjectError(f"{unit_id}: FlyDSL kept no compiled module to cut the code object from")
    return native_unit(family, unit_id, cfg, text)


