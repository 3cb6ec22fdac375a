"""The grouped GEMM device benchmark (``torch_flydsl.bench.grouped_mm``, run by
benchmarks/grouped_gemm_device_bench.py) works before it meets an MI350: the script's dry run
and no-GPU exit on this machine, its routings and operands, and its bookkeeping on the CPU with
stand-ins for the GPU calls (the timing itself needs the device)."""

import math
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

SCRIPT = Path(__file__).parents[1] / "benchmarks" / "grouped_gemm_device_bench.py"


@pytest.fixture(scope="module")
def bench():
    from torch_flydsl.bench import grouped_mm

    return grouped_mm


@pytest.fixture
def tiny(bench, monkeypatch):
    """A 4-expert, top-2 model small enough for CPU operands."""
    monkeypatch.setitem(bench.MODELS, "tiny", bench.Moe(4, 2, 128, 48, "a test"))
    return "tiny"


def run_script(*args):
    r = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-4000:]
    return r.stdout


def test_dry_run_lists_every_case_and_the_configs_tried(bench):
    from torch_flydsl.templates.grouped_gemm import CURATED

    out = run_script("--dry-run", "--b-major", "col,row")
    cases = bench.suite()
    assert len(cases) == len(set(cases)) == len(bench.MODELS) * len(bench.PROJECTIONS) * len(bench.TOKENS) * len(bench.ROUTINGS)
    assert {"moe8x2048", "mixtral", "qwen3"} <= set(bench.MODELS) and {1024, 8192} <= set(bench.TOKENS)
    assert out.startswith(f"{len(cases)} cases (torch._grouped_mm MoE forward")
    rows = [r.split() for r in out.splitlines()[3:] if r.split() and r.split()[0].isdigit()]
    listed = [(r[1], r[4], int(r[5]), r[9]) for r in rows]
    assert listed == [(c.model, c.projection, c.tokens, c.routing) for c in cases]
    assert {int(r[2]) for r in rows} == {8, 16, 32, 64, 128}  # expert counts swept
    # gpt-oss's K=2880 is no multiple of 128: one curated config fewer there, for both majors
    n = len(CURATED)
    assert all(r[-2:] == ([str(n - 1)] * 2 if r[1] == "gptoss" else [str(n)] * 2) for r in rows)
    every = ", ".join(c.key() for c in CURATED)
    assert out.count(f"): {every}") == 2 and "grp_m16n64k128_w1x4_s3_g0" not in out.split("gptoss down")[-1]


def test_without_a_rocm_gfx950_gpu_it_says_so_and_exits_0(bench):
    out = run_script("--models", "qwen3", "--routings", "zipf")
    cases = len(bench.PROJECTIONS) * len(bench.TOKENS)
    assert out == ("grouped_gemm_device_bench: no ROCm gfx950 GPU here (torch.cuda.is_available() is False); "
                   f"nothing timed (--dry-run lists the {cases} cases)\n")


@pytest.mark.parametrize("groups", [8, 16, 32, 64, 128])
def test_routings_split_every_row_balanced_skewed_and_with_empty_experts(bench, groups):
    rows = 512 * 8
    balanced, zipf, empty = (bench.group_sizes(r, rows, groups) for r in bench.ROUTINGS)
    assert sum(balanced) == sum(zipf) == sum(empty) == rows
    assert max(balanced) - min(balanced) <= 1
    assert max(zipf) > 3 * rows / groups and min(zipf) < rows / groups / 2  # skewed
    assert zipf == bench.group_sizes("zipf", rows, groups)  # fixed seed
    assert empty.count(0) == groups // 4 and empty[-1] == 0 and min(s for s in empty if s) > 0
    assert bench.offsets(empty).tolist()[-2:] == [rows, rows]  # the last expert: a repeated offset
    with pytest.raises(ValueError):
        bench.group_sizes("uniform", rows, groups)


@pytest.mark.parametrize("b_major", ["col", "row"])
def test_its_operands_pass_the_family_gate(bench, tiny, b_major):
    from torch_flydsl.templates.base import TensorMeta
    from torch_flydsl.templates.grouped_gemm import check_problem

    case = bench.Case(tiny, "gate_up", 40, "zipf")
    problem = bench.problem_for(case, b_major, torch.float16)
    a, b, offs, out = bench.operands(case, b_major, torch.float16)
    assert (a.shape, b.shape, out.shape) == ((80, 128), (4, 128, 96), (80, 96))
    assert offs.dtype == torch.int32 and offs.tolist()[-1] == 80
    assert check_problem(*map(TensorMeta.of, (a, b, offs, out))) == problem
    assert problem.b_major == b_major


