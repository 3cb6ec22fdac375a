"""The real-GPU launch path's bookkeeping, which must be right before any MI350 runs it:
one compile per (process, device, kernel), under a pinned arch and the plugin's cache dir."""

import os

import torch

from torch_flydsl.templates.dense_gemm import launcher


def test_first_use_compiles_once_with_the_arch_pinned_and_env_restored(monkeypatch, tmp_path):
    monkeypatch.delenv("FLYDSL_GPU_ARCH", raising=False)
    monkeypatch.setenv("HSA_OVERRIDE_GFX_VERSION", "9.5.0")
    monkeypatch.setenv("FLYDSL_RUNTIME_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("COMPILE_ONLY", "1")
    monkeypatch.setattr(launcher, "_COMPILED", {})
    seen = []

    def compile_fn():
        seen.append({k: os.environ.get(k) for k in ("FLYDSL_GPU_ARCH", "ARCH", "COMPILE_ONLY", "FLYDSL_RUNTIME_CACHE_DIR")})
        return "compiled"

    key = launcher.launch_key("jit-fn", torch.device("cpu"))
    assert launcher._first_use(key, compile_fn) == ("compiled", True)
    assert launcher._first_use(key, compile_fn) == ("compiled", False)
    assert seen == [{"FLYDSL_GPU_ARCH": "gfx950", "ARCH": "gfx950", "COMPILE_ONLY": None, "FLYDSL_RUNTIME_CACHE_DIR": str(tmp_path)}]
    assert os.environ.get("COMPILE_ONLY") == "1" and "FLYDSL_GPU_ARCH" not in os.environ


def test_launch_keys_separate_processes_and_devices():
    k0 = launcher.launch_key("jit-fn", torch.device("cuda", 0))
    k1 = launcher.launch_key("jit-fn", torch.device("cuda", 1))
    assert k0 != k1 and k0[0] == os.getpid()
