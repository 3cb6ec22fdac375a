"""The TopK device benchmark (``torch_flydsl.bench.topk``, run by benchmarks/topk_device_bench.py)
before it meets an MI350: the seeds' cases and the plan from the family (``explain topk``), the
no-GPU exit, its correctness check, the measuring path on CPU tensors (reference stand-in
executor, a stand-in timer: plumbing only), the per-group geomeans and the plot."""

import subprocess
import sys
from pathlib import Path

import pytest
import torch
from benchkit import measure_on_cpu

SCRIPT = Path(__file__).parents[1] / "benchmarks" / "topk_device_bench.py"


@pytest.fixture(scope="module")
def bench():
    from torch_flydsl.bench import topk

    return topk


def run_script(*args):
    r = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-4000:]
    return r.stdout


def test_the_seeds_cases_small_k_and_large_k_bands_in_both_modes(bench):
    assert len(bench.SMALL_K) == 10 and {k for _, _, k in bench.SMALL_K} == {2, 4, 8, 16}
    assert all(r >= 256 and n in (1024, 2048, 4096, 8192) for r, n, _ in bench.SMALL_K)
    assert {k for _, _, k in bench.LARGE_K} == set(bench.LARGE_K_BANDS) == {64, 128, 256}
    assert len(bench.LARGE_K) == 18 and all(8192 <= n <= 32768 for _, n, _ in bench.LARGE_K)
    recs = bench.records()
    assert len(recs) == 2 * 28 and {r["deterministic"] for r in recs} == {False, True}
    assert recs == bench.BENCH.seed()


def test_dry_run_lists_every_case_with_its_algorithm_and_config_without_launching(bench, capsys):
    assert bench.main(["--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "topk_device_bench plan: 56 cases (largest, sorted)" in out
    lines = [ln.split() for ln in out.splitlines() if ln.startswith(("small-k", "large-k"))]
    assert len(lines) == 56
    small = [ln for ln in lines if ln[0] == "small-k"]
    assert len(small) == 20 and {ln[1] for ln in small} == {"off", "on"}
    assert all(ln[6] == "register" and ln[7].startswith("topk_") for ln in small), small
    large = [ln for ln in lines if ln[0] == "large-k"]
    assert all(ln[7] == "radix" and ln[8].startswith("topk_") for ln in large), large  # "large-k k=64" is 2 words


def test_without_a_gfx950_it_says_why_and_exits_0():
    assert "no ROCm gfx950 GPU here" in run_script()


def test_check_catches_a_wrong_answer(bench):
    x = torch.randn(3, 100)
    v, i = torch.topk(x, 5)
    assert bench.check(x, 5, True, v, i) == "ok"
    assert bench.check(x, 5, True, v.flip(-1), i) == "MISMATCH"


def test_measuring_path_on_cpu_tensors_reads_who_served_each_call():
    served, declined = measure_on_cpu("topk", """[{"dtype": "fp32", "rows": 4, "N": 300, "k": 8, "deterministic": True},
                                             {"dtype": "bf16", "rows": 2, "N": 2000, "k": 1100}]""", smallest=False)
    assert served["config"].startswith("topk_") and served["check"] == "ok" and served["repro"] == "yes"
    assert served["deterministic"] == "on" and served["group"] == "sweep"
    assert served["flydsl_ms"] == 1.0 and served["torch_ms"] == 2.0 and served["speedup"] == 2.0
    assert declined["note"].startswith("FlyDSL did not serve: PyTorch's kernel: [size] k=1100")
    assert "flydsl_ms" not in declined and "speedup" not in declined and declined["check"] == "ok"


def test_geomeans_per_group_and_mode(bench):
    rows = [{"group": "small-k", "deterministic": "off", "speedup": 4.0},
            {"group": "small-k", "deterministic": "off", "speedup": 1.0},
            {"group": "small-k", "deterministic": "on", "speedup": 3.0},
            {"group": "large-k k=64", "deterministic": "off"}]
    assert bench.group_geomeans(rows) == [("small-k", "off", 2, pytest.approx(2.0)), ("small-k", "on", 1, pytest.approx(3.0)),
                                          ("large-k k=64", "off", 0, None)]


def test_plot_on_synthetic_rows(bench, tmp_path):
    rows = [{"dtype": "fp32", "rows": 64, "N": 4096, "k": 8, "deterministic": "on", "flydsl_ms": 1.0,
             "torch_ms": 2.0}]
    wrote = bench.plot(tmp_path / "p.png", rows)
    assert wrote == (tmp_path / "p.png").exists()
