"""CPU emulator for FlyDSL kernels compiled for AMD gfx950 (MI350), with a race/OOB checker.

Not imported by ``import torch_flydsl``; import ``torch_flydsl.emulator`` explicitly.

    from torch_flydsl.emulator import emulate
    report = emulate(my_jit_fn, (a, b, c, n))   # writes results into the CPU tensors
    assert report.ok, report
"""

from .errors import EmulatorError, UnsupportedOp

__all__ = ["emulate", "emulate_checked", "EmulationReport", "Finding", "EmulatorError", "UnsupportedOp", "run_and_compare", "HarnessReport", "BaselineTolerance"]


def __getattr__(name):  # lazy: importing the package must stay cheap
    if name in ("emulate", "emulate_checked"):
        from . import api

        return getattr(api, name)
    if name == "EmulationReport":
        from .executor import EmulationReport

        return EmulationReport
    if name == "Finding":
        from .checker import Finding

        return Finding
    if name in ("run_and_compare", "HarnessReport", "BaselineTolerance"):
        from . import harness

        return getattr(harness, name)
    raise AttributeError(name)
