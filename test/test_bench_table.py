"""``python -m torch_flydsl bench OP --table FILE`` picks dispatch-table winners against the kernel
a table hit would replace (``torch_flydsl.bench.picks``): ties keep the incumbent, timings under
the roofline are rejected, neighbouring winning M merge into ranges, every shape without an
entry says why (printed and in the CSV), grouped_mm writes MoE entries; and the vLLM column
(``torch_flydsl.bench.vllm_columns``) is named in the plan per shape where vLLM imports, absent
with the reason where it does not. All on synthetic rows or stand-ins: nothing launches a kernel.

Stand-ins: ``PLUMBING_STANDIN_VLLM`` is a package named ``vllm`` written here (none of vLLM's
code: the op name and signature of vLLM 0.33's ``rocm_unquantized_gemm``, bodies of its own),
used only to show that the plan finds and names the column; ``*_plumbing_standin`` callables
replace vLLM's GPU kernels where a bench's bookkeeping is checked on the CPU. The real vLLM
0.33.0 (``.venv-vllm``, scripts/vllm_hook_test.sh) is checked by the last test where it exists.
"""

from __future__ import annotations

import csv
import json
import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from torch_flydsl import dispatch_table as dt
from torch_flydsl.bench import cli, picks
from torch_flydsl.bench import grouped_mm as gmm
from torch_flydsl.bench import mm
from torch_flydsl.bench import scaled_mm as smm

ROOT = Path(__file__).parents[1]
CFG = "m16n64k128_w1x4_s3_g0_sk4"  # dense configs the table accepts (explain mm ... lists them)
CFG2 = "m32n64k128_w2x2_s3_g0"
BIG = "m128n128k32_w2x2_s4_g0"
MX = "mx_m32n64k256_w1x2_s3_g0"
GRP = "grp_m64n64k64_w2x2_s3_g0"
BF = torch.bfloat16


def opts(vllm=True, flush=False):
    return SimpleNamespace(vllm=vllm, flush_l2=flush)


def mm_row(m, ours, vllm=None, aten=None, triton=None, n=4096, k=4096, config=CFG, kernel="hipBLASLt (F.linear)"):
    row = {"M": m, "N": n, "K": k, "flydsl_config": config, "flydsl_ms": ours, "note": ""}
    for key, v in (("vllm_ms", vllm), ("aten_ms", aten), ("triton_ms", triton)):
        if v is not None:
            row[key] = v
    if vllm is not None:
        row["vllm_kernel"] = kernel
    return row


def judged(rows, o=None):
    return cli.table_picks(mm.BENCH, rows, opts() if o is None else o)


# -- the rules, one shape at a time -----------------------------------------------------------------


def test_a_win_over_vllm_outside_the_band_is_an_entry_with_and_without_bias():
    (p,) = judged([mm_row(16, 0.010, vllm=0.012, aten=0.011)])
    assert [(e.bias, e.m, e.config, e.us, e.source) for e in p.entries] == [(False, 16, CFG, 10.0, "bench"),
                                                                             (True, 16, CFG, 10.0, "bench")]
    assert p.reason == "entry: wins 1.200x over vLLM (hipBLASLt (F.linear), expected)"


@pytest.mark.parametrize("theirs", [0.0100, 0.01009, 0.00991])
def test_ties_keep_vllms_kernel_whichever_side_is_nominally_faster(theirs):
    (p,) = judged([mm_row(16, 0.010, vllm=theirs, aten=0.02)])
    assert not p.entries and p.verdict.decided
    assert p.reason.startswith("no entry: tie with vLLM (hipBLASLt (F.linear), expected) (")
    assert p.reason.endswith("within +-1%): vLLM (hipBLASLt (F.linear), expected)'s kernel is kept (ties keep "
                             "the incumbent)")


def test_a_loss_to_vllm_or_to_aten_is_no_entry_with_the_ratio():
    lost, aten = judged([mm_row(16, 0.010, vllm=0.009, aten=0.02), mm_row(32, 0.010, vllm=0.012, aten=0.008)])
    assert not lost.entries and lost.reason == "no entry: vLLM (hipBLASLt (F.linear), expected) is faster (0.900x)"
    assert not aten.entries and aten.reason == ("no entry: beats vLLM (hipBLASLt (F.linear), expected) (1.200x) "
                                                "but loses to ATen (0.800x)")


def test_with_vllm_the_vllm_column_is_the_baseline_even_where_aten_or_triton_are_faster():
    (p,) = judged([mm_row(16, 0.010, vllm=0.012, aten=0.0100, triton=0.005)])
    assert p.entries and "over vLLM" in p.reason  # a hit replaces vLLM's kernel; ATen ties, which is no loss


def test_without_vllm_the_fastest_timed_column_is_the_baseline():
    win, lose = judged([mm_row(16, 0.010, aten=0.013, triton=0.012), mm_row(32, 0.010, aten=0.013, triton=0.0099)],
                       opts(vllm=False))
    assert win.entries and win.reason == "entry: wins 1.200x over Triton"
    assert not lose.entries and lose.reason.startswith("no entry: tie with Triton (0.990x")


def test_shapes_without_times_say_why_and_stay_undecided():
    no_fly = {"M": 8, "N": 4096, "K": 4096, "note": "declined: K too small"}
    no_vllm = mm_row(16, 0.010, aten=0.02)
    a, b = judged([no_fly, no_vllm])
    assert a.reason == "no entry: FlyDSL has no time (declined: K too small)" and not a.verdict.decided
    assert b.reason == "no entry: vLLM's column has no time (not timed)" and not b.verdict.decided


