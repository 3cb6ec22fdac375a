"""MX scaled GEMM configs: search spaces, keys, byte geometry per format, and which problems a
config declines (no FlyDSL)."""

import itertools
import subprocess
import sys

import pytest
import torch

from torch_flydsl.templates.base import Decline
from torch_flydsl.templates.scaled_gemm import (
    BASELINE,
    ScaledGemmConfig,
    ScaledGemmProblem,
    config_fits,
    configs_for,
    grid_block,
    search_space,
)
from torch_flydsl.templates.scaled_gemm.config import CURATED, LDS_LIMIT_BYTES, MAX_VMCNT
from torch_flydsl.templates.scaled_gemm.problem import FORMATS

PAIRS = list(itertools.product(FORMATS.values(), repeat=2))


def test_importing_the_family_does_not_import_flydsl():
    code = ("import sys, torch_flydsl.templates.scaled_gemm as sg; sg.configs_for(sg.ScaledGemmProblem(32, 64, 256), "
            "'curated'); print(any(m == 'flydsl' or m.startswith('flydsl.') for m in sys.modules))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert r.stdout.strip() == "False"


def test_baseline_is_exactly_one_config_that_fits_every_format_pair():
    (cfg,) = search_space("baseline")
    assert cfg == BASELINE and cfg.key() == "mx_m128n128k128_w2x2_s3_g0_c2" and cfg.threads == 256
    assert all(cfg.fits_formats(a, b) for a, b in PAIRS)


def test_curated_is_short_distinct_and_every_config_fits_every_format_pair():
    # Every pair but for the MXFP4-only tiles (two deep ones, the 4-stage 256 x 256, the ping-pong
    # 256 x 256 x 256), which fit MXFP4 (e2m1 x e2m1) and say why not the others.
    cur = search_space("curated")
    assert 6 <= len(cur) <= 21 and len({c.key() for c in cur}) == len(cur) and BASELINE in cur
    fp4 = FORMATS["e2m1"]
    fp4_only = {"mx_m32n64k512_w1x4_s6_g0_c4", "mx_m64n128k256_w2x2_s5_g0_c4", "mx_m256n256k128_w4x2_s4_g8_c4",
                "mx_m256n256k256_w2x4_s2_g8_pp"}
    assert {c.key() for c in cur if not all(c.fits_formats(a, b) for a, b in PAIRS)} == fp4_only
    for cfg in cur:
        for a, b in PAIRS if cfg.key() not in fp4_only else [(fp4, fp4)]:
            for out in (torch.bfloat16, torch.float16):
                assert cfg.fits_formats(a, b, out), (cfg, a, b, cfg.format_problems(a, b, out))
                assert cfg.lds_bytes(a, b, out) <= LDS_LIMIT_BYTES
    for key in fp4_only:
        cfg = ScaledGemmConfig.from_key(key)
        assert (cfg.stages >= 4 or cfg.pingpong) and "exceeds" in cfg.format_problems(FORMATS["e4m3"],
                                                                                     FORMATS["e4m3"])[0]
    # The plain pipeline's no-drain shape (3+ stages, multi-tile scale chunks), but for the
    # ping-pong tiles (2 stages, scales per tile: scaled_gemm.pingpong).
    assert all(c.stages > 2 and c.chunk > 1 for c in cur if not c.pingpong) and any(c.group_m for c in cur)
    assert all(c.stages == 2 and c.chunk == 1 for c in cur if c.pingpong) and any(c.pingpong for c in cur)
    assert {c.block_k for c in cur} == {128, 256, 512}


def test_a_decode_config_fills_256_cus_at_m32_n4096():
    problem = ScaledGemmProblem(32, 4096, 4096, "e4m3", "e4m3")
    fitting, _ = configs_for(problem, "curated")
    best = max(grid_block(c, 32, 4096)[0][0] for c in fitting)
    assert best >= 256  # one workgroup per MI355X CU at least
    for fmt in ("e2m1", "e4m3"):  # also with MXFP4 (and W4A8) weights
        fitting, _ = configs_for(ScaledGemmProblem(32, 4096, 4096, "e4m3", fmt), "curated")
        assert max(grid_block(c, 32, 4096)[0][0] for c in fitting) >= 256


def test_keys_round_trip_and_are_not_dense_keys():
    for cfg in search_space("curated"):
        assert ScaledGemmConfig.from_key(cfg.key()) == cfg and str(cfg) == cfg.key()
    for bad in ("m128n128k64_w2x2_s2_g0", "mx_m128", "mx_m1n2k3_w1x1_s2_gX"):
        with pytest.raises(ValueError):
            ScaledGemmConfig.from_key(bad)


def test_exhaustive_holds_only_configs_that_compile_for_some_format_pair():
    ex = search_space("exhaustive")
    assert len(ex) > 500 and len({c.key() for c in ex}) == len(ex)
    assert set(search_space("curated")) <= set(ex)
    for cfg in ex[::37]:
        assert cfg.is_valid() and any(cfg.fits_formats(a, b) for a, b in PAIRS)
    with pytest.raises(ValueError, match="breadth"):
        search_space("everything")


@pytest.mark.parametrize(
    "cfg, text",
    [
        (ScaledGemmConfig(128, 128, 64), "block_k=64 is not 128, 256 or 512"),
        (ScaledGemmConfig(128, 128, 640), "block_k=640"),
        (ScaledGemmConfig(24, 128, 128, 1, 2), "block_m=24"),
        (ScaledGemmConfig(128, 128, 128, 8, 4), "threads exceed"),
        (ScaledGemmConfig(128, 128, 128, 2, 2, 7), "stages=7"),
        (ScaledGemmConfig(256, 256, 128, 2, 2), "accumulators per lane"),
    ],
)
def test_static_problems_name_the_reason(cfg, text):
    assert any(text in p for p in cfg.static_problems()), cfg.static_problems()


def test_format_problems_depend_on_the_formats():
    # 16 rows x 128 FP4 values = 64 16-byte vectors: not a whole round for 128 threads; FP8 is.
    cfg = ScaledGemmConfig(16, 32, 128, 1, 2, 2)
    assert cfg.fits_formats(FORMATS["e4m3"], FORMATS["e4m3"])
    assert any("A tile" in p for p in cfg.format_problems(FORMATS["e2m1"], FORMATS["e4m3"]))
    big = ScaledGemmConfig(256, 128, 512, 4, 2, 2)  # 2 x (256 + 128) x 512 B of FP8 > 160 KiB
    assert any("LDS" in p for p in big.format_problems(FORMATS["e4m3"], FORMATS["e4m3"]))
    deep = ScaledGemmConfig(32, 32, 512, 1, 1, 4)
    tb = deep.tile_bytes(FORMATS["e4m3"], FORMATS["e4m3"])
    assert 2 * tb.data_per_tile + tb.scales_per_chunk > MAX_VMCNT
    assert any("vmcnt" in p for p in deep.format_problems(FORMATS["e4m3"], FORMATS["e4m3"]))


def test_scale_dmas_round_up_to_whole_rounds():
    # 16 rows x 1 dword of scales per K tile, 128 threads: one round with 112 padding lanes.
    tb = ScaledGemmConfig(16, 32, 128, 1, 2, 2).tile_bytes(FORMATS["e4m3"], FORMATS["e4m3"])
    assert (tb.sa_dma, tb.sb_dma, tb.scale_slots_a) == (1, 1, 128)
    # A chunk of 4 K tiles: 16 x 4 and 32 x 4 dwords, still one round each.
    tb = ScaledGemmConfig(16, 32, 128, 1, 2, 3, 0, 4).tile_bytes(FORMATS["e4m3"], FORMATS["e4m3"])
    assert (tb.chunk_dwords, tb.sa_dma, tb.sb_dma, tb.scales_per_chunk) == (4, 1, 1, 2)
    # 128 x 256 (4 K tiles of 2 MFMA steps) x 2 operands over 256 threads: 2 rounds each.
    tb = ScaledGemmConfig(128, 128, 256, 2, 2, 3, 0, 4).tile_bytes(FORMATS["e4m3"], FORMATS["e4m3"])
    assert (tb.chunk_dwords, tb.sa_dma, tb.sb_dma) == (8, 4, 4)
    tb = BASELINE.tile_bytes(FORMATS["e2m1"], FORMATS["e4m3"])
    assert (tb.a_row, tb.b_row, tb.a_dma, tb.b_dma) == (64, 128, 2, 4)


@pytest.mark.parametrize(
    "problem, category, text",
    [
        (ScaledGemmProblem(64, 64, 192), "shape", "not a multiple of block_k=128"),
        (ScaledGemmProblem(64, 64, 0), "shape", "empty"),
        (ScaledGemmProblem(64, 64, 256, out_dtype=torch.float32), "dtype", "not bfloat16 or float16"),
        (ScaledGemmProblem(64, 64, 256, a_format="e3m2"), "dtype", "unknown MX formats"),
        (ScaledGemmProblem(2**31, 64, 256), "shape", "int32"),
    ],
)
def test_config_fits_declines_with_a_reason(problem, category, text):
    d = config_fits(BASELINE, problem)
    assert isinstance(d, Decline) and d.category == category and text in d.reason, d


def test_configs_for_splits_fitting_and_declined():
    fitting, declined = configs_for(ScaledGemmProblem(40, 72, 384, "e2m1", "e2m1"), "curated")
    assert all(c.block_k == 128 for c in fitting) and fitting
    assert {c for c, _ in declined} == {c for c in search_space("curated") if c.block_k != 128}
    assert all("block_k" in d.reason for _, d in declined)


@pytest.mark.parametrize("m, k, expected", [
    (1, 4096, "mx_m16n32k512_w1x2_s4_g0_c4"),
    (32, 4096, "mx_m32n16k512_w2x1_s3_g0_c2"),
    (32, 768, "mx_m32n16k256_w2x1_s3_g0_c2"),  # K not a multiple of 512: the shallower decode tile
    (32, 384, "mx_m64n64k128_w2x2_s3_g0_c4"),  # K not a multiple of 256: the next size's tile
    (64, 4096, "mx_m64n64k128_w2x2_s3_g0_c4"),
    (4096, 4096, "mx_m128n128k128_w2x2_s3_g0_c2"),
    (64, 128, "mx_m64n64k128_w2x2_s3_g0_c4"),
    (128, 4096, "mx_m32n64k256_w1x4_s3_g0_c2"),
])
def test_autotuning_off_offers_one_curated_config_picked_by_m(m, k, expected):
    fitting, _ = configs_for(ScaledGemmProblem(m, 4096, k, "e4m3", "e2m1"), "baseline")
    assert [c.key() for c in fitting] == [expected] and fitting[0] in CURATED


def test_autotuning_off_fills_256_cus_at_decode():
    (cfg,), _ = configs_for(ScaledGemmProblem(32, 4096, 4096), "baseline")
    assert grid_block(cfg, 32, 4096)[0][0] >= 256
