"""Torch 2.15's in-tree (vendored) FlyDSL GEMM kernels, loaded by path for a side-by-side ISA report.

Nothing of torch's code is copied: the kernel files, the heuristics that pick their configs and
the calling convention stay in the wheel the user points at. This module finds them, imports
them under their own module names (a ``sys.modules`` entry for
``torch._inductor.kernel.vendored_templates.flydsl.kernels``, which the heuristics import
lazily) and builds the arguments that the wheel's jinja templates (``flydsl_mm.py.jinja``,
``flydsl_grouped_mm.py.jinja``) pass to ``flyc.compile``:

* dense: ``gemm_gfx950(out, mat1, mat2, param, stream)``, every tensor through
  ``flyc.from_torch_tensor(t).mark_layout_dynamic()``; ``param`` from
  ``make_gemm_param_and_validate(M, N, K, {...})`` with ``has_k_tail`` from ``infer_has_k_tail``.
* MX: ``gemm_mxfp_gfx950(out, mat1, mat2, scale_a, scale_b, bias_or_out, param, stream)`` on
  uint8 views, the logical K (twice the storage K for MXFP4), TN operands (A row-major, B
  column-major, scales ``[rows, K/32]``).
* grouped: ``launch_gemm_gfx950_grouped(out, mat1, mat2, offs, Int32(G), Int32(N), Int32(K),
  grid_size, param, stream)`` with B ``[G, K, N]`` row-major (the only layout in-tree serves)
  and ``grid_size`` 1 as in the template's compile-only branch (the kernel reads gridDim).

Configs per shape are what the wheel's heuristics (``torch/_inductor/heuristics/template/flydsl.py``)
return, with its autotuning switch on or off (``config.flydsl_enable_autotuning``; the search
space ``DEFAULT``), filtered by its own per-shape validity checks.

The grouped kernel links ROCm's ``ockl.bc``/``ocml.bc``; ``bitcode_dir`` looks for them in a
Triton wheel's ``triton/backends/amd/lib`` (any venv next to this checkout) or ``$ROCM_PATH``.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import sys
import types
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

KERNELS_MODULE = "torch._inductor.kernel.vendored_templates.flydsl.kernels"
KERNELS_SUBDIR = Path("_inductor/kernel/vendored_templates/flydsl/kernels")
HEURISTICS_SUBPATH = Path("_inductor/heuristics/template/flydsl.py")
HEURISTICS_MODULE = "torch_flydsl_bench_intree_heuristics"  # a private name: torch's own is left alone
DEFAULT_PATH = Path(__file__).resolve().parents[1] / ".venv-torch2.15/lib/python3.11/site-packages/torch"
MXFP_DTYPE = {"mxfp8": "GEMM_DTYPE_MXFP8", "mxfp4": "GEMM_DTYPE_MXFP4"}


class IntreeError(RuntimeError):
    """The in-tree kernels cannot be used from the given path; the message says why."""


def _torch_dir(path: Path, extract_root: Path) -> Path:
    """The ``torch`` package directory that holds the vendored kernels, for a wheel file, an
    unzipped tree (holding ``torch/``) or a ``torch`` directory itself."""
    if path.is_file():
        if path.suffix != ".whl":
            raise IntreeError(f"{path} is a file but not a wheel (.whl)")
        digest = hashlib.sha256(str(path.resolve()).encode() + str(path.stat().st_mtime_ns).encode()).hexdigest()[:16]
        dest = extract_root / f"wheel_{digest}"
        if not (dest / "torch" / KERNELS_SUBDIR).is_dir():
            try:
                with zipfile.ZipFile(path) as zf:
                    wanted = [n for n in zf.namelist()
                              if n.startswith(("torch/_inductor/kernel/vendored_templates/flydsl/",
                                               "torch/_inductor/heuristics/template/flydsl.py"))]
                    if not wanted:
                        raise IntreeError(f"{path} holds no torch/{KERNELS_SUBDIR} (not a torch 2.15 wheel?)")
                    zf.extractall(dest, members=wanted)
            except zipfile.BadZipFile as e:
                raise IntreeError(f"{path} is not a readable wheel: {e}") from e
        path = dest
    if not path.is_dir():
        raise IntreeError(f"{path} does not exist (pass a torch 2.15 wheel, an unzipped wheel or a site-packages "
                          "torch directory)")
    for cand in (path, path / "torch"):
        if (cand / KERNELS_SUBDIR / "gemm_gfx950.py").is_file():
            if not (cand / HEURISTICS_SUBPATH).is_file():
                raise IntreeError(f"{cand} has the vendored kernels but no {HEURISTICS_SUBPATH}")
            return cand
    raise IntreeError(f"{path} holds no {KERNELS_SUBDIR}/gemm_gfx950.py (torch 2.15's vendored FlyDSL kernels): "
                      "pass a torch 2.15 wheel, an unzipped wheel or a site-packages torch directory")


@dataclass
class Intree:
    """The loaded in-tree kernels package and heuristics module, and where they came from."""

    torch_dir: Path
    kernels: types.ModuleType
    heuristics: types.ModuleType

    def module(self, name: str) -> types.ModuleType:
        return importlib.import_module(f"{KERNELS_MODULE}.{name}")

    @property
    def source_hash(self) -> str:
        """A hash of the kernel and heuristics files (the ISA cache's key)."""
        h = hashlib.sha256()
        for f in sorted((self.torch_dir / KERNELS_SUBDIR).glob("*.py")) + [self.torch_dir / HEURISTICS_SUBPATH]:
            h.update(f.name.encode() + f.read_bytes())
        return h.hexdigest()[:16]

    # -- the heuristics ------------------------------------------------------------------------

    def _with_switch(self, autotune: bool):
        """The heuristics read ``config.flydsl_enable_autotuning`` and
        ``config.max_autotune_gemm_search_space`` (torch 2.15's Inductor config); this torch may
        not have the first, so the module's ``config`` is pointed at a namespace holding both."""
        self.heuristics.config = types.SimpleNamespace(flydsl_enable_autotuning=autotune,
                                                       max_autotune_gemm_search_space="DEFAULT")
        return self.heuristics

    def gemm_configs(self, m: int, n: int, k: int, autotune: bool, mxfp: Optional[str] = None) -> list[dict]:
        """The configs in-tree offers for a dense (``mxfp`` None) or MX ``m x n x k`` GEMM (TN:
        A row-major, B column-major; ``k`` logical), as ``get_flydsl_mm_template_kwargs`` filters them."""
        h = self._with_switch(autotune)
        dtype_id = getattr(self.kernels, MXFP_DTYPE[mxfp]) if mxfp else self.kernels.GEMM_DTYPE_BF16
        validity = {"out_dtype_id": self.kernels.GEMM_DTYPE_BF16, "has_bias": False} if mxfp else {}
        return [c for c in h.get_gemm_configs(m, n, k, mxfp)
                if h.is_gemm_config_valid_for_shape(m, n, k, dtype_id, c, a_is_transposed=False,
                                                    b_is_transposed=True, **validity)]

    def grouped_configs(self, tokens: int, n: int, k: int, autotune: bool) -> list[dict]:
        """The configs in-tree offers for a bf16 grouped MoE forward (A ``[tokens, K]``, B
        ``[G, K, N]``), as ``get_flydsl_grouped_mm_template_kwargs`` filters them."""
        h = self._with_switch(autotune)
        return [c for c in h.get_grouped_gemm_configs()
                if h.is_grouped_gemm_config_valid_for_shape(tokens, n, k, self.kernels.GEMM_DTYPE_BF16, c)]

    def has_k_tail(self, cfg: dict, k: int) -> bool:
        return bool(self.kernels.infer_has_k_tail(k, cfg["TILE_K"], cfg["STAGES"], cfg["USE_HALF_TILE_INTERLEAVED"]))

    def param(self, cfg: dict, m: int, n: int, k: int, *, mxfp: Optional[str] = None, b_is_transposed: bool = True,
              has_k_tail: bool = False):
        """``make_gemm_param_and_validate`` as the templates call it (IntreeError when it refuses)."""
        kn = self.kernels
        kwargs: dict[str, Any] = {
            "dtype_id": getattr(kn, MXFP_DTYPE[mxfp]) if mxfp else kn.GEMM_DTYPE_BF16,
            "tile_m": cfg["TILE_M"], "tile_n": cfg["TILE_N"], "tile_k": cfg["TILE_K"], "stages": cfg["STAGES"],
            "m_waves": cfg["M_WAVES"], "n_waves": cfg["N_WAVES"], "group_m": cfg["GROUP_M"],
            "use_half_tile_interleaved": cfg["USE_HALF_TILE_INTERLEAVED"], "a_is_transposed": False,
            "b_is_transposed": b_is_transposed, "has_bias": False, "has_k_tail": has_k_tail,
        }
        if mxfp:
            kwargs["out_dtype_id"] = kn.GEMM_DTYPE_BF16
        p = kn.make_gemm_param_and_validate(m, n, k, kwargs)
        if p is None:
            raise IntreeError(f"in-tree make_gemm_param_and_validate refuses {config_key(cfg)} at {m}x{n}x{k}")
        return p

    # -- what the templates pass to flyc.compile --------------------------------------------------

    def dense_compile_args(self, cfg: dict, has_k_tail: bool = False):
        import torch

        m = n = 512
        k = compile_k(cfg)
        a, out = torch.empty(m, k, dtype=torch.bfloat16), torch.empty(m, n, dtype=torch.bfloat16)
        b = torch.empty(n, k, dtype=torch.bfloat16).t()  # W[N, K].t(): column-major [K, N]
        return self.module("gemm_gfx950").gemm_gfx950, (*_dynamic(out, a, b), self.param(cfg, m, n, k,
                                                                                           has_k_tail=has_k_tail))

    def mxfp_compile_args(self, cfg: dict, mxfp: str, has_k_tail: bool = False):
        import torch

        m = n = 512
        k = compile_k(cfg)
        ks = k // 2 if mxfp == "mxfp4" else k  # storage bytes per row
        a = torch.empty(m, ks, dtype=torch.uint8)
        b = torch.empty(n, ks, dtype=torch.uint8).t()
        sa, sb = torch.empty(m, k // 32, dtype=torch.uint8), torch.empty(n, k // 32, dtype=torch.uint8)
        out = torch.empty(m, n, dtype=torch.bfloat16)
        p = self.param(cfg, m, n, k, mxfp=mxfp, has_k_tail=has_k_tail)
        return self.module("gemm_gfx950").gemm_mxfp_gfx950, (*_dynamic(out, a, b, sa, sb, out), p)

    def grouped_compile_args(self, cfg: dict, has_k_tail: bool = False):
        import flydsl.expr as fx
        import torch

        tokens, groups, n = 512, 8, 512
        k = compile_k(cfg)
        a, out = torch.empty(tokens, k, dtype=torch.bfloat16), torch.empty(tokens, n, dtype=torch.bfloat16)
        b = torch.empty(groups, k, n, dtype=torch.bfloat16)
        offs = torch.arange(1, groups + 1, dtype=torch.int32) * (tokens // groups)
        p = self.param(cfg, tokens, n, k, b_is_transposed=False, has_k_tail=has_k_tail)
        return self.module("grouped_gemm_gfx950").launch_gemm_gfx950_grouped, (
            *_dynamic(out, a, b, offs), fx.Int32(groups), fx.Int32(n), fx.Int32(k), 1, p)

    def persistent_grid(self, cfg: dict, tokens: int, n: int, groups: int, k: int, cus: int, lds_per_cu: int,
                        threads_per_cu: int) -> int:
        """The persistent grid in-tree's template launches (its own ``get_grouped_gemm_persistent_grid_size``
        on a device described by ``cus``, LDS and threads per CU)."""
        props = types.SimpleNamespace(multi_processor_count=cus, shared_memory_per_multiprocessor=lds_per_cu,
                                      max_threads_per_multi_processor=threads_per_cu)
        p = self.param(cfg, tokens, n, k, b_is_transposed=False)
        return int(self.kernels.get_grouped_gemm_persistent_grid_size(p, tokens, n, groups, props))


def compile_k(cfg: dict) -> int:
    """K for the compile: an even number of K tiles, at least 8 and at least 2 x stages (no K tail
    for any config; sizes are runtime values, so the loop is every such shape's)."""
    return cfg["TILE_K"] * max(8, 2 * cfg["STAGES"])


def _dynamic(*tensors):
    import flydsl.compiler as flyc

    return tuple(flyc.from_torch_tensor(t).mark_layout_dynamic() for t in tensors)


def config_key(cfg: dict) -> str:
    """A compact name for an in-tree config: ``it_m256n256k64_w2x4_s2_g0_hti``."""
    return (f"it_m{cfg['TILE_M']}n{cfg['TILE_N']}k{cfg['TILE_K']}_w{cfg['M_WAVES']}x{cfg['N_WAVES']}"
            f"_s{cfg['STAGES']}_g{cfg['GROUP_M']}" + ("_hti" if cfg["USE_HALF_TILE_INTERLEAVED"] else ""))


def _ensure_parents() -> None:
    """Parent packages of the kernels' module name: this torch's own where it has them, else
    empty namespace stand-ins (names only: nothing is executed from them)."""
    parts = KERNELS_MODULE.split(".")
    for i in range(1, len(parts)):
        name = ".".join(parts[:i])
        if name in sys.modules:
            continue
        try:
            importlib.import_module(name)
        except ImportError:
            stub = types.ModuleType(name)
            stub.__path__ = []
            sys.modules[name] = stub


def load(path: Optional[Path] = None, extract_root: Optional[Path] = None) -> Intree:
    """Import the in-tree kernels package and heuristics from ``path`` (a torch 2.15 wheel, an
    unzipped wheel or a site-packages ``torch`` directory; default ``DEFAULT_PATH``)."""
    import tempfile

    torch_dir = _torch_dir(Path(path or DEFAULT_PATH).expanduser(),
                           Path(extract_root or Path(tempfile.gettempdir()) / "torch_flydsl_intree"))
    kdir = torch_dir / KERNELS_SUBDIR
    existing = sys.modules.get(KERNELS_MODULE)
    if existing is not None:
        if Path(getattr(existing, "__file__", "")).resolve() != (kdir / "__init__.py").resolve():
            raise IntreeError(f"{KERNELS_MODULE} is already imported from {getattr(existing, '__file__', '?')} in "
                              f"this process; run the report in a fresh process to use {kdir}")
        kernels = existing
    else:
        _ensure_parents()
        spec = importlib.util.spec_from_file_location(KERNELS_MODULE, kdir / "__init__.py",
                                                      submodule_search_locations=[str(kdir)])
        if spec is None or spec.loader is None:
            raise IntreeError(f"cannot import {kdir}")
        kernels = importlib.util.module_from_spec(spec)
        sys.modules[KERNELS_MODULE] = kernels
        try:
            spec.loader.exec_module(kernels)
        except Exception as e:
            del sys.modules[KERNELS_MODULE]
            raise IntreeError(f"importing {kdir} failed: {type(e).__name__}: {e}") from e
    hspec = importlib.util.spec_from_file_location(HEURISTICS_MODULE, torch_dir / HEURISTICS_SUBPATH)
    if hspec is None or hspec.loader is None:
        raise IntreeError(f"cannot import {torch_dir / HEURISTICS_SUBPATH}")
    heuristics = importlib.util.module_from_spec(hspec)
    try:
        hspec.loader.exec_module(heuristics)
    except Exception as e:
        raise IntreeError(f"importing {torch_dir / HEURISTICS_SUBPATH} failed: {type(e).__name__}: {e}") from e
    return Intree(torch_dir, kernels, heuristics)


def bitcode_dir(search_root: Optional[Path] = None, explicit: Optional[Path] = None) -> Optional[Path]:
    """A directory holding ``ockl.bc`` and ``ocml.bc`` (ROCm device bitcode the grouped kernel
    links): ``explicit`` when given, else ``$ROCM_PATH/amdgcn/bitcode``, else a Triton wheel's
    ``triton/backends/amd/lib`` in a venv under ``search_root`` (default: this checkout). None
    when there is none."""
    import os

    if explicit is not None:
        return explicit if (explicit / "ockl.bc").is_file() and (explicit / "ocml.bc").is_file() else None
    cands = []
    if os.environ.get("ROCM_PATH"):
        cands.append(Path(os.environ["ROCM_PATH"]) / "amdgcn" / "bitcode")
    root = Path(search_root or Path(__file__).resolve().parents[1])
    cands += sorted(root.glob(".venv*/lib/python3*/site-packages/triton/backends/amd/lib"))
    for c in cands:
        if (c / "ockl.bc").is_file() and (c / "ocml.bc").is_file():
            return c
    return None


def rocm_bitcode_root(bitcode: Path, root: Path) -> Path:
    """A private ROCm root under ``root`` whose ``amdgcn/bitcode`` links to ``bitcode``'s files
    (``runtime.compile.rocm_root_for`` then adds the linker)."""
    dest = root / ("rocm_" + hashlib.sha256(str(bitcode.resolve()).encode()).hexdigest()[:12])
    bc = dest / "amdgcn" / "bitcode"
    bc.mkdir(parents=True, exist_ok=True)
    for f in bitcode.glob("*.bc"):
        link = bc / f.name
        if not link.exists():
            link.symlink_to(f.resolve())
    return dest