# -- the roofline ---------------------------------------------------------------------------------------


def test_the_roofline_table_holds_the_mi355x_figures_and_says_they_are_assumed():
    assert picks.PEAKS.hbm_bytes_per_s == 8e12
    assert picks.PEAKS.matrix_flops_per_s == {"bf16": 2.5e15, "fp16": 2.5e15, "fp8": 5e15, "fp4": 10e15}
    assert "MI355X" in picks.PEAKS_SOURCE and "assumed" in picks.PEAKS_SOURCE and picks.ROOFLINE_TOLERANCE == 0.9


def test_roofline_compute_and_memory_bounds():
    us, bound = picks.roofline_us(picks.dense_work(8192, 8192, 8192))
    assert math.isclose(us, 2 * 8192**3 / 2.5e15 * 1e6) and bound.startswith("compute:")
    big = picks.dense_work(1, 16384, 16384)  # a 512 MiB weight: beyond the Infinity Cache, from HBM
    us, bound = picks.roofline_us(big)
    assert math.isclose(us, big.bytes / 8e12 * 1e6) and bound.endswith("TB/s HBM")
    small = picks.dense_work(1, 4096, 4096)  # 32 MiB: warm back-to-back calls may find it in the cache
    assert picks.roofline_us(small)[1].endswith("Infinity Cache (warm)")
    assert math.isclose(picks.roofline_us(small, warm=False)[0], small.bytes / 8e12 * 1e6)
    mx = picks.dense_work(8192, 8192, 8192, "mxfp4")
    assert mx.operands == "fp4" and mx.bytes == 2 * 8192 * 8192 / 2 + 2 * 8192 * 256 + 2 * 8192 * 8192


def test_a_time_under_the_roofline_is_rejected_as_bogus_with_the_reason():
    compute = 2 * 8192**3 / 2.5e15 * 1e3  # ms
    fly, base = judged([mm_row(8192, compute * 0.5, vllm=compute * 3, aten=compute * 3, n=8192, k=8192),
                        mm_row(8192, compute * 1.5, vllm=compute * 0.2, aten=compute * 3, n=8192, k=8192)])
    assert not fly.entries and fly.verdict.decided
    assert fly.reason.startswith(f"no entry: bogus timing: FlyDSL {CFG}'s ")
    assert "is under 0.9 x the roofline" in fly.reason and "compute: 1100 GFLOP at 2.5 PFLOP/s" in fly.reason
    assert not base.entries and "bogus timing: vLLM" in base.reason  # a bogus baseline decides nothing either
    hbm = picks.dense_work(1, 16384, 16384).bytes / 8e12 * 1e3
    (cold,) = judged([mm_row(1, hbm * 0.8, vllm=hbm * 2, aten=hbm * 2, n=16384, k=16384)])
    assert "TB/s HBM" in cold.reason and not cold.entries
    (ok,) = judged([mm_row(1, hbm * 0.95, vllm=hbm * 2, aten=hbm * 2, n=16384, k=16384)])
    assert ok.entries  # within the tolerance


# -- M ranges ---------------------------------------------------------------------------------------------


def test_neighbouring_winning_m_with_one_config_merge_into_a_range(tmp_path):
    rows = [mm_row(16, 0.010, vllm=0.012), mm_row(32, 0.010, vllm=0.012), mm_row(64, 0.010, vllm=0.012),
            mm_row(128, 0.010, vllm=0.012, config=CFG2), mm_row(256, 0.010, vllm=0.008),
            mm_row(512, 0.030, vllm=0.036), mm_row(1024, 0.030, vllm=0.036),
            mm_row(16, 0.010, vllm=0.012, n=1024)]  # another weight: its own shapes
    got = judged(rows)
    assert [e.m for e in got[0].entries] == [(16, 64), (16, 64)] and all(e.us is None for e in got[0].entries)
    assert "M 16-64 is one entry (3 neighbouring measured M all win with " in got[0].reason
    assert not got[1].entries and got[1].reason.endswith(f"served by M 16-64 is one entry (3 neighbouring measured M "
                                                         f"all win with {CFG})")
    assert [e.m for e in got[3].entries] == [128, 128]  # another config: not merged
    assert not got[4].entries and [e.m for e in got[5].entries] == [(512, 1024)] * 2  # the loss breaks the run
    assert [e.m for e in got[7].entries] == [16, 16]
    path = tmp_path / "t.json"
    said = cli.write_table(rows, path, "mm", opts(), got)
    assert said.startswith("7 of 8 shape(s) won by FlyDSL") and "(with and without bias): 8 entries" in said
    t = dt.load(path)
    look = lambda m, n=4096: t.lookup("mm", BF, "nt", False, m, n, 4096)  # noqa: E731
    assert [look(m) for m in (16, 40, 64, 100, 128, 256, 700)] == [CFG, CFG, CFG, None, CFG2, None, CFG]
    assert t.lookup("mm", BF, "nt", True, 40, 4096, 4096) == CFG and look(32, 1024) is None


def test_a_range_never_spans_a_tie_or_a_change_of_vllms_kernel():
    got = judged([mm_row(1, 0.010, vllm=0.012, kernel="wvSplitK"), mm_row(16, 0.010, vllm=0.012),
                  mm_row(32, 0.010, vllm=0.0100), mm_row(64, 0.010, vllm=0.012)])
    assert [[e.m for e in p.entries[:1]] for p in got] == [[1], [16], [], [64]]


