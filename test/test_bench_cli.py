"""``python -m torch_flydsl bench``: the plan on this (GPU-less) machine for every op, shape
files and their errors, and the report (markdown, geomean, win/tie/loss, CSV, PNG) on
synthetic timings. Nothing here launches a kernel."""

import csv
import json
import math
import subprocess
import sys

import pytest

from torch_flydsl.bench import cli
from torch_flydsl.bench.report import Baseline, compare, markdown, outcome, speedup
from torch_flydsl.bench.shapes import Field, ShapesFileError, load, parse

OPS = ("mm", "scaled_mm", "grouped_mm", "rms_norm", "topk")


def bench(*argv, check=True):
    r = subprocess.run([sys.executable, "-m", "torch_flydsl", "bench", *argv], capture_output=True, text=True,
                       timeout=300)
    if check:
        assert r.returncode == 0, r.stderr[-4000:]
    return r


def suite(op):
    suite, why = cli.load_suite(op)
    assert why is None
    return suite


# -- the plan ------------------------------------------------------------------------------------


@pytest.mark.parametrize("op", OPS)
def test_plan_mode_lists_every_seed_shape_with_its_candidates_and_exits_0(op, tmp_path):
    out = bench(op, "--shapes", "seed", "--out", str(tmp_path / "o")).stdout
    s = suite(op)
    seed = s.seed()
    assert out.startswith("bench: no ROCm gfx950 GPU here (torch.cuda.is_available() is False); nothing launched.")
    assert f"== {op}: {s.title}\n{len(seed)} shapes (seed);" in out
    lines = out.splitlines()
    for i, rec in enumerate(seed, 1):  # one line per shape: its number, label and config count
        got = s.plan(rec, s.options([]))
        want = got if isinstance(got, str) else str(len(got))
        assert any(ln.split()[:1] == [str(i)] and s.label(rec) in ln and want in ln for ln in lines), (i, rec)
    files = [f"{tmp_path / 'o' / op}.csv", f"{tmp_path / 'o' / op}.md", f"{tmp_path / 'o' / op}.png"]
    assert all(f in out for f in files) and "summary.md" not in out
    assert not (tmp_path / "o").exists()  # nothing written, nothing launched


def test_plan_mode_for_all_covers_every_op_and_names_the_summary(tmp_path):
    out = bench("all", "--out", str(tmp_path)).stdout
    assert [ln.split(":")[0] for ln in out.splitlines() if ln.startswith("== ")] == [f"== {op}" for op in OPS]
    assert out.rstrip().endswith(f"would write: {tmp_path / 'summary.md'}")
    assert "FlyDSL x" in out and "ATen, Triton (Inductor)" in out


def test_pass_through_flags_reach_the_suite_options_and_the_plan(tmp_path):
    args = cli_args("mm", "--warmup", "3", "--iters", "7", "--breadth", "baseline", "--no-triton", "--flush-l2")
    mm = suite("mm")
    opts = cli.options_for(mm, args, intree=False)
    assert (opts.warmup, opts.iters, opts.breadth, opts.no_triton, opts.flush_l2, opts.timing) == (
        3, 7, "baseline", True, True, "events")  # a flushed run cannot replay graphs
    text = cli.plan_text(mm, mm.seed()[:2], opts, tmp_path, "seed")
    assert "(3 warm-up + 7 timed calls per column, CUDA events, L2 flushed before each call)" in text
    assert "Triton" not in text and "FlyDSL baseline configs" in text
    rms = cli.options_for(suite("rms_norm"), cli_args("rms_norm", "--flush-l2", "--iters", "9"), intree=True)
    assert (rms.flush, rms.iters, rms.intree, rms.no_triton) == (True, 9, True, False)


def cli_args(*argv):
    from torch_flydsl.__main__ import build_parser

    return build_parser().parse_args(["bench", *argv])


