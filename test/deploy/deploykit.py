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


def cli(*args, env=None, timeout=900):
    """``python -m torch_flydsl ARGS`` in a fresh process (the real CLI, as an operator runs it)."""
    import os
    import subprocess
    import sys

    full = {**os.environ, **(env or {})}
    return subprocess.run([sys.executable, "-m", "torch_flydsl", *args], capture_output=True, text=True, env=full,
                          timeout=timeout)


def table_spec(path, *entries):
    """A dispatch table file of ``entries`` (each a dict of an mm entry's fields beyond the defaults)."""
    import json

    base = {"op": "mm", "dtype": "bfloat16", "layout": "nt", "bias": False, "m": [1, 16], "n": 4096, "k": 4096,
            "config": "m16n64k128_w1x4_s3_g0_sk4"}
    path.write_text(json.dumps({"format": "torch-flydsl-dispatch-table", "version": 1, "arch": "gfx950",
                                "entries": [{**base, **e} for e in entries]}))
    return path


def _mount_namespaces() -> bool:
    """Whether this process may mount inside a private mount namespace (root in a container
    with CAP_SYS_ADMIN): the honest way to get a read-only or full filesystem as root."""
    import shutil
    import subprocess

    if shutil.which("unshare") is None:
        return False
    try:
        r = subprocess.run(["unshare", "-m", "sh", "-c", "mount -t tmpfs -o size=4k tmpfs /mnt"],
                           capture_output=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return r.returncode == 0


needs_mounts = pytest.mark.skipif(not _mount_namespaces(),
                                  reason="cannot mount in a private mount namespace here (unshare -m, mount)")


def in_mount_namespace(setup: str, argv: list, env=None, timeout=900):
    """Run ``argv`` after the shell commands ``setup`` (mounts) in a private mount namespace:
    the mounts vanish with it."""
    import os
    import subprocess

    return subprocess.run(["unshare", "-m", "sh", "-c", f"{setup} && exec \"$@\"", "sh", *argv],
                          capture_output=True, text=True, env={**os.environ, **(env or {})}, timeout=timeout)
