"""The MX scaled GEMM device benchmark (``torch_flydsl.bench.scaled_mm``, run by
benchmarks/scaled_gemm_device_bench.py) works before it meets an MI350: the script's dry run and
no-GPU exit on this machine, and its operands and bookkeeping on the CPU with stand-ins for the
two GPU calls (the timing itself needs the device)."""

import math
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

SCRIPT = Path(__file__).parents[1] / "benchmarks" / "scaled_gemm_device_bench.py"


@pytest.fixture(scope="module")
def bench():
    from torch_flydsl.bench import scaled_mm

    return scaled_mm


def run_script(*args):
    r = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-4000:]
    return r.stdout


def test_dry_run_lists_the_18_shapes_and_the_configs_tried(bench):
    from torch_flydsl.templates.scaled_gemm.config import CURATED

    out = run_script("--dry-run")
    assert len(bench.SUITE) == len(set(bench.SUITE)) == 18
    rows = [r for r in map(str.split, out.splitlines()) if len(r) == 7 and all(v.isdigit() for v in r[:4])]
    assert [tuple(map(int, r[1:4])) for r in rows] == list(bench.SUITE)
    from torch_flydsl.bench.scaled_mm import problem_for
    from torch_flydsl.templates.scaled_gemm import configs_for
    from torch_flydsl.templates.gemm.limits import DEEP_STAGES

    # Per shape and format, the curated configs the family offers: all but the deep tiles (only
    # where the grid fits in one round) and, with MXFP8, the MXFP4-only ones.
    for r in rows:
        shape = tuple(map(int, r[1:4]))
        assert r[5:] == [str(len(configs_for(problem_for(fmt, *shape), "curated")[0])) for fmt in ("mxfp8", "mxfp4")]
    from torch_flydsl.templates.scaled_gemm.problem import FORMATS

    fp8 = FORMATS["e4m3"]
    shallow = [c for c in CURATED if c.stages < DEEP_STAGES]  # 8192^3: no deep tile
    assert rows[-1][5:] == [str(sum(c.fits_formats(fp8, fp8) for c in shallow)), str(len(shallow))]
    big = ", ".join(c.key() for c in CURATED if c.stages < DEEP_STAGES)
    assert f"mxfp8 (1024x4096x4096, 2048x4096x4096, " in out and f": {big}\n" in out


def test_without_a_rocm_gfx950_gpu_it_says_so_and_exits_0():
    out = run_script("--formats", "mxfp8")
    assert out.startswith("scaled_gemm_device_bench: no ROCm gfx950 GPU here (") and len(out.splitlines()) == 1


@pytest.mark.parametrize("fmt", ["mxfp8", "mxfp8-e5m2", "mxfp4", "w4a8"])
def test_its_operands_pass_the_family_gate_with_padded_scale_rows(bench, fmt):
    from torch_flydsl.templates.base import TensorMeta
    from torch_flydsl.templates.scaled_gemm import check_problem

    problem = bench.problem_for(fmt, 40, 200, 256)
    a, b, sa, sb, out = bench.operands(problem)
    assert sa.shape == (128, 8) and sb.shape == (256, 8)  # round_up(rows, 128): what ROCm's ATen asks for
    assert check_problem(*map(TensorMeta.of, (a, b, sa, sb, out))) == problem


def test_bench_shape_picks_the_fastest_correct_config_and_reports_speedup(bench, tmp_path, monkeypatch):
    from torch_flydsl.templates.scaled_gemm import reference
    from torch_flydsl.templates.scaled_gemm.config import CURATED

    calls = []
    bad = min(CURATED, key=lambda c: c.block_m * c.block_n)  # the smallest tile: the fastest, and wrong

    def fake_flydsl(via, cfg, problem, a, b, sa, sb, out):
        def call():  # the exact product; the bad config writes garbage
            out.copy_(reference(a, b, sa, sb).to(out.dtype))
            if cfg == bad:
                out.add_(1e6)
            return out

        call.ms = 0.5 if cfg == bad else 1.0 + cfg.block_m / 1000
        calls.append(cfg)
        return call

    monkeypatch.setattr(bench, "flydsl_fn", fake_flydsl)
    monkeypatch.setattr(bench, "aten_fn", lambda v, a, b, sa, sb, out: lambda: reference(a, b, sa, sb).to(out.dtype))
    monkeypatch.setattr(bench, "time_ms", lambda fn, warmup, iters, flush=None: getattr(fn, "ms", 2.0))
    args = SimpleNamespace(via="launcher", aten="v1", warmup=0, iters=1, no_check=False, breadth="curated")
    config_rows = []
    row = bench.bench_shape("mxfp4", 32, 64, 512, args, None, config_rows, torch.device("cpu"))
    assert len(calls) == len(config_rows) >= 2
    assert bad in calls
    fastest = min((c for c in calls if c != bad), key=lambda c: c.block_m)  # the first of equally fast ones
    assert row["flydsl_config"] == fastest.key()  # the fastest correct one
    assert 0 < row["flydsl_err"] == row["aten_err"] < bench.ERROR_LIMIT  # bf16 rounding of the exact product
    assert row["note"] == "1 config(s) above the error limit"
    assert math.isclose(row["speedup"], 2.0 / (1.0 + fastest.block_m / 1000))
    assert math.isclose(row["aten_tflops"], 2 * 32 * 64 * 512 / 2e-3 / 1e12)
    bench.write_csv(tmp_path / "r.csv", [row], bench.COLUMNS)
    assert (tmp_path / "r.csv").read_text().splitlines()[0].split(",") == bench.COLUMNS
    assert math.isclose(bench.geomean([2.0, 0.5, None]), 1.0)


def test_bench_shape_adds_triton_and_in_tree_columns_when_asked_for(bench, monkeypatch):
    from torch_flydsl.bench.baselines import IntreeUnavailable
    from torch_flydsl.templates.scaled_gemm import reference

    def exact(a, b, sa, sb, out):
        def call():
            return reference(a, b, sa, sb).to(out.dtype)

        return call

    def fake_flydsl(via, cfg, problem, a, b, sa, sb, out):
        call = exact(a, b, sa, sb, out)
        call.ms = 1.0
        return call

    def triton(version, a, b, sa, sb, out):
        call = exact(a, b, sa, sb, out)
        call.ms = 1.25
        return call

    def no_intree(a, b, sa, sb, out):
        raise IntreeUnavailable("the in-tree FlyDSL backend offered no choice for _scaled_mm_v2 here")

    monkeypatch.setattr(bench, "flydsl_fn", fake_flydsl)
    monkeypatch.setattr(bench, "aten_fn", lambda v, a, b, sa, sb, out: exact(a, b, sa, sb, out))
    monkeypatch.setattr(bench, "triton_fn", triton)
    monkeypatch.setattr(bench, "intree_fn", no_intree)
    monkeypatch.setattr(bench, "time_ms", lambda fn, warmup, iters, flush=None: getattr(fn, "ms", 2.0))
    args = SimpleNamespace(via="launcher", aten="v1", warmup=0, iters=1, no_check=False, breadth="baseline",
                           no_triton=False, intree=True)
    row = bench.bench_shape("mxfp8", 32, 64, 256, args, None, [], torch.device("cpu"))
    assert row["triton_ms"] == 1.25 and 0 < row["triton_err"] < bench.ERROR_LIMIT and row["aten_ms"] == 2.0
    assert "intree_ms" not in row
    assert row["note"] == "in-tree: IntreeUnavailable: the in-tree FlyDSL backend offered no choice for _scaled_mm_v2 here"
