"""Before FlyDSL is pointed at a cache directory to load binaries from (the device launch path:
eager ops, the vLLM re-route, a cached Inductor graph), the plugin checks that nobody else could
have written its pickles and, for the deployment cache, that every binary the manifest lists is
the one that was built. A refusal keeps FlyDSL on a directory private to this process, with one
warning that says why; nothing is loaded from the refused directory."""

from __future__ import annotations

import hashlib
import json
import logging
import os

import pytest

from torch_flydsl.runtime import compile as rc


@pytest.fixture
def deploy(monkeypatch, tmp_path):
    """A deployment cache (as precompile leaves it) with one listed binary, in use by this process."""
    root = tmp_path / "deploy"
    binary = root / "flydsl" / "flydsl_dense_gemm" / "k.pkl"
    binary.parent.mkdir(parents=True)
    binary.write_bytes(b"\x80\x04 a pickle FlyDSL wrote")
    os.chmod(tmp_path, 0o700)
    for d in (root, root / "flydsl", binary.parent):
        os.chmod(d, 0o700)
    entry = {"file": "flydsl/flydsl_dense_gemm/k.pkl", "size": binary.stat().st_size,
             "sha256": hashlib.sha256(binary.read_bytes()).hexdigest()}
    (root / "manifest.json").write_text(json.dumps({"kernels": {"dense_gemm-5/cfg/bfloat16/nt/bias0/ktail0": entry}}))
    monkeypatch.setenv("TORCH_FLYDSL_CACHE_DIR", str(root))
    monkeypatch.setattr(rc, "_cache_warned", set())
    return root, binary


def _cache_dir_in_use(caplog) -> str:
    with caplog.at_level(logging.WARNING, logger="torch_flydsl"), rc.device_compile_env("gfx950") as setup:
        return setup.cache_dir


def test_an_intact_deployment_cache_is_what_flydsl_loads_from(deploy, caplog):
    root, _ = deploy
    assert _cache_dir_in_use(caplog) == str(root / "flydsl")
    assert "not trusted" not in caplog.text


def test_a_replaced_binary_refuses_the_directory_naming_the_kernel_and_the_hash(deploy, caplog):
    root, binary = deploy
    binary.write_bytes(b"\x80\x04 someone else's pickle")  # same size or not: the hash says
    used = _cache_dir_in_use(caplog)
    assert used != str(root / "flydsl") and not used.startswith(str(root))
    said = [r.getMessage() for r in caplog.records if "not trusted" in r.getMessage()]
    assert len(said) == 1 and "dense_gemm-5/cfg/bfloat16/nt/bias0/ktail0" in said[0] and str(binary) in said[0]


def test_a_cache_directory_others_can_write_is_refused_naming_it(deploy, caplog):
    root, _ = deploy
    os.chmod(root / "flydsl", 0o777)
    assert _cache_dir_in_use(caplog) != str(root / "flydsl")
    said = [r.getMessage() for r in caplog.records if "not trusted" in r.getMessage()]
    assert len(said) == 1 and f"{root / 'flydsl'} is writable by its group and others" in said[0]
