"""Two processes compiling the same kernel into one (empty) cache at the same time.

Both start before either is waited for, share TORCHINDUCTOR_CACHE_DIR (so the FX-graph and
autotune caches and the plugin's ``torch_flydsl/rocm_lld`` link), force a FlyDSL win and run
the emulated gfx950 kernel. Both must be correct without any warning, and a third process
must then hit the FX-graph cache and run the kernel from it.
"""

from __future__ import annotations

import pytest

import faultkit as fk


@pytest.mark.emulator
def test_two_processes_compiling_into_one_cache_then_a_third_reuses_it(tmp_path):
    cache = tmp_path / "inductor"
    started = [fk.start_model(cache, tmp_path / name, fk.EMULATOR, force_win=True) for name in ("a", "b")]
    a, b = (fk.finish(*s).ok() for s in started)
    for r in (a, b):
        assert r.flydsl_called and r.result["emulated"] == 1
        assert r.plugin_said() == [], r.stderr[-3000:]
    link = fk.plugin_cache(cache) / "rocm_lld" / "llvm" / "bin"
    assert [p.name for p in link.iterdir()] == ["ld.lld"]  # no leftover per-pid temp link

    c = fk.run_model(cache, tmp_path / "c", fk.EMULATOR).ok()
    assert c.result["fx_hits"] == 1 and c.flydsl_called and c.result["emulated"] == 1
    assert c.plugin_said() == []
