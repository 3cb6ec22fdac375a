"""Never compile at run time: under CUDA-graph capture (any mode) and with
``TORCH_FLYDSL_RUN_ONLY=1``; and what a precompiled binary is keyed by."""

import json
import os
import subprocess
import sys

import pytest
import torch

from deploykit import needs_disk_cache_keys
from torch_flydsl.runtime import kernel_cache


@pytest.fixture
def capturing(monkeypatch):
    state = {"on": False}
    monkeypatch.setattr(kernel_cache, "_capturing", lambda: state["on"])
    return state


def test_a_first_use_during_capture_is_refused_and_never_compiles(capturing):
    calls = []
    key = ("test-capture", os.getpid(), object())
    capturing["on"] = True
    with pytest.raises(kernel_cache.CaptureRefused, match="capturing a CUDA graph"):
        kernel_cache.first_use(key, lambda: calls.append(1) or "kernel")
    assert calls == []
    capturing["on"] = False
    assert kernel_cache.first_use(key, lambda: calls.append(1) or "kernel") == ("kernel", True)
    capturing["on"] = True  # compiled before capture: served during it, no compile
    assert kernel_cache.first_use(key, lambda: calls.append(1) or "other") == ("kernel", False)
    assert calls == [1]


def test_a_refusal_during_capture_is_not_remembered_as_a_failed_compile(capturing):
    key = ("test-capture-2", os.getpid(), object())
    capturing["on"] = True
    with pytest.raises(kernel_cache.CaptureRefused):
        kernel_cache.first_use(key, lambda: "kernel")
    capturing["on"] = False
    assert kernel_cache.first_use(key, lambda: "kernel") == ("kernel", True)


def test_the_capture_check_is_false_without_cuda():
    assert kernel_cache._capturing() is (torch.cuda.is_available() and torch.cuda.is_current_stream_capturing())


@pytest.mark.parametrize("flag, expected", [("1", "1"), ("0", None), (None, None)])
def test_run_only_makes_flydsl_refuse_to_lower_on_the_device_path(monkeypatch, tmp_path, flag, expected):
    from torch_flydsl.runtime.compile import device_compile_env

    monkeypatch.setenv("FLYDSL_RUNTIME_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("FLYDSL_RUNTIME_RUN_ONLY", raising=False)
    if flag is None:
        monkeypatch.delenv("TORCH_FLYDSL_RUN_ONLY", raising=False)
    else:
        monkeypatch.setenv("TORCH_FLYDSL_RUN_ONLY", flag)
    with device_compile_env("gfx950"):
        assert os.environ.get("FLYDSL_RUNTIME_RUN_ONLY") == expected
    assert "FLYDSL_RUNTIME_RUN_ONLY" not in os.environ


def test_run_only_is_part_of_the_inductor_cache_key(monkeypatch):
    from torch_flydsl import config

    monkeypatch.setenv("TORCH_FLYDSL_RUN_ONLY", "0")
    off = config.cache_key_knobs()
    monkeypatch.setenv("TORCH_FLYDSL_RUN_ONLY", "yes")
    assert config.cache_key_knobs() != off


# In a fresh process: trace the kernel for REAL (CPU) operands of another shape than the
# precompiled one, with FlyDSL's run-only mode on: it raises unless it finds the binary that
# precompile built from meta placeholders. This is the lookup a device process does (the
# trace, not the tensors' device, decides FlyDSL's key).
LOOKUP = r"""
import json, sys, torch
from torch_flydsl.runtime.compile import cache_filling_env
from torch_flydsl.templates.dense_gemm.config import DenseGemmConfig
from torch_flydsl.templates.dense_gemm.launcher import compile_args
import flydsl.compiler as flyc
cache, key = sys.argv[1], sys.argv[2]
a = torch.randn(40, 256, dtype=torch.bfloat16)
w = torch.randn(72, 256, dtype=torch.bfloat16)
out = torch.empty(40, 72, dtype=torch.bfloat16)
jit_fn, args = compile_args(DenseGemmConfig.from_key(key), a, w.t(), out)
import os
with cache_filling_env(cache):
    os.environ["FLYDSL_RUNTIME_RUN_ONLY"] = "1"
    try:
        flyc.compile(jit_fn, *args)
        print(json.dumps({"found": True}))
    except RuntimeError as e:
        print(json.dumps({"found": False, "error": str(e)}))
"""


@pytest.mark.compile
@needs_disk_cache_keys
def test_a_fresh_process_finds_the_precompiled_binary_for_real_operands_of_any_shape(tmp_path):
    from torch_flydsl.deploy.precompile import precompile
    from torch_flydsl.deploy.spec import load

    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"format": "torch-flydsl-shapes", "version": 1, "breadth": "baseline", "shapes": [
        {"op": "mm", "dtype": "bfloat16", "layout": "nt", "m": 2048, "n": 4096, "k": 4096}]}))
    units, _, _ = precompile(load(spec), tmp_path / "cache", progress=False)
    (unit,) = units.values()
    assert unit.status == "compiled"

    def lookup(cache):
        r = subprocess.run([sys.executable, "-c", LOOKUP, str(cache), unit.cfg.key()], capture_output=True,
                           text=True, timeout=600)
        assert r.returncode == 0, r.stderr[-3000:]
        return json.loads(r.stdout.strip().splitlines()[-1])

    assert lookup(tmp_path / "cache" / "flydsl") == {"found": True}
    missing = lookup(tmp_path / "empty")
    assert missing["found"] is False and "RUN_ONLY" in missing["error"], missing
