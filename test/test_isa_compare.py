"""benchmarks/isa_compare.py's arithmetic on hand-made candidates (no compile): what each family
launches per shape, and that each side's best config per shape is the fastest under the model."""

import sys
from collections import Counter
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import isa_compare as X  # noqa: E402
import isa_model as M  # noqa: E402

from torch_flydsl.runtime.artifact import KernelResources  # noqa: E402
from torch_flydsl.runtime.isa import LoopMetrics  # noqa: E402

BF16 = ("m", "v_mfma_f32_16x16x32_bf16")


def candidate(key, bm, bn, bk, waves, mfmas_per_tile, split=1, persistent=None, r_max=1):
    """A stand-in for a compiled config (plumbing only): a loop of ``mfmas_per_tile`` MFMAs and a
    branch, one K tile per iteration."""
    ops = [BF16] * mfmas_per_tile + [("s",)]
    metrics = LoopMetrics(None, len(ops), mfmas_per_tile, 0, 0, (), (), (), 0, 1, 0, 1, 1.0)
    kr = KernelResources(key, 64, 0, 32, 0, 0, 0, 0, waves * 64, 64)
    return X.Candidate("plugin", key, bm, bn, bk, waves, split, 1, kr, ops, metrics, Counter({BF16[1]: mfmas_per_tile}),
                       0, False, r_max, persistent=persistent)


def test_dense_split_k_work():
    c = candidate("sk", 16, 64, 128, 4, 4, split=4)
    w = X.work_for(c, "dense", (1, 4096, 4096))
    assert (w.grid, w.tiles, w.k_tiles, w.split_handoff) == (64 * 4, 1, 8, True)
    assert w.hbm_bytes == 2 * (4096 + 4096 * 4096) + 2 * 4096 + 2 * 4 * 4 * 4096


def test_mx_work_counts_packed_operands_and_scales():
    c = candidate("mx", 128, 128, 256, 4, 4)
    w = X.work_for(c, "mxfp4", (256, 512, 1024))
    assert (w.grid, w.k_tiles, w.split_handoff) == (2 * 4, 4, False)
    assert w.hbm_bytes == 0.5 * (256 + 512) * 1024 + 2 * 256 * 512 + (256 + 512) * 1024 / 32


def test_grouped_work_walks_tiles_over_the_persistent_grid():
    c = candidate("grp", 128, 256, 64, 8, 32, persistent=lambda shape: 100)
    w = X.work_for(c, "grouped", (8192, 8, 4096, 2048))
    tiles = 8 * (1024 // 128) * (4096 // 256)
    assert (w.grid, w.tiles, w.k_tiles) == (100, -(-tiles // 100), 2048 // 64)
    assert w.hbm_bytes == 2 * (8192 * 2048 + 8 * 2048 * 4096) + 2 * 8192 * 4096


def test_best_is_the_fastest_compiled_candidate():
    slow = candidate("slow", 128, 128, 64, 4, 32)
    fast = candidate("fast", 128, 128, 64, 4, 16)
    broken = X.Candidate("plugin", "broken", 128, 128, 64, 4, 1, 1, None, [], None, Counter(), 0, False, 1,
                         error="CompileError: x")
    c = M.Constants()
    for model in ("sim", "static"):
        best, us = X.best([slow, broken, fast], "dense", (4096, 4096, 4096), model, c)
        assert best is fast and us == pytest.approx(X.time_us(fast, "dense", (4096, 4096, 4096), model, c))
        assert us < X.time_us(slow, "dense", (4096, 4096, 4096), model, c)
    none, us = X.best([broken], "dense", (1, 1, 1), "sim", c)
    assert none is None and us != us  # nothing compiled: no best, a NaN time


def test_an_unknown_family_or_constant_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as e:
        X.parse_args(["--families", "dense,sparse"])
    assert e.value.code == 2 and "unknown families ['sparse']" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        X.parse_args(["--set", "lds=256"])
    assert "constants are" in capsys.readouterr().err
    assert X.parse_args(["--set", "lds_bytes_per_clk=256"]).constants.lds_bytes_per_clk == 256


def test_the_device_benches_time_every_shape_the_report_models():
    import isa_shapes as S

    from torch_flydsl.bench import grouped_mm, scaled_mm

    assert set(S.MX_SHAPES) <= set(scaled_mm.SUITE)
    name, spec = S.GROUPED_MODEL
    moe = grouped_mm.MODELS[name]
    assert (moe.experts, moe.top_k, moe.hidden, moe.inter) == (spec["experts"], spec["top_k"], spec["hidden"], spec["inter"])
    assert set(S.GROUPED_TOKENS) <= set(grouped_mm.TOKENS)
    # the report's (tokens, experts, N, K) are that model's gate_up at those token counts
    assert {(t, moe.experts, 2 * moe.inter, moe.hidden) for t in S.GROUPED_TOKENS} == set(S.GROUPED_SHAPES)
