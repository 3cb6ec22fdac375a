"""The RMSNorm device benchmark (``torch_flydsl.bench.rms_norm``, run by
benchmarks/rmsnorm_device_bench.py) works before it meets an MI350: its plan (every case with
the config it would get), the no-GPU exit 0, and its plot on synthetic results."""

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).parents[1] / "benchmarks" / "rmsnorm_device_bench.py"


@pytest.fixture(scope="module")
def bench():
    from torch_flydsl.bench import rms_norm

    return rms_norm


def test_without_a_gfx950_it_prints_the_plan_and_exits_0(bench):
    r = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert f"plan: {len(bench.SUITE)} cases" in r.stdout and "not timing:" in r.stdout
    assert "rms_w4_r1_s4" in r.stdout  # 4097 (one over aligned) gets 4 waves x 4 vectors per lane


def test_plan_rows_name_configs_and_the_unaligned_sizes(bench):
    assert bench.plan_row("bf16", 8192, 4097) == ("bf16", 8192, 4097, "rms_w4_r1_s4")
    assert bench.plan_row("fp16", 1, 32768) == ("fp16", 1, 32768, "rms_w16_r1_s4")
    assert {4097, 8193, 16385} <= {n for _, _, n in bench.SUITE}


def test_plot_draws_speedups_when_matplotlib_is_there(bench, tmp_path):
    rows = [{"dtype": "bf16", "rows": 1, "n": 4097, "speedup": 1.5}, {"dtype": "fp16", "rows": 8, "n": 8192, "speedup": 0.9}]
    drew = bench.plot(rows, tmp_path / "p.png")
    assert drew == (importlib.util.find_spec("matplotlib") is not None)
    assert (tmp_path / "p.png").exists() == drew
