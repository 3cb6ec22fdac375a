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
    import importlib

    before = {m for m in sys.modules if m == "flydsl" or m.startswith("flydsl.")}
    importlib.reload(C)
    after = {m for m in sys.modules if m == "flydsl" or m.startswith("flydsl.")}
    assert after == before


def test_baseline_is_exactly_one_valid_config():
    (cfg,) = search_space("baseline")
    assert cfg == C.BASELINE and cfg.is_valid()
    assert cfg.key() == "m128n128k64_w2x2_s2_g0"
    assert cfg.threads == 256


def test_curated_is_short_valid_distinct_and_covers_decode_and_large_tiles():
    cur = search_space("curated")
    assert 6 <= len(cur) <= 12
    assert len({c.key() for c in cur}) == len(cur)
    assert all(c.is_valid() for c in cur), [c.static_problems() for c in cur]
    assert C.BASELINE in cur
    assert min(c.block_m for c in cur) == 16  # decode-sized M
    assert max(c.block_m * c.block_n for c in cur) >= 256 * 128
    assert any(c.stages > 2 for c in cur) and any(c.group_m for c in cur)


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
        (C.BASELINE, GemmProblem.from_layout(128, 128, 100, BF16, "nt"), "shape", "block_k=64"),
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


def test_k_multiple_of_block_k_is_the_only_k_requirement():
    cfg = DenseGemmConfig(16, 64, 128, 1, 2, 4, 0)  # 4 stages, K of a single tile still fits
    assert config_fits(cfg, GemmProblem.from_layout(5, 7, 128, BF16, "tn")) is None
    assert config_fits(cfg, GemmProblem.from_layout(5, 7, 192, BF16, "tn")) is not None


def test_package_exports_resolve_to_the_named_objects_whatever_was_imported_first():
    # The package resolves names lazily; a submodule sharing a name with its export
    # (reference.reference) must still give the function.
    import importlib

    import torch_flydsl.templates.dense_gemm as pkg

    importlib.import_module("torch_flydsl.templates.dense_gemm.reference")
    for name in pkg.__all__:
        assert callable(getattr(pkg, name)) or name in ("BASELINE", "CURATED", "KERNEL_VERSION"), name