def test_rewriting_a_table_replaces_the_entries_of_decided_shapes_only(tmp_path):
    def entry(m, config=BIG, bias=False, n=4096):
        return {"op": "mm", "dtype": "bfloat16", "layout": "nt", "bias": bias, "m": m, "n": n, "k": 4096,
                "config": config}

    path = tmp_path / "t.json"
    path.write_text(json.dumps({"format": dt.FORMAT, "version": dt.VERSION, "entries": [
        entry(256), entry(256, bias=True), entry([1, 1000], CFG2), entry(8), entry(256, n=1024)]}))
    rows = [mm_row(256, 0.010, vllm=0.008), mm_row(512, 0.010, vllm=0.012), {"M": 8, "N": 4096, "K": 4096}]
    said = cli.write_table(rows, path, "mm", opts())
    assert said.startswith("1 of 3 shape(s)") and "3 old entries of the decided shapes replaced" in said
    t = dt.load(path)
    look = lambda m, n=4096: t.lookup("mm", BF, "nt", False, m, n, 4096)  # noqa: E731
    assert look(256) is None and t.lookup("mm", BF, "nt", True, 256, 4096, 4096) is None  # lost now: dropped
    assert look(512) == CFG and look(100) == look(257) == look(1000) == CFG2  # the old range, cut around 256, 512
    assert look(8) == BIG and look(256, 1024) == BIG  # not decided here (no time; another weight): kept


# -- the CLI on a pretend MI350: every shape's line, the CSV's table column ------------------------------


@pytest.fixture
def pretend_mi350(monkeypatch):
    import dataclasses

    from torch_flydsl.bench import timing
    from torch_flydsl.runtime import probe

    real = cli.load_suite
    rows_for: dict = {}

    def fake(op):
        suite = real(op)[0]
        return dataclasses.replace(suite, measure=lambda recs, o: (rows_for[op](recs, o), [])), None

    monkeypatch.setattr(cli, "load_suite", fake)
    monkeypatch.setattr(timing, "device_gate", lambda: None)
    monkeypatch.setattr(probe, "flydsl_info", lambda: type("I", (), {"usable": True, "reason": None})())
    monkeypatch.setattr(cli, "_environment", lambda: ["pretend MI350"])
    return rows_for


def test_bench_mm_table_prints_a_reason_for_every_shape_and_writes_it_to_the_csv(pretend_mi350, tmp_path, capsys):
    from torch_flydsl.__main__ import main

    times = {1: (0.010, 0.020), 16: (0.010, 0.0100), 32: (0.010, 0.005)}
    pretend_mi350["mm"] = lambda recs, o: [{**r, "flydsl_config": CFG, "flydsl_ms": times[r["M"]][0],
                                            "aten_ms": times[r["M"]][1], "note": ""} for r in recs]
    shapes = tmp_path / "s.json"
    shapes.write_text(json.dumps([[1, 4096, 4096], [16, 4096, 4096], [32, 4096, 4096]]))
    table = tmp_path / "t.json"
    assert main(["bench", "mm", "--shapes", str(shapes), "--out", str(tmp_path / "o"), "--table", str(table),
                 "--no-vllm", "--no-triton"]) == 0
    out = capsys.readouterr().out
    assert "mm: no vLLM column: --no-vllm" in out
    assert "mm: 1x4096x4096: entry: wins 2.000x over ATen" in out
    assert "mm: 16x4096x4096: no entry: tie with ATen (1.000x, within +-1%): ATen's kernel is kept" in out
    assert "mm: 32x4096x4096: no entry: ATen is faster (0.500x)" in out
    assert f"1 of 3 shape(s) won by FlyDSL written to the dispatch table {table}" in out
    with open(tmp_path / "o" / "mm.csv") as f:
        cells = [r["table"] for r in csv.DictReader(f)]
    assert cells[0].startswith("entry: ") and all(c.startswith("no entry: ") for c in cells[1:])
    assert dt.load(table).lookup("mm", BF, "nt", False, 1, 4096, 4096) == CFG


