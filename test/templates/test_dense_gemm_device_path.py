"""The real-GPU launch path's bookkeeping, which must be right before any MI350 runs it:
one compile per (process, device, kernel), under a pinned arch and the plugin's cache dir."""

import logging
import os

import pytest
import torch

from torch_flydsl.runtime import kernel_cache


def test_first_use_compiles_once_with_the_arch_pinned_and_env_restored(monkeypatch, tmp_path):
    monkeypatch.delenv("FLYDSL_GPU_ARCH", raising=False)
    monkeypatch.setenv("HSA_OVERRIDE_GFX_VERSION", "9.5.0")
    monkeypatch.setenv("FLYDSL_RUNTIME_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("COMPILE_ONLY", "1")
    monkeypatch.setattr(kernel_cache, "_COMPILED", {})
    seen = []

    def compile_fn():
        seen.append({k: os.environ.get(k) for k in ("FLYDSL_GPU_ARCH", "ARCH", "COMPILE_ONLY", "FLYDSL_RUNTIME_CACHE_DIR")})
        return "compiled"

    key = kernel_cache.launch_key("jit-fn", torch.device("cpu"))
    assert kernel_cache.first_use(key, compile_fn) == ("compiled", True)
    assert kernel_cache.first_use(key, compile_fn) == ("compiled", False)
    assert seen == [{"FLYDSL_GPU_ARCH": "gfx950", "ARCH": "gfx950", "COMPILE_ONLY": None, "FLYDSL_RUNTIME_CACHE_DIR": str(tmp_path)}]
    assert os.environ.get("COMPILE_ONLY") == "1" and "FLYDSL_GPU_ARCH" not in os.environ


def test_launch_keys_separate_processes_and_devices():
    k0 = kernel_cache.launch_key("jit-fn", torch.device("cuda", 0))
    k1 = kernel_cache.launch_key("jit-fn", torch.device("cuda", 1))
    assert k0 != k1 and k0[0] == os.getpid()


def test_a_failed_compile_is_not_retried_on_every_call(monkeypatch, tmp_path):
    # A warm graph calling the op with a broken toolchain would otherwise re-trace and fail
    # again on every GEMM call (0.3-0.5 s each) before falling back to PyTorch.
    monkeypatch.setenv("FLYDSL_RUNTIME_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(kernel_cache, "_COMPILED", {})
    monkeypatch.setattr(kernel_cache, "_FAILED", {})
    calls = []

    def failing_compile():
        calls.append(1)
        raise RuntimeError("linker missing")

    key = kernel_cache.launch_key("jit-fn", torch.device("cpu"))
    for _ in range(3):
        with pytest.raises(RuntimeError, match="linker missing"):
            kernel_cache.first_use(key, failing_compile)
    assert len(calls) == 1


def test_an_unusable_flydsl_cache_dir_keeps_kernels_in_a_private_directory_of_this_process(monkeypatch, tmp_path, caplog):
    from torch_flydsl.runtime import compile as rc

    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("FLYDSL_RUNTIME_CACHE_DIR", str(blocker / "cache"))
    monkeypatch.setattr(rc, "_cache_warned", set())
    with caplog.at_level(logging.WARNING, logger="torch_flydsl"), rc.device_compile_env("gfx950") as setup:
        seen = os.environ.get("FLYDSL_RUNTIME_ENABLE_CACHE"), os.environ.get("FLYDSL_RUNTIME_CACHE_DIR")
    # Compile workers hand binaries over through FlyDSL's disk cache, so there must be one:
    # a directory only this process uses, made private to its user.
    assert seen == ("1", setup.cache_dir) and setup.cache_dir != str(blocker / "cache")
    assert os.stat(setup.cache_dir).st_mode & 0o777 == 0o700
    assert "FlyDSL's disk cache is off" in caplog.text and str(blocker / "cache") in caplog.text
