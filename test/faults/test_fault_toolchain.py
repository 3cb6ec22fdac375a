"""The FlyDSL toolchain taken away or broken: flydsl missing, flydsl broken, no ld.lld.

Every scenario is a fresh process running model.py (torch.compile max-autotune of a bf16
nn.Linear with ATEN,FLYDSL on CPU, emulator executor) and keeps the contract of
``faultkit.Run.ok``: exit code 0, no traceback, PyTorch's result. Each also says why FlyDSL
was not used, on stderr through the torch_flydsl logger: warnings need no TORCH_FLYDSL_LOG
(with no logging configured Python prints them); "flydsl is not installed" is said at info,
so those scenarios set TORCH_FLYDSL_LOG=info.

"cold": the fault is there when the model is first compiled. Autotuning really runs: the
FlyDSL choice is benchmarked through its custom op, which raises ``KernelNotRun`` instead of
falling back while benchmarked, so the choice is dropped with the reason and ATen wins.
"warm": process A compiled the model
with a working toolchain and a FlyDSL winner (conftest ``warm_cache``), so the FX-graph cache
holds code calling ``torch.ops.torch_flydsl.dense_addmm_out``; process B, same cache, has the
fault.
"""

from __future__ import annotations

import pytest

import faultkit as fk

# FLYDSL was requested and cannot work at all in this process: one warning, even without a log level.
NOT_INSTALLED = "WARNING FLYDSL was requested but offers nothing in this process: flydsl is not installed (pip install 'torch-flydsl[flydsl]')"
NO_LLD = "compile failed: no ld.lld found: install lld (e.g. apt-get install lld-19) or set ROCM_PATH"
BROKEN = f"ImportError: {fk.FLYDSL_BROKEN_MESSAGE}"
INFO = {"TORCH_FLYDSL_LOG": "info"}


def _one_fallback(run: fk.Run, reason: str) -> None:
    """Warm: the cached code's op computed PyTorch's result; exactly one line says why."""
    assert run.fallback_lines() == [fk.FALLBACK + reason], run.stderr[-3000:]
    assert run.dropped_lines() == []


def _dropped(run: fk.Run, reason: str) -> None:
    """Cold: autotuning dropped the FlyDSL choice, with the reason, once; ATen's call won."""
    assert run.dropped_lines() == [fk.DROPPED + reason], run.stderr[-3000:]
    assert run.fallback_lines() == []
    assert not run.flydsl_called and run.result["calls"][0].startswith("extern_kernels.addmm(")


# -- 1. flydsl missing ------------------------------------------------------------------------


@pytest.mark.compile
def test_flydsl_missing_cold_is_never_offered_and_a_warning_says_not_installed(tmp_path):
    r = fk.run_model(tmp_path / "inductor", tmp_path, {**fk.EMULATOR, **INFO}, fk.hide_flydsl(tmp_path / "pp")).ok()
    assert not r.flydsl_called and r.result["calls"][0].startswith("extern_kernels.addmm(")
    assert r.lines(NOT_INSTALLED), r.stderr[-3000:]
    assert r.fallback_lines() == [] and r.dropped_lines() == []


@pytest.mark.emulator
def test_flydsl_missing_warm_misses_the_fx_cache_and_pytorch_recompiles(tmp_path, warm_copy):
    # The FX-graph key carries the FlyDSL version (torch_flydsl.fingerprint): with flydsl
    # gone the entry calling the plugin op is not reused; Inductor recompiles without FlyDSL.
    r = fk.run_model(warm_copy, tmp_path, {**fk.EMULATOR, **INFO}, fk.hide_flydsl(tmp_path / "pp")).ok()
    assert (r.result["fx_hits"], r.result["fx_misses"]) == (0, 1)
    assert not r.flydsl_called and r.result["emulated"] == 0
    assert r.lines(NOT_INSTALLED), r.stderr[-3000:]


@pytest.mark.emulator
def test_flydsl_find_spec_raising_warm_leaves_the_glue_uninstalled_and_warns(tmp_path, warm_copy):
    # Harsher than a missing package: importlib.util.find_spec("flydsl") itself raises
    # ModuleNotFoundError (a misbehaving meta-path finder). The plugin's version fingerprint
    # raises while the Inductor glue installs; the glue stays off with one warning, so
    # Inductor neither offers FlyDSL nor reuses the entry compiled with it.
    r = fk.run_model(warm_copy, tmp_path, fk.EMULATOR, fk.flydsl_finder_raises(tmp_path / "pp")).ok()
    assert (r.result["fx_hits"], r.result["fx_misses"]) == (0, 1)
    assert not r.flydsl_called
    assert r.lines("torch_flydsl: Inductor glue not installed: ModuleNotFoundError: No module named 'flydsl' (planted)")


# -- 1. flydsl broken (importable, metadata present, import raises) ---------------------------


@pytest.mark.compile
def test_flydsl_broken_cold_is_offered_then_dropped_with_the_import_error(tmp_path):
    # The probe reads metadata only, so a broken flydsl still looks usable and one config is
    # offered; benchmarking calls the op, whose import of flydsl fails.
    r = fk.run_model(tmp_path / "inductor", tmp_path, fk.EMULATOR, fk.break_flydsl(tmp_path / "pp")).ok()
    _dropped(r, BROKEN)
    assert r.result["emulated"] == 0


@pytest.mark.emulator
def test_flydsl_broken_warm_runs_the_cached_op_which_falls_back(tmp_path, warm_copy):
    r = fk.run_model(warm_copy, tmp_path, fk.EMULATOR, fk.break_flydsl(tmp_path / "pp")).ok()
    assert r.result["fx_hits"] == 1 and r.flydsl_called  # the cached graph calling the op ran
    assert r.result["emulated"] == 0
    _one_fallback(r, BROKEN)


# -- 2. no ld.lld -----------------------------------------------------------------------------


@pytest.mark.compile
def test_no_linker_cold_the_choice_is_dropped_saying_how_to_install_one(tmp_path):
    env = {**fk.EMULATOR, **fk.no_linker(tmp_path)}
    r = fk.run_model(tmp_path / "inductor", tmp_path, env).ok()
    _dropped(r, NO_LLD)
    assert r.result["emulated"] == 0


@pytest.mark.emulator
def test_no_linker_warm_the_plugins_private_lld_link_does_not_count(tmp_path, warm_copy):
    # Process A left <inductor cache>/torch_flydsl/rocm_lld/llvm/bin/ld.lld -> the system lld.
    # That link only wraps an lld found on PATH/ROCM_PATH, so it must not revive a linker the
    # user no longer has: the cached op falls back.
    assert (fk.plugin_cache(warm_copy) / "rocm_lld" / "llvm" / "bin" / "ld.lld").is_symlink()
    env = {**fk.EMULATOR, **fk.no_linker(tmp_path)}
    r = fk.run_model(warm_copy, tmp_path, env).ok()
    assert r.result["fx_hits"] == 1 and r.flydsl_called
    assert r.result["emulated"] == 0
    _one_fallback(r, NO_LLD)
