"""TopK family: ``torch.topk`` along a unit-stride dim for fp32/fp16/bf16 on gfx950 (eager).

Importing the package is nearly free; the FlyDSL kernel and launcher import FlyDSL lazily.
"""

from .. import lazy_exports

_EXPORTS = {
    "KERNEL_VERSION": "config",
    "TopKConfig": "config",
    "config_fits": "config",
    "configs_for": "config",
    "check_problem": "eligibility",
    "compile_args": "launcher",
    "launch": "launcher",
    "run_emulated": "launcher",
    "topk": "launcher",
    "TopKProblem": "problem",
    "order_keys": "reference",
    "reference": "reference",
}

__all__ = sorted(_EXPORTS)

__getattr__ = lazy_exports(__name__, _EXPORTS)