def test_bench_case_picks_the_fastest_correct_config_and_reports_speedups(bench, tiny, tmp_path, monkeypatch):
    from torch_flydsl.templates.grouped_gemm import CURATED, reference

    def fake_flydsl(via, cfg, problem, a, b, offs, out):
        def call():  # the exact product; the 16-row config writes garbage
            out.copy_(reference(a, b, offs).to(out.dtype))
            if cfg.block_m == 16:
                out.add_(1e6)
            return out

        # balanced routing: 64x64 tiles fastest; skewed: 128x256 fastest
        call.ms = 0.5 if cfg.block_m == 16 else 1.0 + cfg.block_m / 1000
        if (cfg.block_m, cfg.block_n) == ((64, 64) if problem_routing[0] == "balanced" else (128, 256)):
            call.ms = 0.9
        return call

    def no_triton(a, b, offs):
        raise bench.TritonUnavailable("no Triton template here")

    problem_routing = [None]
    monkeypatch.setattr(bench, "flydsl_fn", fake_flydsl)
    monkeypatch.setattr(bench, "aten_fn", lambda a, b, offs: lambda: reference(a, b, offs).to(a.dtype))
    monkeypatch.setattr(bench, "triton_fn", no_triton)
    monkeypatch.setattr(bench, "time_ms", lambda fn, warmup, iters, flush=None: getattr(fn, "ms", 2.0))
    args = SimpleNamespace(via="launcher", warmup=0, iters=1, no_check=False, breadth="curated", dtype="bf16",
                           no_triton=False)
    rows, config_rows, state = [], [], {}
    for case in bench.suite([tiny], ["zipf", "balanced"], [40])[:2]:  # balanced first, whatever the order asked
        problem_routing[0] = case.routing
        rows.append(bench.bench_case(case, "col", args, None, config_rows, torch.device("cpu"), state))
    balanced, zipf = rows
    assert (balanced["routing"], zipf["routing"]) == ("balanced", "zipf") and len(config_rows) == 2 * len(CURATED)
    assert balanced["flydsl_config"] == "grp_m64n64k64_w2x2_s3_g0" and balanced["flydsl_ms"] == 0.9
    assert zipf["flydsl_config"] == "grp_m128n256k64_w2x4_s3_g0"
    assert zipf["balanced_pick"] == "grp_m64n64k64_w2x2_s3_g0" and math.isclose(zipf["balanced_pick_ms"], 1.064)
    assert zipf["baseline_config"] == "grp_m32n128k64_w1x4_s3_g0" and math.isclose(zipf["baseline_ms"], 1.032)
    assert 0 < zipf["flydsl_err"] == zipf["aten_err"] < bench.ERROR_LIMIT  # bf16 rounding of the exact product
    assert zipf["note"] == "1 config(s) above the error limit"
    assert math.isclose(zipf["x_aten"], 2.0 / 0.9) and "x_triton" not in zipf and "triton_ms" not in zipf
    assert state["triton_off"] == "no Triton template here"
    assert math.isclose(zipf["aten_tflops"], 2 * 80 * 96 * 128 / 2e-3 / 1e12)
    lines = bench.summary(rows)
    assert lines[0] == (f"geometric-mean speedup, all cases (2): vs torch._grouped_mm {2.0 / 0.9:.3f}x, "
                        "vs Triton (Inductor) n/a")
    assert any(line.startswith("geometric-mean speedup, 4 experts (2)") for line in lines)
    bench.write_csv(tmp_path / "r.csv", rows, bench.COLUMNS)
    assert (tmp_path / "r.csv").read_text().splitlines()[0].split(",") == bench.COLUMNS


def test_shares_its_helpers_with_the_scaled_benchmark(bench):
    from torch_flydsl.bench import scaled_mm, timing

    assert bench.time_ms is timing.time_ms is scaled_mm.time_ms and bench.device_gate is timing.device_gate
    assert math.isclose(bench.geomean([2.0, 0.5, None]), 1.0) and bench.tflops(2e12, 1000.0) == 2.0