def test_recorded_fp16_and_other_layout_mm_shapes_are_named_with_the_reason(tmp_path):
    from torch_flydsl.deploy.spec import Shape, write_shapes

    spec = write_shapes(tmp_path / "rec.json", [
        Shape.of("mm", dtype="bfloat16", layout="nt", bias=False, m=16, n=4096, k=4096),
        Shape.of("mm", dtype="float16", layout="nt", bias=False, m=8, n=512, k=512),
        Shape.of("mm", dtype="float16", layout="nt", bias=True, m=8, n=512, k=512),
        Shape.of("mm", dtype="bfloat16", layout="nn", bias=False, m=4, n=256, k=512)])
    r = subprocess.run([sys.executable, "-m", "torch_flydsl", "bench", "mm", "--shapes", str(spec)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert ("bench mm: 1 recorded mm shape(s) not timed (8x512x512): float16: bench mm times bfloat16 only"
            in r.stdout), r.stdout
    assert "bench mm: 1 recorded mm shape(s) not timed (4x256x512): layout nn: bench mm times x @ W.T" in r.stdout
    assert "1 shapes" in r.stdout


# -- scaled_mm ----------------------------------------------------------------------------------------------------


def mx_row(m, gemm, quant=None, vllm=None, aten=None, k=256, fmt="mxfp8"):
    row = {"format": fmt, "M": m, "N": 64, "K": k, "flydsl_config": MX, "flydsl_ms": gemm, "note": ""}
    if quant is not None:
        row.update(vllm_quant_ms=quant, flydsl_hit_ms=gemm + quant)
    for key, v in (("vllm_ms", vllm), ("aten_ms", aten)):
        if v is not None:
            row[key] = v
    return row


def test_mxfp8_is_judged_as_the_hit_runs_it_vllms_quantizer_plus_flydsl_against_vllms_kernel():
    win, quant_eats_it, k_off, fp4, fp4_untimed = cli.table_picks(smm.BENCH, [
        mx_row(32, 0.010, quant=0.002, vllm=0.015, aten=0.011),
        mx_row(64, 0.010, quant=0.004, vllm=0.0141, aten=0.011),
        mx_row(32, 0.010, quant=0.002, vllm=0.015, aten=0.011, k=160),
        mx_row(32, 0.010, quant=0.002, vllm=0.018, aten=0.013, fmt="mxfp4"),
        mx_row(64, 0.010, aten=0.012, fmt="mxfp4")], opts())
    assert win.entries and win.reason == "entry: wins 1.250x over vLLM's MXFP8 linear kernel"
    assert quant_eats_it.reason.startswith("no entry: tie with vLLM's MXFP8 linear kernel (1.007x")
    assert k_off.reason.startswith("no entry: K=160 is not a multiple of 128: the MXFP8 re-route keeps such layers")
    # MXFP4 is judged the same way, against vLLM's own W4A4 kernel (AITER's where installed)
    assert fp4.entries and fp4.reason == "entry: wins 1.500x over vLLM's MXFP4 (W4A4) linear kernel"
    assert not fp4_untimed.entries and fp4_untimed.reason.startswith("no entry: vLLM's columns have no time")


def scaled_row_with_exact_plumbing_standins(monkeypatch, fmt: str, untimed_ms: float) -> dict:
    """``bench_shape`` of one ``fmt`` 32x64x256 row with vLLM columns on, FlyDSL and ATen stood in
    by the float64 reference (1 ms each) and any other timed call taking ``untimed_ms``."""
    from torch_flydsl.templates.scaled_gemm import reference

    def exact(a, b, sa, sb, out):
        call = lambda: reference(a, b, sa, sb).to(out.dtype)  # noqa: E731
        call.ms = 1.0
        return call

    monkeypatch.setattr(smm, "flydsl_fn", lambda via, cfg, p, a, b, sa, sb, out: exact(a, b, sa, sb, out))
    monkeypatch.setattr(smm, "aten_fn", lambda v, a, b, sa, sb, out: exact(a, b, sa, sb, out))
    monkeypatch.setattr(smm, "time_ms", lambda fn, warmup, iters, flush=None: getattr(fn, "ms", untimed_ms))
    args = SimpleNamespace(via="launcher", aten="v1", warmup=0, iters=1, no_check=False, breadth="baseline",
                           vllm=True)
    return smm.bench_shape(fmt, 32, 64, 256, args, None, [], torch.device("cpu"))


def test_the_scaled_bench_times_vllms_columns_with_plumbing_standins(monkeypatch):
    from torch_flydsl.bench import vllm_columns
    from torch_flydsl.templates.scaled_gemm import reference

    def quantize_plumbing_standin(x):  # per 32 values: E8M0 scale 2^(floor(log2 amax) - 8), e4m3 values
        m, k = x.shape
        blocks = x.float().reshape(m, k // 32, 32)
        exp = (torch.floor(torch.log2(blocks.abs().amax(-1).clamp_min(1e-30))) - 8).clamp(-127, 127)
        q = (blocks / torch.exp2(exp)[..., None]).clamp(-448, 448).to(torch.float8_e4m3fn)
        return q.reshape(m, k), (exp + 127).to(torch.uint8)

    def mxfp8_linear_plumbing_standin(x, weight, weight_scale):
        def call():
            q, s = quantize_plumbing_standin(x)
            return reference(q, weight.t(), s.view(torch.float8_e8m0fnu),
                             weight_scale.view(torch.float8_e8m0fnu)).to(x.dtype)

        call.ms = 3.0
        return call

    monkeypatch.setattr(vllm_columns, "mxfp8_quantize", lambda: quantize_plumbing_standin)
    monkeypatch.setattr(vllm_columns, "mxfp8_fn", mxfp8_linear_plumbing_standin)
    row = scaled_row_with_exact_plumbing_standins(monkeypatch, "mxfp8", untimed_ms=0.5)
    assert (row["vllm_ms"], row["vllm_quant_ms"], row["flydsl_hit_ms"]) == (3.0, 0.5, 1.5)
    assert 0 < row["vllm_err"] < smm.ERROR_LIMIT and row["note"] == ""
    vs = smm.BENCH.vllm
    assert (vs.column, vs.ours) == ("vllm_ms", "flydsl_hit_ms")
    from torch_flydsl.bench.report import compare

    assert compare([row], vs).geomean == 2.0  # vLLM's kernel over the quantizer plus FlyDSL


def test_the_scaled_bench_times_vllms_mxfp4_columns_with_plumbing_standins(monkeypatch):
    """MXFP4 rows get the vLLM column too: vLLM's W4A4 kernel on the row's packed weight, and the
    re-route's quantizer (the plugin's torch version of vLLM's rule stands in for the Triton one)."""
    from torch_flydsl.bench import vllm_columns
    from torch_flydsl.templates.scaled_gemm import reference
    from torch_flydsl.templates.scaled_gemm.quantize import mxfp4_quantize

    fp4, e8m0 = torch.float4_e2m1fn_x2, torch.float8_e8m0fnu
    seen = []

    def mxfp4_linear_plumbing_standin(x, weight, weight_scale):
        seen.append((weight.dtype, tuple(weight.shape), tuple(weight_scale.shape)))

        def call():
            q, s = mxfp4_quantize(x)
            return reference(q.view(fp4), weight.view(fp4).t(), s.view(e8m0), weight_scale.view(e8m0)).to(x.dtype)

        call.ms = 3.0
        return call

    monkeypatch.setattr(vllm_columns, "mxfp4_quantize", lambda: mxfp4_quantize)
    monkeypatch.setattr(vllm_columns, "mxfp4_fn", mxfp4_linear_plumbing_standin)
    row = scaled_row_with_exact_plumbing_standins(monkeypatch, "mxfp4", untimed_ms=0.25)
    assert seen == [(torch.uint8, (64, 128), (64, 8))]  # packed E2M1 [N, K/2], E8M0 [N, K/32]
    assert (row["vllm_ms"], row["vllm_quant_ms"], row["flydsl_hit_ms"]) == (3.0, 0.25, 1.25)
    assert 0 < row["vllm_err"] < smm.ERROR_LIMIT and row["note"] == ""


def test_the_dense_bench_times_the_vllm_column_with_a_plumbing_standin(monkeypatch):
    from torch_flydsl.bench import vllm_columns

    def timed(ms, fn):
        fn.ms = ms
        return fn

    monkeypatch.setattr(mm, "flydsl_fn", lambda via, cfg, p, a, b, out: timed(1.0, lambda: torch.mm(a, b, out=out)))
    monkeypatch.setattr(mm, "aten_fn", lambda a, b, out: timed(2.0, lambda: torch.mm(a, b, out=out)))
    monkeypatch.setattr(mm, "vllm_fn", lambda a, b: timed(1.5, lambda: torch.nn.functional.linear(a, b.t())))
    monkeypatch.setattr(vllm_columns, "expected_dense", lambda m, n, k: "wvSplitKrc")
    monkeypatch.setattr(mm, "graph_times_ms", lambda fns, warmup, iters: [fn.ms for fn in fns])
    args = SimpleNamespace(via="launcher", timing="graph", warmup=0, iters=1, no_check=False, no_triton=True,
                           breadth="baseline", vllm=True)
    row = mm.bench_shape(16, 64, 256, args, None, [], torch.device("cpu"))
    assert (row["vllm_ms"], row["vllm_kernel"], row["x_vllm"]) == (1.5, "wvSplitKrc", 1.5)
    (p,) = cli.table_picks(mm.BENCH, [row], opts())
    assert p.reason == "entry: wins 1.500x over vLLM (wvSplitKrc, expected)" and p.regime == "wvSplitKrc"


# -- grouped_mm ----------------------------------------------------------------------------------------------------


def g_row(proj, routing, fly, base, tokens=512, pick=None, b_major="col", aten=None, **kw):
    n, k = (2 * 1024, 2048) if proj == "gate_up" else (2048, 1024)
    row = {"model": "olmoe", "G": 64, "top_k": 8, "H": 2048, "I": 1024, "proj": proj, "tokens": tokens,
           "T": tokens * 8, "N": n, "K": k, "routing": routing, "b_major": b_major, "dtype": "bf16", "empty": 0,
           "flydsl_config": GRP, "flydsl_ms": fly, "vllm_ms": base, "note": "", **kw}
    if pick is not None:
        row.update(balanced_pick=GRP, balanced_pick_ms=pick)
    if aten is not None:
        row["aten_ms"] = aten
    return row


def grouped(rows, o=None):
    return cli.table_picks(gmm.BENCH, rows, opts() if o is None else o)


def test_a_moe_pair_that_wins_on_its_summed_times_gets_both_grouped_entries(tmp_path):
    rows = [g_row("gate_up", "balanced", 0.10, 0.13), g_row("gate_up", "zipf", 0.30, 0.12, pick=0.095),
            g_row("down", "balanced", 0.06, 0.05), g_row("down", "zipf", 0.20, 0.05, pick=0.06)]
    up, down = grouped(rows)
    assert up.rows == tuple(rows[:2]) and up.label == "olmoe gate_up t512 balanced/zipf"
    assert [(e.op, e.dtype, e.bias, e.m, e.n, e.k, e.groups, e.config) for e in up.entries + down.entries] == [
        ("grouped_mm", "bfloat16", False, 4096, 2048, 2048, 64, GRP),
        ("grouped_mm", "bfloat16", False, 4096, 2048, 1024, 64, GRP)]
    assert up.reason == down.reason == ("entry: wins under every routing over vLLM's fused-MoE Triton kernel (both "
                                        f"GEMMs) (balanced {0.18 / 0.16:.3f}x, zipf {0.17 / 0.155:.3f}x)")
    path = tmp_path / "t.json"
    cli.write_table(rows, path, "grouped_mm", opts())
    t = dt.load(path)
    assert t.lookup("grouped_mm", BF, "nt", False, 4096, 2048, 2048, 64) == GRP
    assert t.lookup("grouped_mm", BF, "nt", False, 4096, 2048, 1024, 64) == GRP


def test_grouped_rules_one_losing_routing_the_pair_a_lone_gemm_and_skip_reasons():
    # zipf's balanced pick ties vLLM on the pair's sum: neither GEMM gets an entry
    up, down = grouped([g_row("gate_up", "balanced", 0.10, 0.13), g_row("gate_up", "zipf", 0.30, 0.12, pick=0.12),
                        g_row("down", "balanced", 0.06, 0.05), g_row("down", "zipf", 0.20, 0.06, pick=0.06)])
    assert not up.entries and not down.entries
    assert up.reason.startswith("no entry: zipf routing: tie with vLLM's fused-MoE Triton kernel (both GEMMs)")
    (alone,) = grouped([g_row("down", "balanced", 0.05, 0.06)])
    assert alone.entries and alone.reason.endswith("its partner GEMM (gate_up) was not measured: the MoE re-route "
                                                   "serves a call only when the table names both")
    (row_major,) = grouped([g_row("down", "balanced", 0.05, 0.06, b_major="row")])
    assert row_major.reason.startswith("no entry: B row-major ([G, K, N] experts)")
    (no_balanced,) = grouped([g_row("down", "zipf", 0.05, 0.06), g_row("down", "empty", 0.05, 0.06)])
    assert no_balanced.reason.startswith("no entry: measured under several routings but not balanced")
    (aiter,) = grouped([g_row("down", "balanced", 0.05, 0.06, vllm_aiter_moe=True)])
    assert aiter.reason.startswith("no entry: AITER's fused MoE is on")
    partner_off, = [p for p in grouped([g_row("down", "balanced", 0.05, 0.06),
                                        g_row("gate_up", "balanced", 0.05, 0.06, b_major="col", flydsl_ms=None)])
                    if p.rows[0]["proj"] == "down"]
    assert partner_off.reason.startswith("no entry: its partner GEMM (gate_up) gets no entry (FlyDSL has no time")
    (fast,) = grouped([g_row("down", "balanced", 1e-6, 0.06)])
    assert "bogus timing: FlyDSL" in fast.reason and not fast.entries


def test_grouped_without_vllm_judges_against_the_fastest_of_aten_and_triton():
    (p,) = grouped([{**g_row("down", "balanced", 0.05, None, aten=0.07), "triton_ms": 0.06}], opts(vllm=False))
    assert p.entries and p.reason.startswith("entry: wins under every routing over Triton (balanced 1.200x)")


def test_the_grouped_bench_times_the_vllm_column_with_a_plumbing_standin(monkeypatch):
    from torch_flydsl.bench import vllm_columns
    from torch_flydsl.templates.grouped_gemm import reference

    monkeypatch.setitem(gmm.MODELS, "tiny", gmm.Moe(4, 2, 128, 48, "a test"))

    def exact(a, b, offs):
        call = lambda: reference(a, b, offs).to(a.dtype)  # noqa: E731
        call.ms = 1.0
        return call

    def moe_gemm_plumbing_standin(a, weight, sizes, tokens, top_k, hidden, inter):
        assert weight.is_contiguous() and weight.shape[2] == a.shape[1]  # [G, N, K], as vLLM stores experts
        offs = gmm.offsets(sizes)
        call = lambda: reference(a, weight.transpose(1, 2), offs).to(a.dtype)  # noqa: E731
        call.ms = 1.25
        return call

    monkeypatch.setattr(gmm, "flydsl_fn", lambda via, cfg, p, a, b, offs, out: exact(a, b, offs))
    monkeypatch.setattr(gmm, "aten_fn", exact)
    monkeypatch.setattr(gmm, "time_ms", lambda fn, warmup, iters, flush=None: getattr(fn, "ms", 2.0))
    monkeypatch.setattr(vllm_columns, "moe_gemm_fn", moe_gemm_plumbing_standin)
    monkeypatch.setattr(vllm_columns, "aiter_moe_on", lambda values=None: False)
    args = SimpleNamespace(via="launcher", warmup=0, iters=1, no_check=False, breadth="baseline", dtype="bf16",
                           no_triton=True, vllm=True)
    case = gmm.suite(["tiny"], ["balanced"], [40])[0]
    row = gmm.bench_case(case, "col", args, None, [], torch.device("cpu"), {})
    assert (row["vllm_ms"], row["x_vllm"], row["dtype"], row["vllm_aiter_moe"]) == (1.25, 1.25, "bf16", False)
    assert 0 < row["vllm_err"] < gmm.ERROR_LIMIT
    row = gmm.bench_case(case, "row", args, None, [], torch.device("cpu"), {})
    assert "vllm_ms" not in row and "vLLM: not timed for row-major B" in row["note"]


# -- the plan: the vLLM column per shape ------------------------------------------------------------------------

PLUMBING_STANDIN_VLLM = {
    "vllm/__init__.py": '"""A plumbing stand-in named vllm (torch_flydsl tests): not vLLM."""\n'
                        '__version__ = "0.0+plumbing-standin"\n',
    "vllm/envs.py": textwrap.dedent('''
        import os

        def _flag(name, default):
            return os.getenv(name, default).lower() in ("1", "true")

        VLLM_ROCM_USE_AITER = _flag("VLLM_ROCM_USE_AITER", "0")
        VLLM_ROCM_USE_AITER_LINEAR = _flag("VLLM_ROCM_USE_AITER_LINEAR", "1")
        VLLM_ROCM_USE_AITER_TRITON_GEMM = _flag("VLLM_ROCM_USE_AITER_TRITON_GEMM", "1")
        VLLM_ROCM_USE_AITER_MOE = _flag("VLLM_ROCM_USE_AITER_MOE", "1")
        VLLM_ROCM_USE_SKINNY_GEMM = _flag("VLLM_ROCM_USE_SKINNY_GEMM", "1")
        VLLM_BATCH_INVARIANT = _flag("VLLM_BATCH_INVARIANT", "0")
        '''),
    "vllm/model_executor/__init__.py": "",
    "vllm/model_executor/layers/__init__.py": "",
    "vllm/model_executor/layers/utils.py": textwrap.dedent('''
        from typing import Optional

        import torch


        @torch.library.custom_op("vllm::rocm_unquantized_gemm", mutates_args=())
        def rocm_unquantized_gemm_impl(x: torch.Tensor, weight: torch.Tensor,
                                       bias: Optional[torch.Tensor] = None) -> torch.Tensor:
            return torch.nn.functional.linear(x, weight, bias)
        '''),
}


def plan(*argv, python=sys.executable, pythonpath=None, env=None):
    e = {**os.environ, **(env or {})}
    if pythonpath:
        e["PYTHONPATH"] = os.pathsep.join([str(pythonpath), e.get("PYTHONPATH", "")])
    r = subprocess.run([str(python), "-m", "torch_flydsl", "bench", *argv], capture_output=True, text=True,
                       timeout=300, env=e, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-3000:]
    return r.stdout


@pytest.fixture(scope="module")
def standin_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("plumbing_standin_vllm")
    for rel, text in PLUMBING_STANDIN_VLLM.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def shapes_file(tmp_path) -> Path:
    p = tmp_path / "mm.json"
    p.write_text(json.dumps([[1, 4096, 4096], [16, 1024, 1024], [4096, 4096, 4096]]))
    return p


def test_the_plan_names_the_vllm_column_per_shape_with_a_plumbing_standin_op(standin_root, tmp_path):
    out = plan("mm", "--shapes", str(shapes_file(tmp_path)), "--table", str(tmp_path / "t.json"),
               pythonpath=standin_root, env={"VLLM_ROCM_USE_AITER": "1"})
    assert "vLLM column: what vLLM 0.0+plumbing-standin itself runs for the call a table hit would replace: " \
           "torch.ops.vllm.rocm_unquantized_gemm(x, weight)" in out
    assert ("VLLM_ROCM_USE_AITER=True (set to '1'), VLLM_ROCM_USE_AITER_LINEAR=True (unset)" in out
            and "aiter not installed: AITER linear kernels off" in out), out
    lines = out.splitlines()
    row = lambda label: next(ln for ln in lines if f" {label} " in ln)  # noqa: E731
    assert row("1x4096x4096").rstrip().endswith("ATen, Triton (Inductor), vLLM (expected: wvSplitK)")
    # the stand-in has no wvsplitkrc_dispatch: the plan says it cannot tell
    assert row("16x1024x1024").rstrip().endswith("vLLM (expected: wvSplitKrc if its CU budget fits (this vLLM "
                                                 "cannot say))")
    assert row("4096x4096x4096").rstrip().endswith("vLLM (expected: hipBLASLt (F.linear))")
    assert "--table " in out and "beats the vLLM column (and never losing to ATen) by more than 1%" in out
    (tmp_path / "mx.json").write_text(json.dumps([{"M": 32, "N": 4096, "K": 4096}]))
    scaled = plan("scaled_mm", "--shapes", str(tmp_path / "mx.json"), pythonpath=standin_root)
    assert "no vLLM column: vllm.model_executor.kernels.linear.mxfp8.rocm_native does not import" in scaled


def test_without_vllm_the_plan_says_why_there_is_no_column(tmp_path):
    if cli.vllm_status(mm.BENCH, SimpleNamespace(no_vllm=False)) is None:
        pytest.skip("vLLM imports in this Python")
    out = plan("mm", "--shapes", str(shapes_file(tmp_path)))
    assert "no vLLM column: vllm is not installed in this Python" in out and "vLLM (expected" not in out
    out = plan("grouped_mm", "--shapes", "seed", "--no-vllm")
    assert "no vLLM column: --no-vllm" in out


VLLM_VENV = ROOT / ".venv-vllm" / "bin" / "python"


@pytest.mark.skipif(not VLLM_VENV.exists(), reason="no .venv-vllm (scripts/vllm_hook_test.sh creates it)")
def test_the_plan_with_real_vllm_0_33_names_the_kernel_vllm_would_pick(tmp_path):
    r = subprocess.run([str(VLLM_VENV), "-c", "import importlib.metadata as m; print(m.version('vllm'))"],
                       capture_output=True, text=True, timeout=120)
    if not r.stdout.startswith("0.33"):
        pytest.skip(f"{VLLM_VENV} holds vLLM {r.stdout.strip() or '(none)'}, not 0.33")
    out = plan("mm", "--shapes", str(shapes_file(tmp_path)), python=VLLM_VENV)
    assert "vLLM column: what vLLM 0.33.0 itself runs" in out and "VLLM_ROCM_USE_SKINNY_GEMM=True (unset)" in out
    lines = out.splitlines()
    row = lambda label: next(ln for ln in lines if f" {label} " in ln)  # noqa: E731
    assert row("1x4096x4096").rstrip().endswith("vLLM (expected: wvSplitK)")
    assert row("16x1024x1024").rstrip().endswith("vLLM (expected: wvSplitKrc)")  # vLLM's own CU-budget check
    assert row("4096x4096x4096").rstrip().endswith("vLLM (expected: hipBLASLt (F.linear))")


def test_the_summary_gets_a_vllm_column_when_a_suite_timed_one():
    rms = cli.load_suite("rms_norm")[0]
    rows = [mm_row(16, 0.010, vllm=0.012, aten=0.011)]
    text = cli.summary_markdown([(mm.BENCH, rows, mm.BENCH.baselines(False, True)), (rms, [], rms.baselines(False))])
    lines = text.splitlines()
    assert "| op | shapes | vs ATen | vs Triton (Inductor) | vs in-tree FlyDSL | vs vLLM | report |" in lines
    assert "| mm | 1 | 1.100x (1/0/0) | n/a | - | 1.200x (1/0/0) | [mm.md](mm.md) |" in lines
    assert "| rms_norm | 0 | n/a | n/a | - | - | [rms_norm.md](rms_norm.md) |" in lines


VLLM_CONTRACT = textwrap.dedent('''
    import inspect, importlib, torch
    from torch_flydsl.bench import vllm_columns as vc
    assert [vc.status(op) for op in ("mm", "scaled_mm", "grouped_mm")] == [None] * 3
    print(torch.ops.vllm.rocm_unquantized_gemm.default._schema)
    # the MXFP8 column's layer and kernel, built from vLLM 0.33's classes on a platform made to
    # answer as a gfx950 (construction only) and its Triton GEMM replaced by a plumbing stand-in
    native = importlib.import_module(vc.MX_NATIVE)
    from vllm.platforms import PlatformEnum, current_platform
    current_platform._enum = PlatformEnum.ROCM
    current_platform.is_rocm = lambda: True
    current_platform.supports_mx = lambda: True
    calls = []
    def dot_scaled_plumbing_standin(x, w, s):
        calls.append((tuple(x.shape), tuple(w.shape), tuple(s.shape), str(s.dtype)))
        return x.new_zeros(x.shape[0], w.shape[0])
    native._mxfp8_dot_scaled_linear = dot_scaled_plumbing_standin
    w = (torch.randn(64, 256) * 16).clamp(-448, 448).to(torch.float8_e4m3fn)
    s = torch.randint(120, 135, (64, 8), dtype=torch.uint8)
    out = vc.mxfp8_fn(torch.randn(32, 256).to(torch.bfloat16), w, s)()
    print("mxfp8", tuple(out.shape), calls)
    fm = importlib.import_module(vc.FUSED_MOE)
    inspect.signature(fm.invoke_fused_moe_triton_kernel).bind(
        "a", "w", "out", None, None, None, "ids", "experts", "padded", False, 1, {}, compute_type="bf16",
        use_fp8_w8a8=False, use_int8_w8a8=False, use_int8_w8a16=False, use_int4_w4a16=False,
        per_channel_quant=False, block_shape=None, B_bias=None)
    inspect.signature(fm._prepare_expert_assignment).bind("topk_ids", {}, 40, 1, 8, None)
    inspect.signature(fm.try_get_optimal_moe_config).bind((8, 96, 128), (8, 128, 48), 2, None, 40)
    print("moe calls bind")
    ''')


@pytest.mark.skipif(not VLLM_VENV.exists(), reason="no .venv-vllm (scripts/vllm_hook_test.sh creates it)")
def test_the_vllm_columns_calls_fit_vllm_0_33s_classes_and_signatures():
    """What can be checked of the vLLM columns without a GPU, against the real vLLM 0.33.0: the
    op's schema, the MXFP8 layer built and applied through vLLM's own kernel class (its Triton GEMM
    stood in), and the fused-MoE calls' arguments binding to vLLM's functions."""
    r = subprocess.run([str(VLLM_VENV), "-c", VLLM_CONTRACT], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "vllm::rocm_unquantized_gemm(Tensor x, Tensor weight, Tensor? bias=None) -> Tensor" in r.stdout
    assert "mxfp8 (32, 64) [((32, 256), (64, 256), (64, 8), 'torch.uint8')]" in r.stdout
    assert "moe calls bind" in r.stdout


def test_bench_grouped_mm_reads_a_recorded_spec_pairing_each_moe_calls_two_gemms(capsys):
    """What the vLLM MoE route records (both GEMMs of a call, with top_k) becomes gate_up and down
    cases of the MoE; a shape without its partner is left out with the reason."""
    from torch_flydsl.bench import grouped_mm as gmm
    from torch_flydsl.deploy.spec import Shape

    g, h, i, top_k, tokens = 8, 1024, 512, 2, 64
    rows = tokens * top_k
    shapes = [Shape.of("grouped_mm", dtype="bfloat16", m=rows, n=2 * i, k=h, groups=g, b_major="col", top_k=top_k),
              Shape.of("grouped_mm", dtype="bfloat16", m=rows, n=h, k=i, groups=g, b_major="col", top_k=top_k),
              Shape.of("grouped_mm", dtype="bfloat16", m=96, n=4096, k=2048, groups=g, b_major="col")]
    recs = gmm.BENCH.from_spec(shapes)
    assert recs == [{"model": "recorded", "G": g, "top_k": top_k, "H": h, "I": i, "proj": p, "tokens": tokens,
                     "routing": "balanced"} for p in ("gate_up", "down")]
    cases = [gmm.case_of(r) for r in recs]
    assert [(c.rows, c.n, c.k, c.groups) for c in cases] == [(rows, 2 * i, h, g), (rows, h, i, g)]
    assert "m=96 n=4096 k=2048 groups=8 bfloat16: no W13/W2 partner" in capsys.readouterr().err
    assert isinstance(gmm.BENCH.from_spec(shapes[2:]), str)  # no pair at all: the reason, not an empty run
