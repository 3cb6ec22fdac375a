"""Grouped GEMM family (MoE): ``torch._grouped_mm``'s 2-D A x 3-D B with device-side ``offs``,
bf16/fp16 on gfx950.

Importing the package is nearly free (names resolve on first use, PEP 562); the FlyDSL kernel
(``kernel.py``) and launcher import FlyDSL lazily.
"""

from .. import lazy_exports

# ``reference`` is both a submodule and the function it exports (see dense_gemm/__init__.py).
from .reference import reference  # noqa: E402

_EXPORTS = {
    "BASELINE": "config",
    "CURATED": "config",
    "KERNEL_VERSION": "config",
    "GroupedGemmConfig": "config",
    "config_fits": "config",
    "configs_for": "config",
    "search_space": "config",
    "check_problem": "eligibility",
    "check_tensors": "eligibility",
    "run_emulated": "emulated",
    "compile_args": "launcher",
    "grid_block": "launcher",
    "launch": "launcher",
    "GroupedGemmProblem": "problem",
}

__all__ = sorted(_EXPORTS) + ["reference"]

__getattr__ = lazy_exports(__name__, _EXPORTS)
