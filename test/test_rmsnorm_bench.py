"""The RMSNorm device benchmark (``torch_flydsl.bench.rms_norm``, run by
benchmarks/rmsnorm_device_bench.py) works before it meets an MI350: the seeds' 22 cases and its
plan (every case with the config it would get), the no-GPU exit 0, the measuring path on CPU
tensors (reference stand-in executor, a stand-in timer: plumbing only), the summary lines and
the plot on synthetic results."""

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
from benchkit import measure_on_cpu

SCRIPT = Path(__file__).parents[1] / "benchmarks" / "rmsnorm_device_bench.py"


@pytest.fixture(scope="module")
def bench():
    from torch_flydsl.bench import rms_norm

    return rms_norm


def test_the_seeds_22_cases_fp16_and_bf16_with_one_over_aligned_sizes(bench):
    assert len(bench.SUITE) == 22 and {d for d, _, _ in bench.SUITE} == {"fp16", "bf16"}
    assert [c for c in bench.SUITE if c[0] == "fp16"] == [("fp16", r, n) for r, n in bench.SEED_SHAPES]
    one_over = {n for _, _, n in bench.SUITE if bench.aligned(n) == "no"}
    assert one_over == {4097, 8193, 16385, 32769} and {n - 1 for n in one_over} <= {n for _, _, n in bench.SUITE}
    assert bench.BENCH.seed() == [{"dtype": d, "rows": r, "n": n} for d, r, n in bench.SUITE]


def test_without_a_gfx950_it_prints_the_plan_and_exits_0(bench):
    r = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "plan: 22 cases (seeds" in r.stdout and "not timing:" in r.stdout
    planned = [ln.split() for ln in r.stdout.splitlines() if ln.startswith(("fp16 ", "bf16 "))]
    assert len(planned) == 22 and all(p[4].startswith("rms_w") for p in planned), planned


def test_plan_rows_name_configs_and_the_unaligned_sizes(bench):
    assert bench.plan_row("bf16", 8192, 4097) == ("bf16", 8192, 4097, "rms_w4_r1_s4")
    assert bench.plan_row("fp16", 1, 32768) == ("fp16", 1, 32768, "rms_w16_r1_s4")
    assert bench.plan_row("bf16", 1, 65537)[3].startswith("[size] rows of 65537 elements do not fit")


def test_measuring_path_on_cpu_tensors_reads_who_served_each_call():
    served, declined = measure_on_cpu("rms_norm", '[("fp16", 3, 4097), ("bf16", 1, 65537)]', flush=False)
    assert served["config"] == "rms_w4_r1_s4" and served["aligned"] == "no" and served["err_flydsl"] < 1e-3
    assert served["flydsl_ms"] == 1.0 and served["pytorch_ms"] == 2.0 and served["speedup"] == 2.0
    assert declined["note"].startswith("FlyDSL did not serve: PyTorch's kernel: [size] rows of 65537 elements")
    assert "flydsl_ms" not in declined and "speedup" not in declined


def test_summary_splits_aligned_and_one_over_sizes(bench):
    rows = [{"aligned": "yes", "speedup": 1.2}, {"aligned": "yes", "speedup": 1.5}, {"aligned": "no", "speedup": 3.66},
            {"aligned": "no"}]
    assert bench.summary(rows) == [
        "all: geomean speedup 1.875x over 3 cases (range 1.200x to 3.660x)",
        "aligned N: geomean speedup 1.342x over 2 cases (range 1.200x to 1.500x)",
        "one-over N: geomean speedup 3.660x over 1 cases (range 3.660x to 3.660x)"]


def test_plot_draws_speedups_when_matplotlib_is_there(bench, tmp_path):
    rows = [{"dtype": "bf16", "rows": 1, "n": 4097, "flydsl_ms": 1.0, "pytorch_ms": 1.5},
            {"dtype": "fp16", "rows": 8, "n": 8192, "flydsl_ms": 1.0, "pytorch_ms": 0.9}]
    drew = bench.plot(rows, tmp_path / "p.png")
    assert drew == (importlib.util.find_spec("matplotlib") is not None)
    assert (tmp_path / "p.png").exists() == drew