def test_a_family_missing_from_the_registry_has_no_bench_op(monkeypatch, capsys, tmp_path):
    from torch_flydsl import registry
    from torch_flydsl.__main__ import main

    monkeypatch.setattr(registry, "FAMILY_MODULES", [m for m in registry.FAMILY_MODULES if ".topk." not in m])
    registry.families.cache_clear()
    try:
        with pytest.raises(SystemExit) as e:
            main(["bench", "topk", "--out", str(tmp_path)])
        assert e.value.code == 2 and "invalid choice: 'topk'" in capsys.readouterr().err
        assert main(["bench", "all", "--out", str(tmp_path)]) == 0
        out = capsys.readouterr().out
        assert "== rms_norm:" in out and "== topk:" not in out
    finally:
        registry.families.cache_clear()


def test_a_suite_that_does_not_import_is_skipped_in_one_line(monkeypatch, capsys, tmp_path):
    import importlib

    from torch_flydsl.__main__ import main

    real = importlib.import_module

    def broken(name, *a, **kw):
        if name == "torch_flydsl.bench.topk":
            raise ImportError("planted: the topk suite is missing")
        return real(name, *a, **kw)

    monkeypatch.setattr(importlib, "import_module", broken)
    assert main(["bench", "topk", "--out", str(tmp_path)]) == 1  # nothing left to run
    assert capsys.readouterr().out == ("bench: skipping topk: its suite does not import (ImportError: planted: "
                                       "the topk suite is missing)\n")


def test_importing_the_package_or_building_the_parser_imports_no_suite():
    code = ("import sys, torch_flydsl; assert not [m for m in sys.modules if m.startswith('torch_flydsl.bench')]; "
            "from torch_flydsl.__main__ import build_parser; build_parser(); "
            "print(sorted(m for m in sys.modules if m.startswith('torch_flydsl.bench')))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "['torch_flydsl.bench', 'torch_flydsl.bench.cli']"


@pytest.mark.parametrize("op", OPS)
def test_the_help_text_names_every_field_of_each_op(op):
    lines = cli.SHAPES_HELP.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith(f"  {op} "))
    block = [lines[start]]
    for ln in lines[start + 1:]:
        if not ln.startswith("   "):  # the op's continuation lines are indented further
            break
        block.append(ln)
    words = " ".join(block).replace(",", " ").split()
    assert [f.name for f in suite(op).fields if f.name not in words] == []


# -- shape files ---------------------------------------------------------------------------------


FIELDS = (Field("dtype", str, "bf16", ("bf16", "fp16")), Field("rows"), Field("n"))


def test_json_shapes_as_objects_value_lists_or_a_shapes_key(tmp_path):
    path = tmp_path / "s.json"
    path.write_text(json.dumps([{"ROWS": 64, "n": "4097"}, ["fp16", 1, 8192], {"dtype": "fp16", "rows": 2, "n": 3}]))
    assert load(path, FIELDS) == [{"dtype": "bf16", "rows": 64, "n": 4097}, {"dtype": "fp16", "rows": 1, "n": 8192},
                                  {"dtype": "fp16", "rows": 2, "n": 3}]
    assert parse('{"shapes": [[ "bf16", 5, 6 ]]}', FIELDS) == [{"dtype": "bf16", "rows": 5, "n": 6}]


def test_csv_shapes_with_a_header_comments_and_defaults(tmp_path):
    path = tmp_path / "s.csv"
    path.write_text("# rms_norm shapes\nRows, N\n64, 4097\n\n1,32768\n")
    assert load(path, FIELDS) == [{"dtype": "bf16", "rows": 64, "n": 4097}, {"dtype": "bf16", "rows": 1, "n": 32768}]


@pytest.mark.parametrize("text, name, message", [
    ('[{"rows": 64, "n": 4097', "s.json", "s.json: not valid JSON"),
    ('{"rows": 64}', "s.json", "JSON shapes are a list"),
    ('[{"rows": 64}]', "s.json", "s.json: entry 1: missing field 'n'"),
    ('[{"rows": 64, "n": 8, "m": 1}]', "s.json", "entry 1: unknown field 'm'"),
    ('[{"rows": 64, "n": 8}, {"rows": 0, "n": 8}]', "s.json", "entry 2: rows must be a positive integer, got 0"),
    ('[{"rows": 64, "n": 8.5}]', "s.json", "entry 1: n must be a positive integer, got 8.5"),
    ('[{"rows": 64, "n": 8, "dtype": "fp8"}]', "s.json", "entry 1: dtype 'fp8' is not one of bf16, fp16"),
    ('[[1, 2, 3, 4]]', "s.json", "entry 1: 4 values for the 3 fields"),
    ("[]", "s.json", "s.json: no shapes"),
    ("rows,n\n64,4097\n8\n", "s.csv", "s.csv: line 3: 1 values for 2 columns"),
    ("rows,n\n64,x\n", "s.csv", "s.csv: line 2: n must be a positive integer, got 'x'"),
    ("64,4097\n", "s.csv", "s.csv: line 1: the first row must name the fields"),
])
def test_a_malformed_shape_file_is_an_error_naming_the_entry(text, name, message):
    with pytest.raises(ShapesFileError) as e:
        parse(text, FIELDS, name)
    assert message in str(e.value)


