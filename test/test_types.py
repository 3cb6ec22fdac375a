"""The static type check: mypy over the package with pyproject.toml's ``[tool.mypy]`` settings.

It runs in a subprocess with a fresh cache (nothing from a developer's own ``.mypy_cache``), so
a green run means the tree as it is type-checks: the kernel-family contract and its callers
are checked, not remembered. About 20 s on one core, most of it reading torch's stubs.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_package_type_checks(tmp_path):
    if importlib.util.find_spec("mypy") is None:
        from torch_flydsl_boot import env_flag

        why = "mypy is not installed (pip install -e '.[test]')"
        if env_flag("CI", False):
            pytest.fail(f"CI is set but {why}: the type check must run there")
        pytest.skip(why)
    cmd = [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"),
           "--cache-dir", str(tmp_path / "mypy_cache"), "--no-color-output"]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, (
        f"mypy (settings: pyproject.toml [tool.mypy]) failed with exit status {done.returncode}:\n"
        f"{done.stdout}{done.stderr}"
    )
