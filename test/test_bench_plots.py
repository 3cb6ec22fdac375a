"""The speedup plots of ``python -m torch_flydsl bench`` and of each suite's own script
(``plots.plot_speedups``), drawn from synthetic timings of every family's seed shapes (no GPU):
the PNG stays readable in size, its axes are labelled, its x ticks sit at speedups, and its
legend prints each geomean exactly as the markdown report does (three decimals: a 0.995x geomean
is 0.995x, never 1.00x) with the wins/ties/losses."""

import math
import re
import struct

import pytest

from torch_flydsl.bench import cli, plots
from torch_flydsl.bench.report import compare, markdown, speedup_text

pytest.importorskip("matplotlib")

OPS = ("mm", "scaled_mm", "grouped_mm", "topk", "rms_norm")
# each baseline's geomean speedup in the synthetic rows; ATen's is the one a 2-decimal plot
# would round to 1.00x (the report prints 0.995x)
TARGETS = {"aten": 0.995, "triton": 1.37, "intree": 0.62, "vllm": 1.08}
MAX_PX = 2000


def suite(op):
    s, why = cli.load_suite(op)
    assert why is None
    return s


def factors(n: int, j: int) -> list[float]:
    """``n`` speedup factors whose product is 1: pairs f, 1/f (every third pair 1, a tie)."""
    out = []
    for q in range(n // 2):
        f = 1.0 if q % 3 == 0 else math.exp(0.45 * math.sin(1.3 * q + 2.1 * j) + 0.05 * (q % 2))
        out += [f, 1 / f]
    return out + [1.0] * (n % 2)


def synthetic_rows(s, baselines=None) -> list[dict]:
    """The suite's seed shapes with made-up times: each baseline's geomean is its ``TARGETS``."""
    baselines = s.baselines(True, True) if baselines is None else baselines
    rows = [dict(rec, flydsl_ms=0.01 * (1 + i % 7), flydsl_hit_ms=0.012 * (1 + i % 7), speedup=None)
            for i, rec in enumerate(s.seed())]
    for j, b in enumerate(baselines):
        for r, f in zip(rows, factors(len(rows), j)):
            r[b.column] = r[b.ours] * TARGETS[b.key] * f
    for r in rows:  # what a suite's own script rows hold besides the times
        r["speedup"] = r[s.aten.column] / r["flydsl_ms"]
        r.setdefault("b_major", "col")
    return rows


def png_size(path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])


@pytest.fixture
def figures(monkeypatch):
    """Every figure ``plots`` saves, kept for a look at its axes and legend."""
    got = []
    save = plots._save

    def keep(plt, fig, path):
        got.append(fig)
        save(plt, fig, path)

    monkeypatch.setattr(plots, "_save", keep)
    return got


def check_figure(fig, path, rows, baselines, md=None):
    width, height = png_size(path)
    assert width <= MAX_PX and height <= MAX_PX, (width, height)
    assert width >= 600 and height >= 300
    axes = fig.axes
    assert axes and axes[0].get_ylabel() and all(ax.get_xlabel() for ax in axes)
    assert all(ax.get_xscale() == "log" for ax in axes)
    lo, hi = axes[0].get_xlim()
    ticks = [t.get_text() for t in axes[0].get_xticklabels()]
    assert "1x" in ticks and len(ticks) >= 3, ticks
    assert all(re.fullmatch(r"[0-9.]+x", t) for t in ticks)
    # every panel as tall: the same number of rows
    assert len({ax.get_ylim() for ax in axes}) == 1
    labels = [t.get_text() for ax in axes for t in ax.get_yticklabels()]
    assert len(labels) == len(rows) and labels[0].startswith("#1 ")
    texts = [t.get_text() for t in fig.legends[0].get_texts()] + [fig.get_suptitle()]
    for b in baselines:
        c = compare(rows, b)
        want = f"vs {b.label}: geomean {speedup_text(c.geomean)}, W/T/L {c.tally()} of {c.shapes}"
        assert want in texts, (want, texts)
        if md is not None:  # the same number the markdown report prints
            assert f"| {b.label} | {c.shapes} | {speedup_text(c.geomean)} | {c.wins} | {c.ties} | {c.losses} |" in md
    return texts


def test_the_geomean_prints_with_the_reports_three_decimals():
    assert speedup_text(0.995) == "0.995x" and speedup_text(1.0) == "1.000x" and speedup_text(None) == ""


