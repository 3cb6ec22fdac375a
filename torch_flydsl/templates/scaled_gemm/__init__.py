"""MX scaled GEMM family: ``out = (A * 2^sa) @ (B * 2^sb) [+ bias]`` with MXFP8/MXFP4 operands
and E8M0 block scales (one per 32 K values) on gfx950's scaled MFMA.

Cheap to import: the FlyDSL kernel (``kernel.py``) and launcher import FlyDSL lazily.
"""

from .config import (
    BASELINE,
    CURATED,
    KERNEL_VERSION,
    ScaledGemmConfig,
    config_fits,
    configs_for,
    search_space,
)
from .eligibility import check_problem
from .emulated import run_emulated
from .launcher import compile_args, grid_block, launch
from .problem import ScaledGemmProblem
from .reference import dequantize, reference

__all__ = [
    "BASELINE",
    "CURATED",
    "KERNEL_VERSION",
    "ScaledGemmConfig",
    "ScaledGemmProblem",
    "check_problem",
    "compile_args",
    "config_fits",
    "configs_for",
    "dequantize",
    "grid_block",
    "launch",
    "reference",
    "run_emulated",
    "search_space",
]
