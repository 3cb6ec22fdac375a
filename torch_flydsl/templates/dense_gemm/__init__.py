"""Dense GEMM family: ``out = alpha * (A @ B) + beta * bias`` in bf16/fp16 on gfx950.

Cheap to import: the FlyDSL kernel (``kernel.py``) and launcher import FlyDSL lazily.
"""

from .config import (
    BASELINE,
    CURATED,
    KERNEL_VERSION,
    DenseGemmConfig,
    config_fits,
    configs_for,
    search_space,
)
from .eligibility import check_problem
from .launcher import compile_args, flat_operand, grid_block, launch
from .problem import GemmProblem
from .reference import reference

__all__ = [
    "BASELINE",
    "CURATED",
    "KERNEL_VERSION",
    "DenseGemmConfig",
    "GemmProblem",
    "check_problem",
    "compile_args",
    "config_fits",
    "configs_for",
    "flat_operand",
    "grid_block",
    "launch",
    "reference",
    "search_space",
]
