"""An editable install whose checkout was moved or deleted: torch's loader cannot import the
entry point's module, and ``import torch`` fails in that environment. Nothing of the plugin
runs then, so it cannot be caught; what the plugin owes the user is a doctor that still runs
and says what is wrong and how out.

The environment is real: a fresh venv that sees the test venv's packages (torch, flydsl) as a
plain path, without its editable finder, holding torch-flydsl's dist-info whose PEP 610
``direct_url.json`` names a checkout that is gone, exactly what ``pip install -e`` leaves
behind. The user then runs the doctor from where the checkout is now (its own directory on
``sys.path``, as ``python -m`` puts it there).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def stale(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("stale")
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                               check=True, capture_output=True, text=True).stdout.strip())
    ours = Path(sysconfig.get_path("purelib"))
    (site / "test-venv.pth").write_text(f"{ours}\n")  # a path line: that dir's own .pth files are not run
    dist = next(ours.glob("torch_flydsl-*.dist-info"))
    copy = site / dist.name
    shutil.copytree(dist, copy)
    gone = root / "moved-away-checkout"
    (copy / "direct_url.json").write_text(json.dumps({"url": gone.as_uri(), "dir_info": {"editable": True}}))
    moved = root / "checkout-now-here"
    moved.mkdir()
    for name in ("torch_flydsl", "torch_flydsl_boot.py"):
        (moved / name).symlink_to(REPO / name)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TORCH_", "PYTHONPATH"))}
    return {"python": str(python), "gone": str(gone), "moved": str(moved), "env": env, "cwd": str(root)}


def _run(stale: dict, *args: str, cwd=None, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([stale["python"], *args], cwd=cwd or stale["cwd"], env={**stale["env"], **env},
                          capture_output=True, text=True, timeout=300)


def test_the_environment_really_is_broken_and_the_documented_way_out_works(stale):
    broken = _run(stale, "-c", "import torch")
    assert broken.returncode != 0 and "Failed to load the backend extension: torch_flydsl" in broken.stderr
    assert _run(stale, "-c", "import torch", TORCH_DEVICE_BACKEND_AUTOLOAD="0").returncode == 0


def test_doctor_still_runs_and_names_the_missing_checkout_and_the_way_out(stale):
    r = _run(stale, "-m", "torch_flydsl", "doctor", cwd=stale["moved"])
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr[-3000:]
    said = r.stdout + r.stderr
    assert "BROKEN: torch_flydsl_boot:autoload" in said and stale["gone"] in said
    assert "no longer exists" in said
    for way_out in ("pip install -e", "pip uninstall torch-flydsl", "TORCH_DEVICE_BACKEND_AUTOLOAD=0"):
        assert way_out in said
