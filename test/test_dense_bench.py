"""The dense GEMM device benchmark (``torch_flydsl.bench.mm``, run by
benchmarks/dense_gemm_device_bench.py) works before it meets an MI350 (the script's plan on this
machine, its operands, its bookkeeping with stand-ins for the GPU calls, the summary and the
plot on synthetic timings), and benchmarks/isa_report.py's MI355X model does the arithmetic it
states (no compile: the model is plain arithmetic over a config and its residency)."""

import importlib.util
import math
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

BENCHMARKS = Path(__file__).parents[1] / "benchmarks"
SCRIPT = BENCHMARKS / "dense_gemm_device_bench.py"


def load(name):
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod  # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def bench():
    from torch_flydsl.bench import mm

    return mm


@pytest.fixture(scope="module")
def report():
    yield load("isa_report")
    sys.modules.pop("isa_report", None)


def run_script(*args):
    r = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-4000:]
    return r.stdout


def plan_rows(out):
    return [r for r in map(str.split, out.splitlines()) if len(r) == 6 and all(v.isdigit() for v in r[:4])]


def test_dry_run_lists_the_15_shapes_and_the_configs_each_would_time(bench):
    out = run_script("--dry-run")
    assert len(bench.SUITE) == len(set(bench.SUITE)) == 15
    assert {k for _, _, k in bench.SUITE} >= {4096, 14336, 11008, 8192} and min(m for m, _, _ in bench.SUITE) == 1
    rows = plan_rows(out)
    assert [tuple(map(int, r[1:4])) for r in rows] == list(bench.SUITE)
    for r in rows:  # the count is what the family offers for that shape
        assert int(r[5]) == len(bench.candidates(bench.problem_for(*map(int, r[1:4])))) > 0
    assert out.startswith("15 shapes (bf16 NT: x[M,K] @ W[N,K].T, bf16 out)")
    assert "CUDA graphs of 50 calls, median of 5 replays interleaved over the columns" in out and "ATen torch.mm" in out and "TRITON as its only GEMM backend" in out


def test_without_a_rocm_gfx950_gpu_it_says_so_prints_the_plan_and_exits_0():
    out = run_script("--shapes", "1,15", "--timing", "events", "--flush-l2", "--no-triton")
    first, rest = out.split("\n", 1)
    assert first == ("dense_gemm_device_bench: no ROCm gfx950 GPU here (torch.cuda.is_available() is False); "
                     "nothing timed. The plan:")
    assert [tuple(map(int, r[1:4])) for r in plan_rows(rest)] == [(1, 4096, 4096), (8192, 8192, 8192)]
    assert "events around 50 calls, L2 flushed before each" in rest and "Triton: off" in rest


@pytest.mark.parametrize("argv", [["--flush-l2"], ["--shapes", "0,3"], ["--shapes", "16"]])
def test_bad_arguments_are_refused(bench, argv):
    with pytest.raises(SystemExit):
        bench.parse_args(argv)


def test_operands_are_nt_and_pass_the_family_gate(bench):
    from torch_flydsl.templates.base import TensorMeta
    from torch_flydsl.templates.dense_gemm import check_problem

    a, b, out = bench.operands(40, 72, 96)
    assert a.shape == (40, 96) and a.is_contiguous()
    assert b.shape == (96, 72) and b.stride() == (1, 96)  # W[N, K].t(): column-major B
    assert out.shape == (40, 72) and out.dtype == a.dtype == b.dtype == torch.bfloat16
    problem = check_problem(*map(TensorMeta.of, (a, b, out)))
    assert problem == bench.problem_for(40, 72, 96)
    assert (problem.a_major, problem.b_major) == ("row", "col")


@pytest.fixture
def stand_ins(bench, monkeypatch):
    """FlyDSL, ATen and Triton replaced by CPU calls with preset times: the m16 configs write
    garbage, FlyDSL's time grows with block_m, ATen takes 2.0 ms, Triton 1.5 ms."""
    calls = []

    def fake_flydsl(via, cfg, problem, a, b, out):
        def call():
            out.copy_((a.double() @ b.double()).to(out.dtype))
            if cfg.block_m == 16:
                out.add_(1e3)
            return out

        call.ms = 1.0 + cfg.block_m / 1000
        calls.append(cfg.key())
        return call

    def timed(ms, fn):
        fn.ms = ms
        return fn

    monkeypatch.setattr(bench, "flydsl_fn", fake_flydsl)
    monkeypatch.setattr(bench, "aten_fn", lambda a, b, out: timed(2.0, lambda: torch.mm(a, b, out=out)))
    monkeypatch.setattr(bench, "triton_fn", lambda a, b: timed(1.5, lambda: torch.mm(a, b)))
    monkeypatch.setattr(bench, "graph_times_ms", lambda fns, warmup, iters: [fn.ms for fn in fns])
    monkeypatch.setattr(bench, "time_ms", lambda fn, warmup, iters, flush=None: fn.ms)
    return calls


