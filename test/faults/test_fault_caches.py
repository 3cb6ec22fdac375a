"""Caches the user can break: FlyDSL's kernel cache dir and the plugin's own cache dir.

Where things live: the plugin keeps ``<inductor cache>/torch_flydsl/`` (mode 0700) for the
private ``rocm_lld/llvm/bin/ld.lld`` link around a system lld and, by default, FlyDSL's disk
cache ``flydsl_cache/``; ``FLYDSL_RUNTIME_CACHE_DIR`` moves the latter. FlyDSL's disk cache is
used only by the device compile step (``kernel_cache.first_use`` under ``device_compile_env``):
the emulator's compile-only builds switch it off (``FLYDSL_RUNTIME_ENABLE_CACHE=0``), so with
the emulator executor a broken FlyDSL cache dir must change nothing at all.

"Unwritable" is a path whose parent is a regular file: the tests run as root, and chmod does
not stop root. "Garbage" is random bytes in every file (symlinks included) inside the dir.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

import faultkit as fk



# -- the plugin's cache dir (<inductor cache>/torch_flydsl) -----------------------------------


def unusable_cache(path) -> str:
    return (f"OSError: torch_flydsl cannot use its cache directory {path}: FileExistsError: [Errno 17] File exists: "
            f"'{path}' (check TORCHINDUCTOR_CACHE_DIR / FLYDSL_RUNTIME_CACHE_DIR)")


@pytest.mark.compile
def test_plugin_cache_dir_unusable_cold_the_choice_is_dropped_naming_the_path(tmp_path):
    cache = tmp_path / "inductor"
    blocked = fk.block_plugin_cache(cache)
    r = fk.run_model(cache, tmp_path, fk.EMULATOR).ok()
    assert r.dropped_lines() == [fk.DROPPED + unusable_cache(blocked)]
    assert r.fallback_lines() == [] and not r.flydsl_called and r.result["emulated"] == 0


@pytest.mark.emulator
def test_plugin_cache_dir_unusable_warm_the_cached_op_falls_back_naming_the_path(tmp_path, warm_copy):
    blocked = fk.block_plugin_cache(warm_copy)
    r = fk.run_model(warm_copy, tmp_path, fk.EMULATOR).ok()
    assert r.result["fx_hits"] == 1 and r.flydsl_called and r.result["emulated"] == 0
    assert r.fallback_lines() == [fk.FALLBACK + unusable_cache(blocked)]


@pytest.mark.emulator
def test_plugin_cache_dir_full_of_garbage_warm_heals_and_the_kernel_runs(tmp_path, warm_copy):
    # The lld link becomes a file of random bytes (and FlyDSL's default cache dir gets a
    # garbage entry): the link is recreated atomically and the emulated kernel runs.
    link = fk.plugin_cache(warm_copy) / "rocm_lld" / "llvm" / "bin" / "ld.lld"
    target = link.resolve()
    extra = ("flydsl_cache/launch/0123.pkl", "flydsl_cache/launch/0123.lock")
    written = fk.fill_with_garbage(fk.plugin_cache(warm_copy), extra)
    assert link in written and not link.is_symlink()
    r = fk.run_model(warm_copy, tmp_path, fk.EMULATOR).ok()
    assert r.result["fx_hits"] == 1 and r.flydsl_called and r.result["emulated"] == 1
    assert r.plugin_said() == []
    assert link.is_symlink() and link.resolve() == target


# -- FLYDSL_RUNTIME_CACHE_DIR with the emulator executor ----------------------------------------


@pytest.mark.emulator
def test_flydsl_cache_dir_unwritable_warm_changes_nothing_under_the_emulator(tmp_path, warm_copy):
    # (A garbage-filled one is not read either: see the plugin-cache garbage test above, whose
    # default FlyDSL cache dir holds garbage, and the device compile step below.)
    flydsl_cache = fk.blocked_dir(tmp_path)
    r = fk.run_model(warm_copy, tmp_path, {**fk.EMULATOR, "FLYDSL_RUNTIME_CACHE_DIR": str(flydsl_cache)}).ok()
    assert r.result["fx_hits"] == 1 and r.flydsl_called and r.result["emulated"] == 1
    assert r.plugin_said() == []


# -- FLYDSL_RUNTIME_CACHE_DIR in the device compile step ----------------------------------------
# No gfx950 here, so the op's device path cannot run; its compile step can: ``launch`` compiles
# through ``kernel_cache.first_use(key, lambda: flyc.compile(jit_fn, *args))`` inside
# ``device_compile_env``, which is where FlyDSL reads and writes its disk cache. On FlyDSL 0.4+
# that compile returns without launching, so it runs on CPU tensors. The op turns any
# ``Exception`` from it into PyTorch's result (ops.run); what matters here is that a
# broken cache gives an ordinary exception naming the path, or is healed, never an abort.

DEVICE_COMPILE = textwrap.dedent(
    """
    import json
    import torch
    import flydsl.compiler as flyc
    from torch_flydsl.templates.dense_gemm.config import DenseGemmConfig
    from torch_flydsl.runtime.kernel_cache import first_use, launch_key
    from torch_flydsl.templates.dense_gemm.launcher import compile_args

    a = torch.randn(64, 256, dtype=torch.bfloat16)
    b = torch.randn(256, 128, dtype=torch.bfloat16)
    out = torch.empty(64, 128, dtype=torch.bfloat16)
    jit_fn, args = compile_args(DenseGemmConfig(), a, b, out)
    try:
        compiled, _ = first_use(launch_key(jit_fn, a.device), lambda: flyc.compile(jit_fn, *args))
        print(json.dumps({"compiled": type(compiled).__name__}))
    except Exception as e:
        print(json.dumps({"error": f"{type(e).__name__}: {e}", "oserror": isinstance(e, OSError)}))
    """
)


def device_compile(tmp_path, flydsl_cache) -> dict:
    rocm = tmp_path / "rocm"  # FlyDSL finds its linker at $ROCM_PATH/llvm/bin/ld.lld
    (rocm / "llvm" / "bin").mkdir(parents=True, exist_ok=True)
    from torch_flydsl.runtime.probe import find_lld

    link = rocm / "llvm" / "bin" / "ld.lld"
    if not link.exists():
        link.symlink_to(find_lld())
    cwd = tmp_path / "cwd"
    cwd.mkdir(exist_ok=True)
    env = fk.clean_env(ROCM_PATH=str(rocm), FLYDSL_GPU_ARCH="gfx950", FLYDSL_RUNTIME_CACHE_DIR=str(flydsl_cache),
                       TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "inductor"))
    r = subprocess.run([sys.executable, "-c", DEVICE_COMPILE], cwd=cwd, env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.mark.compile
def test_device_compile_with_unwritable_flydsl_cache_dir_compiles_in_memory(tmp_path):
    # FlyDSL's disk cache is an optimisation: an unusable one switches it off (one warning
    # naming the directory) instead of turning FlyDSL off.
    blocked = fk.blocked_dir(tmp_path)
    assert device_compile(tmp_path, blocked) == {"compiled": "CompiledFunction"}


@pytest.mark.compile
def test_device_compile_heals_a_flydsl_cache_full_of_garbage(tmp_path):
    flydsl_cache = tmp_path / "flydsl_cache"
    assert device_compile(tmp_path, flydsl_cache) == {"compiled": "CompiledFunction"}
    garbage = {p: p.read_bytes() for p in fk.fill_with_garbage(flydsl_cache) if p.suffix == ".pkl"}
    assert garbage  # the first compile stored an artifact, now random bytes
    assert device_compile(tmp_path, flydsl_cache) == {"compiled": "CompiledFunction"}
    for p, junk in garbage.items():  # FlyDSL dropped the corrupt entry and stored a fresh pickle
        fresh = p.read_bytes()
        assert fresh != junk and fresh[:1] == b"\x80", p
