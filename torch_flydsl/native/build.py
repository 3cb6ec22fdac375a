"""Build the native launcher against the torch this process runs (``torch.utils.cpp_extension``
JIT ``load``), once per (sources, torch, kernel versions): a build directory under the plugin's
cache names all three, so a changed source, another torch or a new kernel version builds anew
and an unchanged one only loads.

Nothing here runs at ``import torch``: building takes a C++ compiler and ninja (~a minute on
two cores); ``loader.load_built`` only loads what a build left. Without a compiler the pure
Python path stays, and ``why_not_buildable`` says so.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

#: The C++ sources, in ``csrc/`` (shipped in the package as ``torch_flydsl/native/csrc``).
SOURCES = ("code_object.cpp", "hip_api.cpp", "kernarg.cpp", "sha256.cpp", "units.cpp", "gemm_ops.cpp")
HEADERS = ("code_object.h", "hip_api.h", "kernarg.h", "sha256.h", "units.h")
#: The families whose ops the library serves, with the define that carries their kernel version.
SERVED_FAMILIES = (("dense_gemm", "TFN_DENSE_VERSION"), ("scaled_gemm", "TFN_SCALED_VERSION"),
                   ("grouped_gemm", "TFN_GROUPED_VERSION"))
#: The custom ops it registers for the ROCm device (CUDA dispatch key).
SERVED_OPS = ("dense_mm_out", "dense_addmm_out", "scaled_mm_out", "grouped_mm_out")
NAME = "torch_flydsl_native"


class BuildError(RuntimeError):
    """The library could not be built here; the message says why."""


def source_dir() -> Path:
    return Path(__file__).resolve().parent / "csrc"


def kernel_versions() -> dict:
    """``{family name: kernel version}`` of the served families (part of every unit id)."""
    from ..registry import families

    found = {f.name: f.kernel_version for f in families()}
    return {name: found.get(name, f"{name}-unknown") for name, _ in SERVED_FAMILIES}


@dataclass(frozen=True)
class Build:
    """One build: where it lives, and the flags that make it."""

    directory: Path
    versions: tuple  # ((define, kernel version), ...): the generated tfn_versions.h

    @property
    def library(self) -> Path:
        return self.directory / f"{self.directory.name}.so"


def build_key() -> str:
    import torch

    h = hashlib.sha256()
    for name in SOURCES + HEADERS:
        h.update(name.encode() + b"\0" + (source_dir() / name).read_bytes())
    h.update(torch.__version__.encode() + str(getattr(torch.version, "hip", None)).encode())
    h.update(repr(sorted(kernel_versions().items())).encode())
    return h.hexdigest()[:16]


def planned(root: Optional[Path] = None) -> Build:
    """The build this process would use (nothing is built): under ``root`` or the plugin's cache."""
    if root is None:
        from ..runtime.cache import plugin_cache_root, private_dir

        root = private_dir(plugin_cache_root() / "native")
    versions = kernel_versions()
    return Build(Path(root) / f"{NAME}_{build_key()}",
                 tuple((define, versions[name]) for name, define in SERVED_FAMILIES))


def why_not_buildable() -> Optional[str]:
    """Why the library cannot be built here (None: a compiler and ninja are present)."""
    from torch.utils.cpp_extension import is_ninja_available

    cxx = os.environ.get("CXX", "c++")
    if shutil.which(cxx) is None:
        return f"no C++ compiler ({cxx} not found; set CXX or install g++)"
    if not is_ninja_available():
        return "ninja is not installed (pip install ninja, or apt-get install ninja-build)"
    if not source_dir().is_dir():
        return f"the C++ sources are missing ({source_dir()})"
    return None


def build(root: Optional[Path] = None, verbose: bool = False) -> Path:
    """Build (or find built) the library; its path. ``BuildError`` says why not. Loads it into
    this process, as ``torch.utils.cpp_extension.load`` does."""
    why = why_not_buildable()
    if why:
        raise BuildError(why)
    from torch.utils.cpp_extension import load

    b = planned(root)
    b.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    header = "".join(f'#define {define} "{version}"\n' for define, version in b.versions)
    (b.directory / "tfn_versions.h").write_text("// written by torch_flydsl.native.build\n" + header)
    try:
        load(name=b.directory.name, sources=[str(source_dir() / s) for s in SOURCES], build_directory=str(b.directory),
             extra_cflags=["-O2"], extra_ldflags=["-ldl"],
             extra_include_paths=[str(b.directory)], is_python_module=False,
             verbose=verbose)
    except Exception as e:  # the compiler's own message, from cpp_extension
        raise BuildError(f"building the native launcher failed: {type(e).__name__}: {e}") from e
    from . import loader

    loader.mark_loaded(b.library)
    return b.library
