"""No FlyDSL launch without HIP and a gfx950: the guard refuses with a reason instead of aborting."""

import pytest
import torch

from torch_flydsl.runtime import arch
from torch_flydsl.runtime.launch_guard import LaunchRefused, device_decline, executor_for


def test_cpu_tensors_are_refused_in_device_mode(monkeypatch):
    monkeypatch.delenv("TORCH_FLYDSL_EXECUTOR", raising=False)
    assert "not a ROCm GPU" in device_decline(torch.device("cpu"))
    with pytest.raises(LaunchRefused, match="not a ROCm GPU"):
        executor_for(torch.device("cpu"))


def test_cuda_device_without_hip_is_refused(monkeypatch):
    monkeypatch.delenv("TORCH_FLYDSL_EXECUTOR", raising=False)
    monkeypatch.setattr(torch.version, "hip", None)
    assert "HIP" in device_decline(torch.device("cuda", 0))


def test_non_gfx950_arch_is_refused(monkeypatch):
    from torch_flydsl.runtime import launch_guard

    monkeypatch.delenv("TORCH_FLYDSL_EXECUTOR", raising=False)
    monkeypatch.setattr(launch_guard, "hip_runtime_present", lambda: True)
    monkeypatch.setenv("FLYDSL_GPU_ARCH", "gfx942")
    assert "gfx942 is not supported" in device_decline(torch.device("cuda", 0))
    monkeypatch.setenv("FLYDSL_GPU_ARCH", "gfx950")
    assert device_decline(torch.device("cuda", 0)) is None


def test_emulator_takes_cpu_tensors_only(monkeypatch):
    monkeypatch.setenv("TORCH_FLYDSL_EXECUTOR", "emulator")
    assert executor_for(torch.device("cpu")) == "emulator"
    assert "CPU tensors only" in device_decline(torch.device("cuda", 0))


def test_reference_standin_takes_any_device(monkeypatch):
    monkeypatch.setenv("TORCH_FLYDSL_EXECUTOR", "reference-standin")
    assert executor_for(torch.device("cpu")) == "reference-standin"
    assert device_decline(torch.device("cuda", 0)) is None


@pytest.mark.parametrize(
    "env, expected",
    [({"FLYDSL_GPU_ARCH": "GFX950"}, "gfx950"), ({"HSA_OVERRIDE_GFX_VERSION": "9.5.0"}, "gfx950"), ({}, None)],
)
def test_arch_from_env_matches_flydsl_rules(monkeypatch, env, expected):
    monkeypatch.delenv("FLYDSL_GPU_ARCH", raising=False)
    monkeypatch.delenv("HSA_OVERRIDE_GFX_VERSION", raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    assert arch.arch_from_env() == expected
