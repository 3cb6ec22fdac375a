"""FlyDSL's disk cache on a real gfx950: a launch fills it, a fresh process runs from it.

The second process runs with ``FLYDSL_RUNTIME_RUN_ONLY=1``, under which FlyDSL raises instead
of compiling on a cache miss: it passes only by loading what the first process stored.
"""

import pytest
from gfx950_kit import LAUNCH_PROBE, run_json

pytestmark = pytest.mark.gfx950


def compiled_kernels(cache_dir):
    return {str(p): p.stat().st_mtime_ns for p in cache_dir.rglob("*.pkl")}


@pytest.mark.parametrize("where", ["FLYDSL_RUNTIME_CACHE_DIR", "default under TORCHINDUCTOR_CACHE_DIR"])
def test_a_launch_fills_the_disk_cache_and_a_fresh_process_reuses_it(tmp_path, monkeypatch, where):
    env = {"TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor"), "TORCH_FLYDSL_EXECUTOR": "device"}
    if where == "FLYDSL_RUNTIME_CACHE_DIR":
        cache_dir = tmp_path / "flydsl"
        env["FLYDSL_RUNTIME_CACHE_DIR"] = str(cache_dir)
    else:
        monkeypatch.delenv("FLYDSL_RUNTIME_CACHE_DIR", raising=False)  # the test session sets one
        cache_dir = tmp_path / "inductor" / "torch_flydsl" / "flydsl_cache"
    run_json(LAUNCH_PROBE, {}, env)
    stored = compiled_kernels(cache_dir)
    assert stored, f"the launch left no compiled kernel in {cache_dir}"
    run_json(LAUNCH_PROBE, {}, {**env, "FLYDSL_RUNTIME_RUN_ONLY": "1"})
    assert compiled_kernels(cache_dir) == stored, "the fresh process compiled again"
