"""Shared test setup: one Inductor cache per session, helpers to detect tool availability."""

from __future__ import annotations

import os
import shutil
import tempfile

import pytest

# Every test process gets a private Inductor/FlyDSL cache: nothing leaks between runs or
# from the developer's own caches.
_CACHE = tempfile.mkdtemp(prefix="torch_flydsl_test_cache_")
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", _CACHE)
os.environ.setdefault("FLYDSL_RUNTIME_CACHE_DIR", os.path.join(_CACHE, "flydsl"))


def have_compile_toolchain() -> tuple[bool, str]:
    from torch_flydsl.runtime.probe import find_lld, flydsl_info

    info = flydsl_info()
    if not info.usable:
        return False, f"flydsl unusable: {info.reason}"
    if find_lld() is None:
        return False, "no ld.lld (apt-get install lld-19)"
    return True, ""


def pytest_collection_modifyitems(config, items):
    ok, why = have_compile_toolchain()
    gfx950_requested = "gfx950" in (config.getoption("-m") or "")
    for item in items:
        if not ok and ("compile" in item.keywords or "emulator" in item.keywords):
            item.add_marker(pytest.mark.skip(reason=why))
        if "gfx950" in item.keywords and not gfx950_requested:
            item.add_marker(pytest.mark.skip(reason="real-gfx950 test: run with -m gfx950 on an MI350"))


def pytest_sessionfinish(session, exitstatus):
    shutil.rmtree(_CACHE, ignore_errors=True)