def test_the_cli_plans_a_shape_file_and_exits_2_on_a_malformed_one(tmp_path, capsys):
    from torch_flydsl.__main__ import main

    good = tmp_path / "mm.csv"
    good.write_text("M,N,K\n3,4096,4096\n8192,8192,8192\n")
    out = bench("mm", "--shapes", str(good), "--out", str(tmp_path / "o")).stdout
    assert f"2 shapes ({good});" in out and "3x4096x4096" in out and "8192x8192x8192" in out
    assert "1x4096x4096" not in out
    bad = tmp_path / "bad.json"
    bad.write_text('[{"M": 1, "N": 4096}]')
    r = bench("mm", "--shapes", str(bad), check=False)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.strip() == f"python -m torch_flydsl bench: error: {bad}: entry 1: missing field 'K'"
    assert main(["bench", "mm", "--shapes", str(tmp_path / "absent.json")]) == 2
    assert "cannot read it" in capsys.readouterr().err
    assert main(["bench", "all", "--shapes", str(good)]) == 2
    assert "name the op, not all" in capsys.readouterr().err


def test_a_topk_shape_file_sets_the_deterministic_mode_in_json_and_csv(tmp_path):
    fields = suite("topk").fields
    assert parse('[{"rows": 4, "N": 300, "k": 8, "deterministic": true}, [ "bf16", 2, 64, 4 ]]', fields) == [
        {"dtype": "fp32", "rows": 4, "N": 300, "k": 8, "deterministic": True},
        {"dtype": "bf16", "rows": 2, "N": 64, "k": 4, "deterministic": False}]
    csv_recs = parse("rows,N,k,deterministic\n4,300,8,on\n4,300,8,False\n", fields, "s.csv")
    assert [r["deterministic"] for r in csv_recs] == [True, False]
    with pytest.raises(ShapesFileError, match="deterministic must be true or false, got 'maybe'"):
        parse("rows,N,k,deterministic\n4,300,8,maybe\n", fields, "s.csv")
    path = tmp_path / "topk.json"
    path.write_text('[{"rows": 4, "N": 300, "k": 8, "deterministic": true}, {"rows": 4, "N": 300, "k": 4}]')
    out = bench("topk", "--shapes", str(path), "--out", str(tmp_path / "o")).stdout
    assert "2 shapes" in out and "fp32 4x300 k8 det " in out and "fp32 4x300 k4 " in out
    assert "k4 det" not in out


def test_a_grouped_shape_record_is_the_moe_case_it_describes():
    from torch_flydsl.bench import grouped_mm as g

    rec = parse("G,top_k,H,I,proj,tokens,routing\n6,2,256,96,down,40,zipf\n", g.FIELDS)[0]
    case = g.case_of(rec)
    assert (case.groups, case.rows, case.n, case.k, case.routing) == (6, 80, 256, 96, "zipf")
    assert sum(case.sizes()) == 80 and g.BENCH.label(rec) == "custom G6 H256 I96 down t40 zipf"
    seed = g.BENCH.seed()[0]  # a seed record maps back onto the named model
    assert g.case_of(seed) == g.suite()[0] and g.BENCH.label(seed) == "mixtral gate_up t512 balanced"


# -- the report on synthetic timings -------------------------------------------------------------

ATEN = Baseline("aten", "ATen", "aten_ms")
TRITON = Baseline("triton", "Triton (Inductor)", "triton_ms")


