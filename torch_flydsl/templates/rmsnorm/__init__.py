"""RMSNorm forward family: ``F.rms_norm`` / ``aten::_fused_rms_norm`` over the last dimension on
gfx950 (bf16/fp16/fp32, optional weight, any row length up to the register capacity).

Importing the package is nearly free; the FlyDSL kernel and launcher import FlyDSL lazily.
"""

from .. import lazy_exports

from .reference import reference  # noqa: E402

_EXPORTS = {
    "BASELINE": "config",
    "CURATED": "config",
    "KERNEL_VERSION": "config",
    "RmsNormConfig": "config",
    "baseline_for": "config",
    "config_fits": "config",
    "configs_for": "config",
    "check_problem": "eligibility",
    "check_tensors": "eligibility",
    "compile_args": "launcher",
    "launch": "launcher",
    "outputs_for": "launcher",
    "run_emulated": "launcher",
    "RmsNormProblem": "problem",
    "default_eps": "problem",
}

__all__ = sorted(_EXPORTS) + ["reference"]

__getattr__ = lazy_exports(__name__, _EXPORTS)
