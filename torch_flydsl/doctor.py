"""``python -m torch_flydsl doctor``: everything that decides whether FlyDSL kernels can run here."""

from __future__ import annotations

import importlib.metadata
import os

from tabulate import tabulate


def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def _entry_point_registered() -> bool:
    eps = importlib.metadata.entry_points(group="torch.backends")
    return any(ep.value.startswith("torch_flydsl.") for ep in eps)


def rows() -> list[tuple[str, str]]:
    import torch

    from . import __version__, config, is_enabled
    from .runtime.arch import device_arch
    from .runtime.probe import find_lld, flydsl_info, hip_runtime_present, intree_flydsl_present

    info = flydsl_info()
    hip = hip_runtime_present()
    arch = device_arch(0) if hip else None
    lld = find_lld()
    flydsl = info.version or "not installed"
    if info.installed and not info.supported:
        flydsl += f" (unsupported: {info.reason})"
    out = [
        ("torch_flydsl", __version__),
        ("torch", torch.__version__),
        ("flydsl", flydsl),
        ("triton", _version("triton")),
        ("HIP runtime", f"yes (HIP {torch.version.hip})" if hip else f"no (torch.version.hip={torch.version.hip})"),
        ("GPU arch", arch or "none detected"),
        ("FLYDSL_GPU_ARCH", os.environ.get("FLYDSL_GPU_ARCH", "(unset)")),
        ("can launch FlyDSL kernels", "yes" if hip and arch == "gfx950" and info.usable else "no: compile-only / emulator only"),
        ("ld.lld (gfx950 compile-only)", str(lld) if lld else "not found (apt-get install lld-19)"),
        ("torch.backends entry point", "registered" if _entry_point_registered() else "not registered (pip install the package)"),
        ("plugin active in this process", "yes" if is_enabled() else "no"),
        ("in-tree FlyDSL backend in torch", "yes" if intree_flydsl_present() else "no"),
        ("FlyDSL kernel cache", os.environ.get("FLYDSL_RUNTIME_CACHE_DIR") or "<inductor cache dir>/torch_flydsl/flydsl_cache"),
        ("executor", config.executor()),
        ("autotune breadth", config.autotune_breadth()),
    ]
    for knob in config.KNOBS:
        if knob.env in os.environ:
            out.append((knob.env, os.environ[knob.env]))
    return out


def report() -> str:
    return tabulate(rows(), tablefmt="plain")