def synthetic_rows():
    """FlyDSL at 1 ms; ATen's times make the speedups 2.0 (win), 1.005 and 0.995 (ties inside
    +-1%), 0.985 (a loss just outside it), 0.5 (loss) and one missing; Triton's 1.5, 1.02, -"""
    aten = [2.0, 1.005, 0.995, 0.985, 0.5, None]
    triton = [1.5, 1.02, None, None, None, None]
    return [{"M": 16 * (i + 1), "N": 64, "K": 128, "flydsl_config": f"cfg{i}", "flydsl_ms": 1.0, "aten_ms": a,
             "triton_ms": t, "note": "ATen: failed" if a is None else ""} for i, (a, t) in enumerate(zip(aten, triton))]


def test_outcomes_use_a_one_percent_tie_band():
    assert [outcome(x) for x in (1.0101, 1.0099, 1.0, 0.9901, 0.9899)] == ["win", "tie", "tie", "tie", "loss"]
    assert speedup({"flydsl_ms": 0.5, "aten_ms": 2.0}, "aten_ms") == 4.0
    assert speedup({"flydsl_ms": 0.5}, "aten_ms") is None and speedup({"aten_ms": 1.0}, "aten_ms") is None


def test_geomean_and_win_tie_loss_counts_on_synthetic_timings():
    rows = synthetic_rows()
    c = compare(rows, ATEN)
    assert (c.shapes, c.wins, c.ties, c.losses) == (5, 1, 2, 2)
    assert math.isclose(c.geomean, (2.0 * 1.005 * 0.995 * 0.985 * 0.5) ** (1 / 5))
    t = compare(rows, TRITON)
    assert (t.shapes, t.wins, t.ties, t.losses) == (2, 2, 0, 0) and math.isclose(t.geomean, math.sqrt(1.5 * 1.02))
    assert compare(rows, Baseline("intree", "in-tree FlyDSL", "intree_ms")).line() == (
        "vs in-tree FlyDSL: n/a (no shape has both times)")


def test_markdown_report_on_synthetic_timings():
    rows = synthetic_rows()
    label = suite("mm").label
    md = markdown("torch.mm", rows, [ATEN, TRITON], label)
    g_aten = (2.0 * 1.005 * 0.995 * 0.985 * 0.5) ** (1 / 5)
    lines = md.splitlines()
    assert lines[0] == "# torch.mm"
    assert f"| ATen | 5 | {g_aten:.3f}x | 1 | 2 | 2 |" in lines
    assert f"| Triton (Inductor) | 2 | {math.sqrt(1.5 * 1.02):.3f}x | 2 | 0 | 0 |" in lines
    header = next(ln for ln in lines if ln.startswith("| # |"))
    assert header == ("| # | shape | FlyDSL ms | FlyDSL config | ATen ms | Triton (Inductor) ms | x ATen | "
                      "x Triton (Inductor) | note |")
    assert "| 1 | 16x64x128 | 1 | cfg0 | 2 | 1.5 | 2.000x | 1.500x |  |" in lines
    assert "| 4 | 64x64x128 | 1 | cfg3 | 0.985 |  | 0.985x |  |  |" in lines
    assert "| 6 | 96x64x128 | 1 | cfg5 |  |  |  |  | ATen: failed |" in lines
    assert "in-tree" not in md  # no in-tree column unless asked for


