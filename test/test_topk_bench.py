"""The TopK device benchmark (``torch_flydsl.bench.topk``, run by benchmarks/topk_device_bench.py)
before it meets an MI350: the plan from the family gate, the
no-GPU exit, and its correctness check and plot on CPU data (the timing needs the device)."""

import subprocess
import sys
from pathlib import Path

import pytest
import torch

SCRIPT = Path(__file__).parents[1] / "benchmarks" / "topk_device_bench.py"


@pytest.fixture(scope="module")
def bench():
    from torch_flydsl.bench import topk

    return topk


def run_script(*args):
    r = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-4000:]
    return r.stdout


def test_dry_run_prints_the_plan_with_each_shapes_config():
    out = run_script("--dry-run", "--dtypes", "bf16")
    assert "topk_device_bench plan: 75 shapes (largest, sorted)" in out
    assert "topk_t512_kp1024" in out and "topk_t256_kp8" in out


def test_without_a_gfx950_it_says_why_and_exits_0():
    assert "no ROCm gfx950 GPU here" in run_script()


def test_plan_takes_the_gate_and_the_check_catches_a_wrong_answer(bench):
    plan = bench.plan(["fp32"], True)
    assert len(plan) == len(bench.suite()) and all(row[4].startswith("topk_t") for row in plan)
    x = torch.randn(3, 100)
    v, i = torch.topk(x, 5)
    assert bench.check(x, 5, True, v, i) == "ok"
    assert bench.check(x, 5, True, v.flip(-1), i) == "MISMATCH"


def test_plot_on_synthetic_rows(bench, tmp_path):
    rows = [{"dtype": "fp32", "rows": 64, "N": 4096, "k": 8, "speedup": 2.0}]
    wrote = bench.plot(tmp_path / "p.png", rows)
    assert wrote == (tmp_path / "p.png").exists()
