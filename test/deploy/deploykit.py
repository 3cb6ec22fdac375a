"""Shared marks of the deployment tests (imported by name, as faultkit is in test/faults)."""

import importlib.util

import pytest


def _flydsl_disk_keys() -> bool:
    if importlib.util.find_spec("flydsl") is None:
        return False
    try:
        from flydsl.compiler.jit_function import _disk_cache_key  # noqa: F401
    except ImportError:
        return False
    return True


# precompile names each binary by FlyDSL's disk-cache key, which flydsl 0.3.x does not expose
# (precompile then refuses with that reason: test_bad_specs... covers the message path).
needs_disk_cache_keys = pytest.mark.skipif(not _flydsl_disk_keys(),
                                           reason="this flydsl does not expose its disk-cache keys (precompile needs 0.5)")
