"""MXFP8 grouped GEMM family (MoE with MX block scales): ``torch._scaled_grouped_mm_v2``'s
2-D A x 3-D B with device-side ``offs`` and unswizzled E8M0 scales, on gfx950's scaled MFMA.

Importing the package is nearly free; the FlyDSL kernel and launcher import FlyDSL lazily.
"""

from .. import lazy_exports

from .reference import reference  # noqa: E402  (the submodule's name is also its function's)

_EXPORTS = {
    "BASELINE": "config",
    "CURATED": "config",
    "KERNEL_VERSION": "config",
    "ScaledGroupedConfig": "config",
    "config_fits": "config",
    "configs_for": "config",
    "check_problem": "eligibility",
    "check_tensors": "eligibility",
    "compile_args": "launcher",
    "launch": "launcher",
    "run_emulated": "launcher",
    "ScaledGroupedProblem": "problem",
}

__all__ = sorted(_EXPORTS) + ["reference"]

__getattr__ = lazy_exports(__name__, _EXPORTS)