def args(**kw):
    base = dict(via="launcher", timing="graph", warmup=0, iters=1, no_check=False, no_triton=False, breadth="curated")
    return SimpleNamespace(**{**base, **kw})


def test_bench_shape_picks_the_fastest_correct_config_and_computes_speedups(bench, stand_ins, tmp_path):
    config_rows = []
    row = bench.bench_shape(16, 64, 256, args(), None, config_rows, torch.device("cpu"))
    offered = bench.candidates(bench.problem_for(16, 64, 256))
    assert stand_ins == [c.key() for c in offered] and len(config_rows) == len(offered)
    correct = [c for c in offered if c.block_m != 16]
    fastest = min(correct, key=lambda c: c.block_m)
    assert row["flydsl_config"] == fastest.key() and row["flydsl_ms"] == 1.0 + fastest.block_m / 1000
    wrong = len(offered) - len(correct)
    assert row["note"] == (f"{wrong} config(s) above the error limit" if wrong else "")
    assert all(e["timed"] == "graph" for e in config_rows if "ms" in e)
    assert math.isclose(row["x_aten"], 2.0 / row["flydsl_ms"]) and math.isclose(row["x_triton"], 1.5 / row["flydsl_ms"])
    assert row["x_best"] == row["x_triton"]  # Triton is the faster of the two here
    assert math.isclose(row["aten_tflops"], 2 * 16 * 64 * 256 / 2e-3 / 1e12)
    assert 0 < row["flydsl_err"] < bench.ERROR_LIMIT  # bf16 rounding of the exact product
    bench.write_csv(tmp_path / "r.csv", [row], bench.COLUMNS)
    assert (tmp_path / "r.csv").read_text().splitlines()[0].split(",") == bench.COLUMNS


def test_a_graph_capture_failure_is_timed_with_events_and_noted(bench, stand_ins, monkeypatch):
    def no_capture(fns, warmup, iters):
        return [RuntimeError("operation not permitted when stream is capturing") for _ in fns]

    monkeypatch.setattr(bench, "graph_times_ms", no_capture)
    row = bench.bench_shape(64, 64, 128, args(no_triton=True), None, [], torch.device("cpu"))
    assert row["aten_ms"] == 2.0 and "triton_ms" not in row and row["x_best"] == row["x_aten"]
    assert "ATen: timed with events (graph capture failed: RuntimeError: operation not permitted" in row["note"]
    assert "FlyDSL: timed with events" in row["note"]


def test_triton_decomposed_or_unavailable_is_noted_per_shape(bench, stand_ins, monkeypatch):
    def decomposed(a, b):
        def call():
            return torch.mm(a, b)

        call.ms, call.template = 1.0, False
        return call

    monkeypatch.setattr(bench, "triton_fn", decomposed)
    row = bench.bench_shape(64, 64, 128, args(), None, [], torch.device("cpu"))
    assert row["triton_ms"] == 1.0 and "Triton: Inductor decomposed the mm (no mm template)" in row["note"]

    def unavailable(a, b):
        raise bench.TritonUnavailable("Inductor's compiled mm runs no Triton kernel here")

    monkeypatch.setattr(bench, "triton_fn", unavailable)
    row = bench.bench_shape(64, 64, 128, args(), None, [], torch.device("cpu"))
    assert "triton_ms" not in row and row["x_best"] == row["x_aten"]
    assert "Triton: TritonUnavailable: Inductor's compiled mm runs no Triton kernel here" in row["note"]


def test_the_in_tree_column_is_timed_only_when_asked_for_and_noted_when_unavailable(bench, stand_ins, monkeypatch):
    from torch_flydsl.bench.baselines import IntreeUnavailable

    def intree(a, b):
        def call():
            return torch.mm(a, b)

        call.ms = 0.8
        return call

    monkeypatch.setattr(bench, "intree_fn", intree)
    row = bench.bench_shape(64, 64, 128, args(), None, [], torch.device("cpu"))
    assert "intree_ms" not in row and "x_intree" not in row  # the script's default: no in-tree column
    row = bench.bench_shape(64, 64, 128, args(intree=True), None, [], torch.device("cpu"))
    assert row["intree_ms"] == 0.8 and math.isclose(row["x_intree"], 0.8 / row["flydsl_ms"])
    assert 0 < row["intree_err"] < bench.ERROR_LIMIT

    def absent(a, b):
        raise IntreeUnavailable("the plugin, not the in-tree backend, served mm here")

    monkeypatch.setattr(bench, "intree_fn", absent)
    row = bench.bench_shape(64, 64, 128, args(intree=True), None, [], torch.device("cpu"))
    assert "intree_ms" not in row
    assert "in-tree: IntreeUnavailable: the plugin, not the in-tree backend, served mm here" in row["note"]