def test_outputs_on_synthetic_timings_csv_markdown_png_and_summary(tmp_path):
    pytest.importorskip("matplotlib")
    mm = suite("mm")
    rows = synthetic_rows()
    rows[0]["intree_ms"] = 4.0  # the in-tree backend's column, where torch ships it
    configs = [{"M": 16, "N": 64, "K": 128, "config": "cfg0", "ms": 1.0, "timed": "graph"}]
    written = cli.write_outputs(mm, rows, configs, tmp_path, intree=True, preamble=["MI355X (synthetic)"])
    assert [p.name for p in written] == ["mm.csv", "mm_configs.csv", "mm.md", "mm.png"]
    with (tmp_path / "mm.csv").open() as f:
        table = list(csv.DictReader(f))
    assert list(table[0])[:len(mm.columns)] == list(mm.columns) and list(table[0])[-1] == "intree_ms"
    assert [r["aten_ms"] for r in table] == ["2.0", "1.005", "0.995", "0.985", "0.5", ""]
    md = (tmp_path / "mm.md").read_text()
    assert "MI355X (synthetic)" in md and "| in-tree FlyDSL | 1 | 4.000x | 1 | 0 | 0 |" in md
    png = (tmp_path / "mm.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 1000
    rms = suite("rms_norm")
    rms_rows = [{"dtype": "bf16", "rows": 1, "n": 4097, "config": "rms_w4_r1_s4", "flydsl_ms": 1.0, "pytorch_ms": 3.0}]
    summary = cli.summary_markdown([(mm, rows, mm.baselines(True)), (rms, rms_rows, rms.baselines(False))])
    g_aten = (2.0 * 1.005 * 0.995 * 0.985 * 0.5) ** (1 / 5)
    assert f"| mm | 6 | {g_aten:.3f}x (1/2/2) | {math.sqrt(1.5 * 1.02):.3f}x (2/0/0) | 4.000x (1/0/0) | [mm.md](mm.md) |" \
        in summary.splitlines()
    assert "| rms_norm | 1 | 3.000x (1/0/0) | n/a | - | [rms_norm.md](rms_norm.md) |" in summary.splitlines()


def test_the_speedup_plot_on_synthetic_timings_writes_a_png(tmp_path):
    pytest.importorskip("matplotlib")
    from torch_flydsl.bench.plots import plot_speedups

    path = tmp_path / "p.png"
    assert plot_speedups(path, "synthetic", synthetic_rows(), [ATEN, TRITON], suite("mm").label) is True
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 1000


def test_the_plot_without_matplotlib_writes_nothing(tmp_path, monkeypatch):
    from torch_flydsl.bench import plots

    monkeypatch.setattr(plots, "matplotlib_pyplot", lambda: None)
    assert plots.plot_speedups(tmp_path / "p.png", "t", synthetic_rows(), [ATEN], suite("mm").label) is False
    assert not (tmp_path / "p.png").exists()


def test_on_a_pretend_mi350_bench_all_writes_each_ops_report_and_the_summary(monkeypatch, tmp_path, capsys):
    """The run path with the device gate passed and each suite's ``measure`` replaced by
    synthetic rows (the suites' own timing needs the GPU)."""
    import dataclasses

    from torch_flydsl.__main__ import main
    from torch_flydsl.bench import timing
    from torch_flydsl.runtime import probe

    real = cli.load_suite
    seen = {}

    def fake_measure(op):
        def measure(records, opts):
            seen[op] = (len(records), opts.warmup, opts.iters, opts.no_triton)
            s = real(op)[0]
            rows = [{**rec, "flydsl_ms": 1.0, s.aten.column: 2.0 if i % 2 else 0.5, "triton_ms": 1.004}
                    for i, rec in enumerate(records)]
            return rows, []
        return measure

    monkeypatch.setattr(cli, "load_suite", lambda op: (dataclasses.replace(real(op)[0], measure=fake_measure(op)),
                                                       None))
    monkeypatch.setattr(timing, "device_gate", lambda: None)
    monkeypatch.setattr(probe, "flydsl_info", lambda: type("I", (), {"usable": True, "reason": None})())
    monkeypatch.setattr(cli, "_environment", lambda: ["pretend MI350"])
    assert main(["bench", "all", "--out", str(tmp_path), "--warmup", "2", "--iters", "3", "--no-vllm"]) == 0
    assert seen == {op: (len(suite(op).seed()), 2, 3, False) for op in OPS}
    out = capsys.readouterr().out
    assert "mm: vs Triton (Inductor): geomean 1.004x over 15 shapes, 0 wins, 15 ties, 0 losses" in out
    names = {p.name for p in tmp_path.iterdir()}
    assert names >= {f"{op}.{ext}" for op in OPS for ext in ("csv", "md", "png")} | {"summary.md", "mm_configs.csv"}
    summary = (tmp_path / "summary.md").read_text().splitlines()
    n = len(suite("topk").seed())  # 150 shapes, the odd ones 2x faster, the even ones 2x slower
    assert f"| topk | {n} | 1.000x ({n // 2}/0/{n // 2}) | 1.004x (0/{n}/0) | - | [topk.md](topk.md) |" in summary
