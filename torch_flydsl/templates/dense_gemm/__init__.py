"""Dense GEMM family: ``out = alpha * (A @ B) + beta * bias`` in bf16/fp16 on gfx950.

Importing the package is nearly free (names resolve on first use, PEP 562): the entry point
reads the family descriptor (``family.FAMILY``) inside ``import torch``. The FlyDSL kernel
(``kernel.py``) and launcher import FlyDSL lazily.
"""

from .. import lazy_exports

# ``reference`` is both a submodule and the function it exports: once the submodule is imported
# anywhere, Python binds the package attribute to the module and __getattr__ is never asked.
# Importing it here (torch and typing only) makes the attribute the function, for good.
from .reference import reference  # noqa: E402

_EXPORTS = {
    "BASELINE": "config",
    "CURATED": "config",
    "KERNEL_VERSION": "config",
    "DenseGemmConfig": "config",
    "config_fits": "config",
    "configs_for": "config",
    "search_space": "config",
    "check_problem": "eligibility",
    "compile_args": "launcher",
    "flat_operand": "launcher",
    "grid_block": "launcher",
    "launch": "launcher",
    "GemmProblem": "problem",
}

__all__ = sorted(_EXPORTS) + ["reference"]

__getattr__ = lazy_exports(__name__, _EXPORTS)
