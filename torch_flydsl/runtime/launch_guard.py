"""Decide how a FlyDSL kernel may execute in this process, before anything is launched.

A FlyDSL launch where no HIP runtime exists aborts the whole process (SIGABRT inside MLIR's
ExecutionEngine), so every launch goes through ``executor_for`` first.
"""

from __future__ import annotations

from typing import Optional

import torch

from .. import config
from .arch import SUPPORTED_ARCHS, device_arch
from .probe import flydsl_info, hip_runtime_present


class LaunchRefused(RuntimeError):
    """The plugin refused to launch a kernel here; the message says why."""


def device_decline(device: torch.device) -> Optional[str]:
    """Why FlyDSL kernels cannot run on ``device`` in this process (None: they can)."""
    ex = config.executor()
    if ex == "reference-standin":
        return None  # plumbing tests: no kernel runs, any device works (GPU glue tests use it)
    if ex == "emulator":
        if device.type == "cpu":
            return None
        return f"TORCH_FLYDSL_EXECUTOR={ex} runs kernels on CPU tensors only, got a {device.type} tensor"
    if device.type != "cuda":
        return f"device {device.type} is not a ROCm GPU"
    if not hip_runtime_present():
        return "this torch has no HIP runtime with a visible GPU (not a ROCm build)"
    arch = device_arch(device.index or 0)
    if arch not in SUPPORTED_ARCHS:
        return f"GPU arch {arch} is not supported (FlyDSL kernels here are written for {', '.join(SUPPORTED_ARCHS)})"
    info = flydsl_info()
    if not info.usable:
        return info.reason
    return None


def executor_for(device: torch.device) -> str:
    reason = device_decline(device)
    if reason is not None:
        raise LaunchRefused(f"torch_flydsl will not launch a FlyDSL kernel: {reason}")
    return config.executor()