def test_summary_counts_wins_ties_and_losses_against_the_faster_of_aten_and_triton(bench):
    rows = [bench.finish_row({"M": 1, "N": 1, "K": 1, "flydsl_ms": f, "aten_ms": a, "triton_ms": t})
            for f, a, t in ((1.0, 2.0, 1.5), (1.0, 1.005, 3.0), (2.0, 1.0, None), (1.0, None, None))]
    assert [r.get("x_best") for r in rows] == [1.5, 1.005, 0.5, None]
    lines = bench.summary(rows)
    assert lines[-1] == "vs the faster of the two: 1 wins, 1 ties, 1 losses (ties within +-1%)"
    g = (1.5 * 1.005 * 0.5) ** (1 / 3)
    assert lines[2] == f"geometric-mean speedup vs the faster of ATen and Triton per shape: {g:.3f}x over 3 shapes"


def synthetic_rows(bench):
    return [bench.finish_row({"M": m, "N": n, "K": k, "flydsl_config": "m16n64k128_w1x4_s3_g0",
                              "flydsl_ms": 0.01 * (i + 1), "aten_ms": 0.012 * (i + 1),
                              "triton_ms": None if i % 4 == 0 else 0.011 * (i + 1)})
            for i, (m, n, k) in enumerate(bench.SUITE)]


def test_plot_without_matplotlib_says_no(bench, monkeypatch, tmp_path):
    monkeypatch.setattr("torch_flydsl.bench.plots.matplotlib_pyplot", lambda: None)
    assert bench.plot(tmp_path / "p.png", synthetic_rows(bench)) is False
    assert not (tmp_path / "p.png").exists()


def test_plot_on_synthetic_timings_writes_a_png(bench, tmp_path):
    pytest.importorskip("matplotlib")
    path = tmp_path / "dense_gemm_bench.png"
    assert bench.plot(path, synthetic_rows(bench)) is True
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# -- isa_report's MI355X model ------------------------------------------------------------------


def cfg(bm, bn, bk, waves, split_k=1):
    key = f"m{bm}n{bn}k{bk}_w{waves}_sk{split_k}"
    return SimpleNamespace(block_m=bm, block_n=bn, block_k=bk, waves=waves, split_k=split_k, key=lambda: key)


def test_model_peak_is_the_mfma_roof_on_a_large_square_gemm(report):
    p = report.predict(cfg(256, 256, 32, 8), 1, 8192, 8192, 8192)
    peak = 256 * 4 * (16 * 16 * 32 * 2 / 16) * 2.4e9 / 1e12  # TFLOP/s: 1024 SIMDs, one MFMA per 16 cycles
    assert math.isclose(p.tflops, peak) and round(peak) == 2517
    assert p.grid == 1024 and p.rounds == 4 and p.tail == 1.0
    assert p.compute_us > p.l2_us > p.hbm_us  # 256x256 tiles leave L2 slack


def test_model_small_tiles_lose_on_large_shapes_through_l2_traffic(report):
    small = report.predict(cfg(16, 64, 128, 4), 2, 4096, 4096, 4096)
    big = report.predict(cfg(128, 128, 32, 4), 2, 4096, 4096, 4096)
    assert small.compute_us == big.compute_us  # same MFMAs
    # every 16x64 workgroup reads (16+64) x K: 4096/16 x 4096/64 of them
    assert math.isclose(small.l2_us, 256 * 64 * 80 * 4096 * 2 / (256 * 64 * 2.4e9) * 1e6)
    assert small.predicted_us > big.predicted_us
    assert report.best_of([small, big]) is big


def test_model_decode_tail_quantisation_and_split_k_workspace(report):
    m, n, k = 1, 4096, 4096
    plain = report.predict(cfg(16, 64, 128, 4), 2, m, n, k)
    hbm_us = 2 * (m * k + n * k + m * n) / 8e12 * 1e6
    assert plain.grid == 64 and plain.tail == 4.0 and math.isclose(plain.hbm_us, hbm_us)
    assert math.isclose(plain.predicted_us, 4 * hbm_us)  # HBM-bound, 3/4 of the CUs idle
    split = report.predict(cfg(16, 64, 128, 4, split_k=4), 2, m, n, k)
    assert split.grid == 256 and split.tail == 1.0
    assert math.isclose(split.hbm_us, hbm_us + 2 * 4 * 4 * m * n / 8e12 * 1e6)  # fp32 partials out and back
    assert split.predicted_us < plain.predicted_us


def test_model_counts_idle_simds_when_a_cu_holds_too_few_waves(report):
    two_waves = report.predict(cfg(64, 64, 64, 2), 1, 4096, 4096, 4096)  # 1 workgroup of 2 waves per CU
    four_waves = report.predict(cfg(64, 64, 64, 4), 1, 4096, 4096, 4096)
    assert math.isclose(two_waves.compute_us, 2 * four_waves.compute_us)


def test_model_assumptions_say_model_not_measurement(report):
    assert report.ASSUMPTIONS.startswith("MODEL, NOT MEASUREMENT: MI355X as 256 CUs x 4 SIMDs at 2.4 GHz, 8 TB/s HBM")
    for term in ("compute:", "HBM:", "L2:", "tail quantisation:", "not modelled:"):
        assert term in report.ASSUMPTIONS
