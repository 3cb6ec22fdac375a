"""MX scaled GEMM family: ``out = (A * 2^sa) @ (B * 2^sb) [+ bias]`` with MXFP8/MXFP4 operands
and E8M0 block scales (one per 32 K values) on gfx950's scaled MFMA.

Importing the package is nearly free (names resolve on first use, PEP 562), so a family
descriptor can live beside it and be read inside ``import torch``. The FlyDSL kernel
(``kernel.py``) and launcher import FlyDSL lazily.
"""

from .. import lazy_exports

# ``reference`` is both a submodule and the function it exports: importing it here (torch
# only) binds the package attribute to the function for good (see dense_gemm/__init__.py).
from .reference import dequantize, reference  # noqa: E402

_EXPORTS = {
    "BASELINE": "config",
    "CURATED": "config",
    "KERNEL_VERSION": "config",
    "ScaledGemmConfig": "config",
    "config_fits": "config",
    "configs_for": "config",
    "search_space": "config",
    "check_problem": "eligibility",
    "contiguous_metas": "eligibility",
    "run_emulated": "emulated",
    "compile_args": "launcher",
    "grid_block": "launcher",
    "launch": "launcher",
    "ScaledGemmProblem": "problem",
}

__all__ = sorted(_EXPORTS) + ["dequantize", "reference"]

__getattr__ = lazy_exports(__name__, _EXPORTS)
