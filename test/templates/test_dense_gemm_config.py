"""Dense GEMM configs: search spaces, keys, and which problems a config declines (no FlyDSL)."""

import sys

import pytest
import torch

from torch_flydsl.templates.base import Decline
from torch_flydsl.templates.dense_gemm import config as C
from torch_flydsl.templates.dense_gemm.config import DenseGemmConfig, config_fits, search_space
from torch_flydsl.templates.dense_gemm.problem import GemmProblem

BF16 = torch.bfloat16


def test_importing_the_config_does_not_import_flydsl():
    # In a fresh process: reloading the module here would replace DenseGemmConfig, and configs
    # made before the reload would no longer pickle (compile workers receive them pickled).
    import subprocess

    code = ("import sys, torch_flydsl.templates.dense_gemm.config as C; C.search_space('curated'); "
            "print(any(m == 'flydsl' or m.startswith('flydsl.') for m in sys.modules))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert r.stdout.strip() == "False"


def test_baseline_is_exactly_one_valid_config():
    (cfg,) = search_space("baseline")
    assert cfg == C.BASELINE and cfg.is_valid()
    assert cfg.key() == "m128n128k32_w2x2_s4_g0"
    assert cfg.threads == 256


def test_curated_is_short_valid_distinct_and_covers_decode_and_large_tiles():
    cur = search_space("curated")
    assert 6 <= len(cur) <= 20
    assert len({c.key() for c in cur}) == len(cur)
    assert all(c.is_valid() for c in cur), [c.static_problems() for c in cur]
    assert C.BASELINE in cur
    assert min(c.block_m for c in cur) == 16  # decode-sized M
    assert max(c.block_m * c.block_n for c in cur) >= 256 * 128
    assert any(c.group_m for c in cur) and any(c.split_k > 1 for c in cur)
    # Every curated config keeps at least two K tiles in flight across its barrier (the steady
    # loop never waits for vmcnt(0); benchmarks/isa_report.py checks the ISA).
    assert all(c.stages >= 3 for c in cur)


def test_exhaustive_is_pruned_to_compilable_configs():
    ex = search_space("exhaustive")
    assert len(ex) > 100
    assert set(search_space("curated")) <= set(ex)
    for c in ex:
        assert c.lds_bytes <= 160 * 1024
        assert c.threads <= 1024
        assert c.block_m % (16 * c.m_waves) == 0 and c.block_n % (16 * c.n_waves) == 0
        assert (c.block_m * c.block_k // 8) % c.threads == 0
        assert (c.block_n * c.block_k // 8) % c.threads == 0
        assert c.acc_regs_per_lane <= C.MAX_ACC_REGS_PER_LANE


def test_unknown_breadth_raises():
    with pytest.raises(ValueError, match="breadth"):
        search_space("everything")


@pytest.mark.parametrize("cfg", search_space("exhaustive")[::37] + search_space("curated"), ids=str)
def test_key_round_trips(cfg):
    assert DenseGemmConfig.from_key(cfg.key()) == cfg


@pytest.mark.parametrize("bad", ["", "m128n128k64", "m128n128k64_w2x2_s2", "x128n128k64_w2x2_s2_g0"])
def test_from_key_rejects_malformed_keys(bad):
    with pytest.raises(ValueError):
        DenseGemmConfig.from_key(bad)


def test_static_problems_are_explained():
    assert any("LDS" in p for p in DenseGemmConfig(256, 256, 128, 2, 4, 3, 0).static_problems())
    assert any("block_m" in p for p in DenseGemmConfig(48, 64, 64, 2, 2, 2, 0).static_problems())
    assert any("threads" in p for p in DenseGemmConfig(16, 64, 64, 1, 4, 2, 0).static_problems())


@pytest.mark.parametrize("layout", ["nn", "nt", "tn", "tt"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_baseline_takes_ragged_m_and_n(layout, dtype):
    p = GemmProblem.from_layout(1000, 333, 4096, dtype, layout, bias="row")
    assert config_fits(C.BASELINE, p) is None


def test_decode_shapes_fit_small_tiles():
    p = GemmProblem.from_layout(1, 4096, 4096, BF16, "nt")
    assert all(config_fits(c, p) is None for c in search_space("curated"))


@pytest.mark.parametrize(
    "cfg, problem, category, text",
    [
        (DenseGemmConfig(16, 64, 128, 1, 4, 3, 0, 4), GemmProblem.from_layout(4096, 4096, 4096, BF16, "nt"),
         "fit", "fill 256 CUs"),
        (DenseGemmConfig(16, 64, 128, 1, 4, 3, 0, 8), GemmProblem.from_layout(1, 4096, 1024, BF16, "nt"),
         "fit", "too few for 8 splits"),
        (C.BASELINE, GemmProblem.from_layout(128, 128, 0, BF16, "nt"), "shape", "empty"),
        (C.BASELINE, GemmProblem.from_layout(128, 128, 128, torch.float32, "nt"), "dtype", "float32"),
        (DenseGemmConfig(256, 256, 128, 2, 4, 3, 0), GemmProblem.from_layout(512, 512, 512, BF16, "nt"), "config", "LDS"),
    ],
)
def test_config_fits_declines_with_a_reason(cfg, problem, category, text):
    d = config_fits(cfg, problem)
    assert isinstance(d, Decline)
    assert d.category == category
    assert text in d.reason


def test_any_k_fits_every_config_k_tails_are_masked():
    cfg = DenseGemmConfig(16, 64, 128, 1, 2, 4, 0)  # 4 stages; K of one (partial) tile still fits
    for k in (8, 100, 128, 192, 4104):
        assert config_fits(cfg, GemmProblem.from_layout(5, 7, k, BF16, "tn")) is None


def test_split_k_is_offered_where_output_tiles_leave_cus_idle_and_every_split_has_k_tiles():
    cfg = DenseGemmConfig(16, 64, 128, 1, 4, 3, 0, 4)
    assert config_fits(cfg, GemmProblem.from_layout(1, 4096, 4096, BF16, "nt")) is None  # 64 tiles
    assert config_fits(cfg, GemmProblem.from_layout(16, 16384, 4096, BF16, "nt")) is not None  # 256 tiles
    assert config_fits(cfg, GemmProblem.from_layout(1, 4096, 5 * 128, BF16, "nt")) is not None  # 2+2+1+0 tiles
    assert config_fits(cfg, GemmProblem.from_layout(1, 4096, 4 * 128, BF16, "nt")) is not None  # 1 tile per split
    assert config_fits(cfg, GemmProblem.from_layout(1, 4096, 7 * 128, BF16, "nt")) is None  # 2+2+2+1


def test_split_k_keys_round_trip_and_only_dense_takes_them():
    cfg = DenseGemmConfig(16, 64, 128, 1, 4, 3, 0, 8)
    assert cfg.key() == "m16n64k128_w1x4_s3_g0_sk8"
    assert DenseGemmConfig.from_key(cfg.key()) == cfg
    assert DenseGemmConfig(16, 64, 128, 1, 4, 3, 0).key() == "m16n64k128_w1x4_s3_g0"  # unchanged keys
    from torch_flydsl.templates.grouped_gemm.config import GroupedGemmConfig
    from torch_flydsl.templates.scaled_gemm.config import ScaledGemmConfig

    with pytest.raises(ValueError, match="split-K"):
        ScaledGemmConfig.from_key("mx_m32n16k512_w2x1_s3_g0_sk4")
    with pytest.raises(ValueError, match="split-K"):
        GroupedGemmConfig.from_key("grp_m32n128k64_w1x4_s3_g0_sk4")


def test_package_exports_resolve_to_the_named_objects_whatever_was_imported_first():
    # The package resolves names lazily; a submodule sharing a name with its export
    # (reference.reference) must still give the function.
    import importlib

    import torch_flydsl.templates.dense_gemm as pkg

    importlib.import_module("torch_flydsl.templates.dense_gemm.reference")
    for name in pkg.__all__:
        assert callable(getattr(pkg, name)) or name in ("BASELINE", "CURATED", "KERNEL_VERSION"), name


def test_baseline_breadth_picks_one_config_by_m():
    def pick(m, n, k):
        (cfg,), declined = C.configs_for(GemmProblem.from_layout(m, n, k, BF16, "nt"), "baseline")
        assert declined == []
        return cfg.key()

    assert pick(1, 4096, 4096) == "m16n64k128_w1x4_s3_g0_sk4"  # 64 tiles: split-K fills the GPU
    assert pick(16, 16384, 4096) == "m16n64k128_w1x4_s3_g0"  # 256 tiles already
    assert pick(16, 4096, 256) == "m16n64k128_w1x4_s3_g0"  # 2 K tiles: nothing to split
    assert pick(32, 4096, 4096) == "m32n64k128_w2x2_s3_g0_sk4"
    assert pick(33, 4096, 4096) == pick(4096, 4096, 4096) == C.BASELINE.key()


def test_prefetch_keys_round_trip_and_the_prefetch_loop_needs_three_stages_and_no_split_k():
    from torch_flydsl.templates.grouped_gemm import GroupedGemmConfig

    cfg = DenseGemmConfig(256, 256, 32, 2, 4, 4, 8, prefetch=1)
    assert cfg.key() == "m256n256k32_w2x4_s4_g8_rp" and DenseGemmConfig.from_key(cfg.key()) == cfg
    assert DenseGemmConfig.from_key("m256n256k32_w2x4_s4_g8") == DenseGemmConfig(256, 256, 32, 2, 4, 4, 8)
    assert DenseGemmConfig.from_key("m16n64k128_w1x4_s3_g0_sk4").split_k == 4
    grouped = GroupedGemmConfig(256, 256, 32, 2, 4, 4, 0, prefetch=1)
    assert GroupedGemmConfig.from_key(grouped.key()) == grouped and grouped.key().endswith("_rp")
    assert any("stages >= 3" in p for p in DenseGemmConfig(64, 64, 64, 2, 2, 2, 0, prefetch=1).static_problems())
    assert any("split-K" in p for p in DenseGemmConfig(64, 64, 64, 2, 2, 3, 0, 4, prefetch=1).static_problems())
    # The prologue keeps stages - 1 tiles in flight: 64 x (DMAs per tile) must fit vmcnt.
    assert DenseGemmConfig(64, 64, 128, 1, 1, 3, 0).is_valid()
    assert any("vmcnt" in p for p in DenseGemmConfig(64, 64, 128, 1, 1, 3, 0, prefetch=1).static_problems())
