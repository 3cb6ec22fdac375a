"""Dense GEMM numerics in the CPU emulator, beyond the emulator suite's matrix: group-M block
order over many tiles, a single K tile under a 4-stage pipeline, decode-sized M, expanded and
beta == 0 biases, N tails inside a 16-byte store vector (the harness checks that nothing
outside out[:M, :N] is written and the accuracy contract of ``dense_cases``).
"""

import pytest
import torch

pytest.importorskip("flydsl")

from torch_flydsl.templates.dense_gemm import BASELINE  # noqa: E402
from torch_flydsl.templates.dense_gemm.config import DenseGemmConfig  # noqa: E402

from dense_cases import emulate_gemm  # noqa: E402

pytestmark = pytest.mark.emulator


def test_group_m_block_order_over_many_tiles():
    cfg = DenseGemmConfig(64, 64, 64, 2, 2, 2, 2)
    rep = emulate_gemm(cfg, 64 * 5 - 3, 64 * 3 + 8, 128, "nt", pad=8, offset=8)
    assert rep.ok, rep


def test_group_m_with_xcd_remap():
    # 4 x 4 = 16 tiles split evenly over 8 XCDs, so the XCD remap is active.
    cfg = DenseGemmConfig(32, 32, 32, 1, 1, 2, 2)
    rep = emulate_gemm(cfg, 32 * 4 - 6, 32 * 4, 64, "tn", pad=8)  # even M: see eligibility
    assert rep.ok, rep


@pytest.mark.parametrize("layout", ["tt", "nn"])
def test_single_k_tile_with_a_four_stage_pipeline(layout):
    cfg = DenseGemmConfig(16, 64, 128, 1, 2, 4, 0)
    assert cfg.is_valid()
    rep = emulate_gemm(cfg, 6, 70, 128, layout, pad=8)
    assert rep.ok, rep


def test_many_k_tiles_wrap_three_stages():
    cfg = DenseGemmConfig(64, 64, 64, 2, 2, 3, 0)
    rep = emulate_gemm(cfg, 64, 64, 7 * 64, "tn", dtype=torch.float16)
    assert rep.ok, rep


def test_decode_row_with_bias():
    cfg = DenseGemmConfig(16, 128, 128, 1, 4, 2, 0)
    rep = emulate_gemm(cfg, 1, 200, 256, "nt", bias="vector", alpha=1.0, beta=1.0)
    assert rep.ok, rep


def test_expanded_bias_is_read_as_a_vector():
    rep = emulate_gemm(BASELINE, 130, 72, 64, "nn", bias="expanded", alpha=-0.5, beta=0.25)
    assert rep.ok, rep


def test_beta_zero_ignores_a_nan_bias_like_addmm():
    rep = emulate_gemm(BASELINE, 40, 48, 64, "nt", bias="nan", alpha=2.0, beta=0.0)
    assert rep.ok, rep


def test_n_tail_inside_a_store_vector_with_aligned_ldc():
    # N = 100: the last 16-byte vector of each row holds 4 valid columns; ldc = 104 + 8 keeps
    # rows 16-byte aligned, so full vectors go out whole and the tail element by element.
    rep = emulate_gemm(BASELINE, 70, 100, 64, "tt", pad=8)
    assert rep.ok, rep


def test_a_planted_low_precision_accumulator_breaks_the_accuracy_contract(monkeypatch, request):
    # The accumulator rounded to bf16 after every K tile (32 of them): no memory or race
    # finding, every output written, errors ~3x PyTorch's own. The contract must fail it.
    import flydsl.expr as fx
    from flydsl.expr import range_constexpr

    from torch_flydsl.templates.dense_gemm import kernel, launcher

    class LowPrecisionMma(kernel.Mma):
        def compute_stage(self, stage, issue=None):
            super().compute_stage(stage, issue)
            for i in range_constexpr(fx.size(self.acc.shape).unpack()):
                self.acc[i] = self.acc[i].to(self.spec.elem_type()).to(fx.Float32)

    cfg = DenseGemmConfig(32, 32, 32, 1, 1, 2, 0)
    assert emulate_gemm(cfg, 64, 64, 32 * 32, "nt").ok  # the real kernel meets it
    monkeypatch.setattr(kernel, "Mma", LowPrecisionMma)
    monkeypatch.setattr(kernel, "build", kernel.build.__wrapped__)  # trace afresh
    launcher._kernel.cache_clear()  # the launcher's per-variant cache too (and again after the test)
    request.addfinalizer(launcher._kernel.cache_clear)
    rep = emulate_gemm(cfg, 64, 64, 32 * 32, "nt")
    assert rep.emulation.ok and rep.outputs[0].unwritten == 0
    assert not rep.ok and any("relative error" in r for r in rep.reasons), rep
    out = rep.outputs[0]
    assert out.rel_err > 2 * out.baseline_rel_err