@pytest.mark.parametrize("op", OPS)
def test_the_reports_plot_for_every_op(op, tmp_path, figures):
    s = suite(op)
    rows = synthetic_rows(s)
    written = cli.write_outputs(s, rows, [], tmp_path, intree=True, vllm=True)
    png = tmp_path / f"{op}.png"
    assert png in written and len(figures) == 1
    md = (tmp_path / f"{op}.md").read_text()
    texts = check_figure(figures[0], png, rows, s.baselines(True, True), md)
    aten = next(t for t in texts if t.startswith("vs ATen:"))
    assert "geomean 0.995x" in aten and "1.00x" not in aten and "0.99x" not in aten
    assert "| ATen | " in md and f"| {len(rows)} | 0.995x |" in md


@pytest.mark.parametrize("op", OPS)
def test_two_baselines_as_a_plain_run_has(op, tmp_path, figures):
    s = suite(op)
    rows = synthetic_rows(s, s.baselines(False))
    cli.write_outputs(s, rows, [], tmp_path, intree=False)
    check_figure(figures[0], tmp_path / f"{op}.png", rows, s.baselines(False))


def test_many_shapes_split_into_panels_within_the_size_cap(tmp_path, figures):
    s = suite("topk")
    rows = synthetic_rows(s) * 6  # 900 shapes, four baselines
    path = tmp_path / "p.png"
    assert plots.plot_speedups(path, s.title, rows, s.baselines(True, True), s.label)
    check_figure(figures[0], path, rows, s.baselines(True, True))
    assert len(figures[0].axes) == plots.MAX_PANELS


def test_one_shape_and_no_comparable_times_still_draw(tmp_path, figures):
    s = suite("rms_norm")
    rows = [{"dtype": "bf16", "rows": 1, "n": 4096, "flydsl_ms": 1.0}]
    path = tmp_path / "p.png"
    assert plots.plot_speedups(path, s.title, rows, s.baselines(False), s.label)
    texts = [t.get_text() for t in figures[0].legends[0].get_texts()]
    assert "vs ATen: n/a (no shape has both times)" in texts
    width, height = png_size(path)
    assert width <= MAX_PX and height <= MAX_PX


def _own_plot(op, path, rows):
    from torch_flydsl.bench import grouped_mm, mm, rms_norm, scaled_mm, topk

    if op == "mm":
        return mm.plot(path, [mm.finish_row(dict(r)) for r in rows])
    if op == "scaled_mm":
        return scaled_mm.plot(path, rows, scaled_mm.FORMATS)
    if op == "grouped_mm":
        return grouped_mm.plot(path, rows)
    if op == "topk":
        return topk.plot(path, rows)
    return rms_norm.plot(rows, path)


@pytest.mark.parametrize("op", OPS)
def test_each_suites_own_plot_goes_through_plot_speedups(op, tmp_path, figures):
    s = suite(op)
    rows = synthetic_rows(s, s.baselines(False))  # ATen and Triton, as its script times them
    path = tmp_path / "own.png"
    assert _own_plot(op, path, rows) is True
    baselines = s.baselines(False)
    texts = check_figure(figures[0], path, rows, baselines)
    assert s.title in figures[0].get_suptitle().replace("\n", " ")
    assert not any(t.startswith(("vs in-tree", "vs vLLM")) for t in texts)  # no column, no entry
    if op == "mm":  # and the faster of ATen and Triton per shape
        assert any(t.startswith("vs the faster of ATen and Triton: geomean ") for t in texts)


def test_own_plot_of_grouped_mm_names_b_major_when_rows_hold_both(tmp_path, figures):
    from torch_flydsl.bench import grouped_mm

    s = suite("grouped_mm")
    rows = synthetic_rows(s, s.baselines(False))[:8]
    rows = rows + [dict(r, b_major="row") for r in rows]
    assert grouped_mm.plot(tmp_path / "p.png", rows)
    labels = [t.get_text() for ax in figures[0].axes for t in ax.get_yticklabels()]
    assert labels[0].endswith(" B col") and labels[-1].endswith(" B row")


def test_ticks_are_speedups_and_do_not_crowd():
    assert plots.x_ticks(0.45, 2.2, 1000) == [0.5, 0.6, 0.7, 0.8, 0.9, 1, 1.1, 1.25, 1.5, 1.75, 2]
    assert plots.x_ticks(0.45, 2.2, 150) == [0.5, 1, 2]
    assert plots.x_ticks(0.9, 1.12, 400) == [0.9, 1, 1.1]
